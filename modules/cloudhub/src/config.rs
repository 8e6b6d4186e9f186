//! `modules.cloudHub` of KubeEdge's CloudCore configuration, with KubeEdge's defaults, plus a
//! few Rust-only knobs (marked) for limits upstream does not have.

use std::path::PathBuf;
use std::time::Duration;

use kubeedge_api::listener::ListenerLimits;
use serde::{Deserialize, Serialize};

/// Longest `edgeCertSigningDuration` accepted, in days: the CA's own validity (an edge
/// certificate cannot usefully outlive the CA that signed it).
pub(crate) const MAX_EDGE_CERT_SIGNING_DAYS: u32 = pki::CA_VALIDITY_DAYS as u32;

/// The cloudhub module configuration (`modules.cloudHub`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CloudHubConfig {
    /// Whole module on/off (default true).
    pub enable: bool,
    /// Seconds without a keepalive before a session is closed (default 30).
    pub keepalive_interval: u32,
    /// Maximum sessions of this instance (default 500).
    pub node_limit: u32,
    /// CA certificate PEM file; used when it and `tlsCAKeyFile` exist, written when generated
    /// without Kubernetes.
    #[serde(rename = "tlsCAFile")]
    pub tls_ca_file: PathBuf,
    /// CA key PEM file (both or neither).
    #[serde(rename = "tlsCAKeyFile")]
    pub tls_ca_key_file: PathBuf,
    /// Server certificate PEM file.
    pub tls_cert_file: PathBuf,
    /// Server key PEM file (both or neither).
    pub tls_private_key_file: PathBuf,
    /// Seconds a WebSocket write may take before the session is closed (default 30; unused
    /// upstream).
    pub write_timeout: u32,
    /// IP SANs of the server certificate (the addresses edges dial). Required.
    pub advertise_address: Vec<String>,
    /// DNS SANs of the server certificate; empty strings are ignored (default `[""]`).
    pub dns_names: Vec<String>,
    /// Validity of signed edge certificates in days (default 365).
    pub edge_cert_signing_duration: u32,
    /// Hours between token refreshes; a token lives twice as long (default 12).
    pub token_refresh_duration: u32,
    /// The WebSocket listener.
    pub websocket: ListenerConfig,
    /// The QUIC listener: not supported here; enabling it only logs an error.
    pub quic: QuicConfig,
    /// The HTTPS certificate server.
    pub https: ListenerConfig,
    /// The unix socket of the cloud CSI driver bridge (not implemented: logged when enabled).
    pub unixsocket: UnixSocketConfig,
    /// Connection authentication and message admission.
    pub authorization: AuthorizationConfig,

    /// Rust-only: largest accepted WebSocket message in bytes (default 32 MiB).
    pub max_message_size: usize,
    /// Rust-only: seconds to complete TLS and the HTTP upgrade (default 30); an upper bound
    /// on `websocket.limits.preAuthTimeoutSeconds` (the smaller of the two applies).
    pub handshake_timeout: u32,
    /// Rust-only: per-node intake queue; messages beyond it are dropped and counted (1024).
    pub node_queue_size: usize,
    /// Rust-only: un-acknowledged ACK-class messages in flight per node (default 16).
    pub ack_window: usize,
    /// Rust-only: no-ACK messages that may be written back to back before pacing starts; the
    /// edge keeps only the last 100 unread (default 50).
    pub no_ack_burst: u32,
    /// Rust-only: no-ACK writes per second per node once the burst is spent (default 100).
    pub no_ack_rate: u32,
    /// Rust-only: extended key usages (Go numbers) `/edge.crt` may grant besides clientAuth;
    /// empty (default) = clientAuth only, whatever the `ExtKeyUsages` header asks.
    pub allowed_ext_key_usages: Vec<i64>,
    /// Rust-only: worker threads of the server behind the WebSocket and certificate ports
    /// (default 0 = one per CPU).
    pub workers: usize,
    /// Rust-only: export each node's counters as series labelled `node` (default false). Off,
    /// `/metrics` carries the same counters summed over every node; on, it also carries seven
    /// families per node ever held, ~130,000 series at 19,000 edges, which a scrape renders
    /// and Prometheus stores every time. Turn it on to follow individual nodes in a small fleet.
    pub per_node_metrics: bool,
}

impl Default for CloudHubConfig {
    fn default() -> Self {
        CloudHubConfig {
            enable: true,
            keepalive_interval: 30,
            node_limit: 500,
            tls_ca_file: "/etc/kubeedge/ca/rootCA.crt".into(),
            tls_ca_key_file: "/etc/kubeedge/ca/rootCA.key".into(),
            tls_cert_file: "/etc/kubeedge/certs/server.crt".into(),
            tls_private_key_file: "/etc/kubeedge/certs/server.key".into(),
            write_timeout: 30,
            advertise_address: Vec::new(),
            dns_names: vec![String::new()],
            edge_cert_signing_duration: 365,
            token_refresh_duration: 12,
            websocket: ListenerConfig::port(10000),
            quic: QuicConfig::default(),
            https: ListenerConfig::port(10002),
            unixsocket: UnixSocketConfig::default(),
            authorization: AuthorizationConfig::default(),
            max_message_size: 32 * 1024 * 1024,
            handshake_timeout: 30,
            node_queue_size: 1024,
            ack_window: 16,
            no_ack_burst: 50,
            no_ack_rate: 100,
            allowed_ext_key_usages: Vec::new(),
            workers: 0,
            per_node_metrics: false,
        }
    }
}

impl CloudHubConfig {
    /// `keepaliveInterval` as a duration (at least 1 s).
    pub fn keepalive(&self) -> Duration {
        Duration::from_secs(u64::from(self.keepalive_interval.max(1)))
    }

    /// `writeTimeout` as a duration (at least 1 s).
    pub fn write_deadline(&self) -> Duration {
        Duration::from_secs(u64::from(self.write_timeout.max(1)))
    }

    /// Token lifetime: twice `tokenRefreshDuration`.
    pub fn token_lifetime(&self) -> Duration {
        self.token_refresh() * 2
    }

    /// `tokenRefreshDuration` as a duration (at least 1 h).
    pub fn token_refresh(&self) -> Duration {
        Duration::from_secs(u64::from(self.token_refresh_duration.max(1)) * 3600)
    }

    /// Where the current token is written for operators without Kubernetes: `tokendata`
    /// beside `tlsCAFile`.
    pub fn token_file(&self) -> PathBuf {
        self.tls_ca_file
            .parent()
            .map(|d| d.join("tokendata"))
            .unwrap_or_else(|| PathBuf::from("tokendata"))
    }

    /// Checks what upstream treats as fatal: no `advertiseAddress`, a zero token refresh, a
    /// listener address that is not an IP; and an `edgeCertSigningDuration` beyond 36 400
    /// days (the CA's own validity) or `authorization.enforceIdentity: false`.
    pub fn validate(&self) -> Result<(), String> {
        if self.edge_cert_signing_duration > MAX_EDGE_CERT_SIGNING_DAYS {
            return Err(format!(
                "edgeCertSigningDuration {} days is more than {MAX_EDGE_CERT_SIGNING_DAYS} (the CA's validity)",
                self.edge_cert_signing_duration
            ));
        }
        if self.advertise_address.iter().all(|a| a.trim().is_empty()) {
            return Err("advertiseAddress must not be empty".into());
        }
        if self.token_refresh_duration == 0 {
            return Err("tokenRefreshDuration must be > 0".into());
        }
        if !self.authorization.enforce_identity {
            return Err(
                "authorization.enforceIdentity: false is not supported: an edge's certificate must name the node it connects as (remove the key)"
                    .into(),
            );
        }
        for (name, l) in [("websocket", &self.websocket), ("https", &self.https)] {
            if l.address.parse::<std::net::IpAddr>().is_err() {
                return Err(format!("{name}.address {:?} is not an IP", l.address));
            }
        }
        Ok(())
    }
}

/// One TCP listener (`websocket`, `https`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListenerConfig {
    /// Listener on/off.
    pub enable: bool,
    /// Bind IP (default `0.0.0.0`).
    pub address: String,
    /// Bind port.
    pub port: u16,
    /// Rust-only: admission limits (`maxConnections` 10000, `maxHandshakes` 1024,
    /// `maxUnauthenticatedPerIP` 64, `preAuthTimeoutSeconds` 10). Every accepted socket is
    /// admitted before any TLS work; a refused one is closed without being read.
    pub limits: ListenerLimits,
    /// Rust-only, certificate server only: seconds a request may take to deliver its body
    /// once its head was accepted (default 30; 0 = no limit). A stalled upload is cut off
    /// with 408 and the connection closed.
    pub request_timeout_seconds: u32,
}

impl ListenerConfig {
    fn port(port: u16) -> Self {
        ListenerConfig {
            enable: true,
            address: "0.0.0.0".into(),
            port,
            limits: ListenerLimits::default(),
            request_timeout_seconds: 30,
        }
    }

    /// `requestTimeoutSeconds` as a duration; `None` when 0 (no limit).
    pub fn request_timeout(&self) -> Option<Duration> {
        (self.request_timeout_seconds > 0)
            .then(|| Duration::from_secs(u64::from(self.request_timeout_seconds)))
    }

    /// `address:port`.
    pub fn socket_addr(&self) -> String {
        format!("{}:{}", self.address, self.port)
    }
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig::port(0)
    }
}

/// `quic` (unsupported: gQUIC with no client authentication, see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct QuicConfig {
    /// Default false; true only logs an error.
    pub enable: bool,
    /// Default `0.0.0.0`.
    pub address: String,
    /// Default 10001.
    pub port: u16,
    /// Default 10000.
    pub max_incoming_streams: u32,
}

impl Default for QuicConfig {
    fn default() -> Self {
        QuicConfig {
            enable: false,
            address: "0.0.0.0".into(),
            port: 10001,
            max_incoming_streams: 10000,
        }
    }
}

/// `unixsocket`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UnixSocketConfig {
    /// Default true, as upstream: the composition serves the socket (crate `udsserver`).
    pub enable: bool,
    /// Default `unix:///var/lib/kubeedge/kubeedge.sock`.
    pub address: String,
}

impl Default for UnixSocketConfig {
    fn default() -> Self {
        UnixSocketConfig {
            enable: true,
            address: "unix:///var/lib/kubeedge/kubeedge.sock".into(),
        }
    }
}

/// `authorization`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AuthorizationConfig {
    /// Default false. Note: the certificate/node-id match at connect time is enforced
    /// regardless (see [`AuthorizationConfig::enforce_identity`]).
    pub enable: bool,
    /// Default true: with authorization enabled, only log denials.
    pub debug: bool,
    /// Default `[{node: {enable: true}}]`.
    pub modes: Vec<AuthorizationMode>,
    /// Rust-only, kept so that configurations written for earlier versions load: a connection
    /// whose client certificate CN is not `system:node:<Node_id>` is always refused (403).
    /// Only `true` is accepted; `false` is a configuration error, because without the check
    /// one edge's certificate speaks for any node.
    pub enforce_identity: bool,
}

impl Default for AuthorizationConfig {
    fn default() -> Self {
        AuthorizationConfig {
            enable: false,
            debug: true,
            modes: vec![AuthorizationMode::default()],
            enforce_identity: true,
        }
    }
}

/// One authorization mode (`node` is the only one upstream has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AuthorizationMode {
    /// The node authorizer.
    pub node: NodeAuthorization,
}

impl Default for AuthorizationMode {
    fn default() -> Self {
        AuthorizationMode {
            node: NodeAuthorization { enable: true },
        }
    }
}

/// `modes[].node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeAuthorization {
    /// Default true.
    pub enable: bool,
}

impl Default for NodeAuthorization {
    fn default() -> Self {
        NodeAuthorization { enable: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeedge_yaml_keys_parse_and_defaults_fill_the_rest() {
        let yaml = r#"
enable: true
keepaliveInterval: 45
nodeLimit: 1000
tlsCAFile: /x/ca.crt
tlsCAKeyFile: /x/ca.key
advertiseAddress: [192.168.1.10]
dnsNames: [""]
edgeCertSigningDuration: 30
tokenRefreshDuration: 6
websocket: {enable: true, address: 127.0.0.1, port: 20000}
quic: {enable: false, maxIncomingStreams: 5}
https: {port: 20002}
unixsocket: {enable: false}
authorization: {enable: true, debug: false, modes: [{node: {enable: true}}]}
somethingNew: ignored
"#;
        let c: CloudHubConfig = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(c.keepalive_interval, 45);
        assert_eq!(c.node_limit, 1000);
        assert_eq!(c.tls_ca_file, PathBuf::from("/x/ca.crt"));
        assert_eq!(
            c.tls_cert_file,
            PathBuf::from("/etc/kubeedge/certs/server.crt")
        );
        assert_eq!(c.websocket.port, 20000);
        assert_eq!(c.https.address, "0.0.0.0");
        assert_eq!(c.https.port, 20002);
        assert_eq!(c.quic.max_incoming_streams, 5);
        assert!(c.authorization.enable && !c.authorization.debug);
        assert_eq!(c.token_lifetime(), Duration::from_secs(12 * 3600));
        assert_eq!(c.token_file(), PathBuf::from("/x/tokendata"));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn defaults_are_kubeedge_defaults() {
        let c = CloudHubConfig::default();
        assert_eq!(
            (c.keepalive_interval, c.node_limit, c.write_timeout),
            (30, 500, 30)
        );
        assert_eq!(
            (c.websocket.port, c.quic.port, c.https.port),
            (10000, 10001, 10002)
        );
        assert_eq!(c.dns_names, [""]);
        assert_eq!(
            (c.edge_cert_signing_duration, c.token_refresh_duration),
            (365, 12)
        );
        assert!(
            !c.quic.enable
                && c.unixsocket.enable
                && !c.authorization.enable
                && c.authorization.debug
        );
        assert_eq!(c.max_message_size, 33_554_432);
        assert!(c.validate().is_err(), "advertiseAddress is required");
    }

    #[test]
    fn listener_limits_and_request_timeout_parse_under_each_listener() {
        let yaml = r#"
advertiseAddress: [10.0.0.1]
websocket: {port: 10000, limits: {maxConnections: 5000, maxUnauthenticatedPerIP: 8}}
https: {port: 10002, requestTimeoutSeconds: 0, limits: {preAuthTimeoutSeconds: 3}}
"#;
        let c: CloudHubConfig = serde_saphyr::from_str(yaml).unwrap();
        let ws = &c.websocket.limits;
        assert_eq!(
            (ws.max_connections, ws.max_unauthenticated_per_ip),
            (5000, 8)
        );
        assert_eq!((ws.max_handshakes, ws.pre_auth_timeout_seconds), (1024, 10));
        assert_eq!(c.https.limits.pre_auth_timeout_seconds, 3);
        assert_eq!(c.https.request_timeout(), None, "0 turns the deadline off");
        let d = CloudHubConfig::default();
        assert_eq!(d.https.request_timeout(), Some(Duration::from_secs(30)));
        assert_eq!(d.websocket.limits, ListenerLimits::default());
    }

    #[test]
    fn an_edge_cert_signing_duration_beyond_the_ca_lifetime_is_refused() {
        let mut c = CloudHubConfig {
            advertise_address: vec!["10.0.0.1".into()],
            edge_cert_signing_duration: MAX_EDGE_CERT_SIGNING_DAYS,
            ..CloudHubConfig::default()
        };
        assert!(c.validate().is_ok());
        c.edge_cert_signing_duration = u32::MAX;
        let err = c.validate().unwrap_err();
        assert!(err.contains("edgeCertSigningDuration"), "{err}");
    }

    #[test]
    fn the_certificate_identity_check_cannot_be_switched_off() {
        let yaml = r#"
advertiseAddress: [10.0.0.1]
authorization: {enforceIdentity: true}
"#;
        let c: CloudHubConfig = serde_saphyr::from_str(yaml).unwrap();
        assert!(c.validate().is_ok(), "true still loads");
        let c: CloudHubConfig = serde_saphyr::from_str(&yaml.replace("true", "false")).unwrap();
        let err = c.validate().unwrap_err();
        assert!(
            err.contains("enforceIdentity: false is not supported"),
            "{err}"
        );
    }
}
