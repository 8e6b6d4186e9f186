//! Configuration: KubeEdge's `modules.cloudStream` and `modules.iptablesManager` keys with
//! their defaults, plus the Rust-only knobs (timeouts, buffers) in [`Tuning`].

use std::time::Duration;

use kubeedge_api::listener::ListenerLimits;
use serde::{Deserialize, Serialize};

/// `modules.cloudStream` (KubeEdge `CloudStream`, defaults from `default.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CloudStreamConfig {
    /// Run the module (KubeEdge default `false`; Helm sets `true`).
    pub enable: bool,
    /// CA verifying edge certificates; the composer falls back to the cloudhub CA.
    #[serde(rename = "tlsTunnelCAFile")]
    pub tls_tunnel_ca_file: String,
    /// Tunnel server certificate; falls back to the cloudhub certificate.
    pub tls_tunnel_cert_file: String,
    /// Tunnel server key; falls back to the cloudhub key.
    pub tls_tunnel_private_key_file: String,
    /// Tunnel listen port.
    pub tunnel_port: u32,
    /// CA verifying the API server's client certificate (upstream only requests it).
    #[serde(rename = "tlsStreamCAFile")]
    pub tls_stream_ca_file: String,
    /// Stream server certificate.
    pub tls_stream_cert_file: String,
    /// Stream server key.
    pub tls_stream_private_key_file: String,
    /// Stream server listen port, and the DNAT target of the iptables rules.
    pub stream_port: u32,
    /// Rust: verify the API server's client certificate against `tlsStreamCAFile`
    /// (upstream requests it but never verifies it). Set `false` for upstream behaviour.
    pub verify_stream_client_cert: bool,
    /// Rust: how the stream server authorizes a caller after its certificate, as a kubelet
    /// does (`authorization` of the kubelet configuration; upstream has no such step).
    pub stream_authorization: StreamAuthorizationConfig,
    /// Rust: admission limits of the stream server (`streamPort`; the API server and
    /// metrics scrapers dial it): open connections, TLS handshakes plus request heads in
    /// progress, those per source address, and the deadline for them.
    pub stream_limits: ListenerLimits,
    /// Rust: admission limits of the tunnel server (`tunnelPort`; edges dial it), as
    /// `streamLimits`. An edge counts as authenticated once its certificate, node name and
    /// IP are accepted.
    pub tunnel_limits: ListenerLimits,
}

/// `modules.cloudStream.streamAuthorization`: the kubelet's `authorization` block, with the
/// webhook cache times in whole seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StreamAuthorizationConfig {
    /// `Webhook` or `AlwaysAllow`. Unset: `Webhook` when cloudstream has a Kubernetes
    /// client, else `AlwaysAllow` (there is no API server to ask). `Webhook` without a
    /// client is a configuration error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<StreamAuthorizationMode>,
    /// How long an allowed answer is reused (kubelet `webhook.cacheAuthorizedTTL`, 5 min).
    #[serde(rename = "cacheAuthorizedTTLSeconds")]
    pub cache_authorized_ttl_seconds: u64,
    /// How long a denied answer is reused (kubelet `webhook.cacheUnauthorizedTTL`, 30 s).
    #[serde(rename = "cacheUnauthorizedTTLSeconds")]
    pub cache_unauthorized_ttl_seconds: u64,
    /// Answers remembered at most, all callers together (default 65,536; with names of at
    /// most 253 bytes, about 45 MiB at worst). Beyond it expired answers go first, then the
    /// oldest.
    pub cache_entries: usize,
    /// Answers remembered for one caller (default 32,768): a caller flooding node names it
    /// makes up evicts its own answers, not the API server's.
    pub cache_entries_per_user: usize,
}

impl Default for StreamAuthorizationConfig {
    fn default() -> Self {
        StreamAuthorizationConfig {
            mode: None,
            cache_authorized_ttl_seconds: 300,
            cache_unauthorized_ttl_seconds: 30,
            cache_entries: 65_536,
            cache_entries_per_user: 32_768,
        }
    }
}

/// The kubelet's authorization modes (`authorization.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamAuthorizationMode {
    /// Every request is asked of the API server with a SubjectAccessReview for the
    /// certificate's user and groups on `nodes/<subresource>`.
    Webhook,
    /// Any caller whose certificate verified may do anything (upstream behaviour).
    AlwaysAllow,
}

impl Default for CloudStreamConfig {
    fn default() -> Self {
        CloudStreamConfig {
            enable: false,
            tls_tunnel_ca_file: "/etc/kubeedge/ca/rootCA.crt".into(),
            tls_tunnel_cert_file: "/etc/kubeedge/certs/server.crt".into(),
            tls_tunnel_private_key_file: "/etc/kubeedge/certs/server.key".into(),
            tunnel_port: 10004,
            tls_stream_ca_file: "/etc/kubeedge/ca/streamCA.crt".into(),
            tls_stream_cert_file: "/etc/kubeedge/certs/stream.crt".into(),
            tls_stream_private_key_file: "/etc/kubeedge/certs/stream.key".into(),
            stream_port: 10003,
            verify_stream_client_cert: true,
            stream_authorization: StreamAuthorizationConfig::default(),
            stream_limits: ListenerLimits::default(),
            tunnel_limits: ListenerLimits::default(),
        }
    }
}

/// Where the iptables manager runs (`modules.iptablesManager.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IptablesMode {
    /// Inside cloudcore (the default).
    #[default]
    Internal,
    /// As a separate DaemonSet on the API server hosts; cloudcore runs none.
    External,
}

/// `modules.iptablesManager`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IptablesManagerConfig {
    /// Run it (default `true`).
    pub enable: bool,
    /// Internal or external (default internal).
    pub mode: IptablesMode,
    /// Rust-only: tunnel ports accepted from the record, above 10350 (default 64: 10351 to
    /// 10414); an entry with another port gets no rule.
    pub tunnel_port_limit: u16,
    /// Rust-only: most rules one record change may add, remove or change (default 8); a
    /// record changing more is refused whole and the rules in place stay.
    pub max_record_changes: usize,
}

impl Default for IptablesManagerConfig {
    fn default() -> Self {
        let policy = crate::iptables::RecordPolicy::default();
        IptablesManagerConfig {
            enable: true,
            mode: IptablesMode::Internal,
            tunnel_port_limit: policy.tunnel_port_limit,
            max_record_changes: policy.max_changes,
        }
    }
}

impl IptablesManagerConfig {
    /// True when cloudcore itself should run the manager (enabled and internal).
    pub fn runs_inside_cloudcore(&self) -> bool {
        self.enable && self.mode == IptablesMode::Internal
    }

    /// The record policy these settings describe, with this cloudcore's own record key.
    pub fn policy(&self, own_ip: Option<String>) -> crate::iptables::RecordPolicy {
        crate::iptables::RecordPolicy {
            tunnel_port_limit: self.tunnel_port_limit,
            max_changes: self.max_record_changes,
            own_ip,
        }
    }
}

/// Rust-only timing and buffering; the defaults suit production.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// The cloud pings each tunnel this often (upstream never does).
    pub ping_interval: Duration,
    /// A tunnel from which nothing arrives for this long is closed (edges ping every 5 s).
    pub pong_timeout: Duration,
    /// A socket write that takes longer fails its connection.
    pub write_timeout: Duration,
    /// TLS handshake plus request head must arrive within this.
    pub handshake_timeout: Duration,
    /// Wait between attempts to set the Node's kubelet port (upstream 20 s).
    pub node_update_interval: Duration,
    /// Give up setting the kubelet port after this (upstream 2 min), then close the tunnel.
    pub node_update_deadline: Duration,
    /// Bytes one stream may have queued toward its API client. The tunnel reader never waits
    /// for one stream: an edge that takes part in per-stream flow control (the Rust edge)
    /// gets this as its send window, so it never exceeds it and a slow client slows only its
    /// own stream; for any other edge (edgecore), a stream whose client falls this far behind
    /// is ended. Memory per node is bounded by this times `max_streams_per_node`.
    pub stream_queue_bytes: usize,
    /// Streams one node's tunnel may carry at once; more are answered 503.
    pub max_streams_per_node: usize,
    /// Exec/attach: how long the edge may take to answer a CONNECT (its kubelet's `101`)
    /// before the API server gets `504 Gateway Timeout` and the stream is removed (edgecore
    /// never answers when its kubelet is down).
    pub edge_response_timeout: Duration,
    /// Interval of TCP keepalive probes on accepted sockets (first probe after this much
    /// idleness, then every this long); zero leaves keepalive off.
    pub tcp_keepalive: Duration,
    /// Read buffer of API-side relays (upstream reads 256 bytes at a time: one frame
    /// and one syscall per 256 bytes).
    pub relay_buffer: usize,
    /// Messages queued toward one tunnel's socket.
    pub tunnel_queue: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            ping_interval: Duration::from_secs(10),
            pong_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(15),
            handshake_timeout: Duration::from_secs(10),
            node_update_interval: Duration::from_secs(20),
            node_update_deadline: Duration::from_secs(120),
            stream_queue_bytes: 4 << 20,
            max_streams_per_node: 64,
            edge_response_timeout: Duration::from_secs(30),
            tcp_keepalive: Duration::from_secs(15),
            relay_buffer: 32 * 1024,
            tunnel_queue: 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_should_parse_and_default_as_kubeedge() {
        let c: CloudStreamConfig = serde_saphyr::from_str("enable: true").unwrap();
        assert_eq!(
            c,
            CloudStreamConfig {
                enable: true,
                ..CloudStreamConfig::default()
            }
        );
        assert_eq!(c.tunnel_port, 10004);
        assert_eq!(c.stream_port, 10003);
        let yaml = r#"
enable: true
tlsTunnelCAFile: /a/ca.crt
tlsTunnelCertFile: /a/t.crt
tlsTunnelPrivateKeyFile: /a/t.key
tunnelPort: 20004
tlsStreamCAFile: /b/ca.crt
tlsStreamCertFile: /b/s.crt
tlsStreamPrivateKeyFile: /b/s.key
streamPort: 20003
someFutureKey: 1
"#;
        let c: CloudStreamConfig = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(c.tls_tunnel_ca_file, "/a/ca.crt");
        assert_eq!(c.tls_tunnel_cert_file, "/a/t.crt");
        assert_eq!(c.tls_tunnel_private_key_file, "/a/t.key");
        assert_eq!(c.tunnel_port, 20004);
        assert_eq!(c.tls_stream_ca_file, "/b/ca.crt");
        assert_eq!(c.tls_stream_cert_file, "/b/s.crt");
        assert_eq!(c.tls_stream_private_key_file, "/b/s.key");
        assert_eq!(c.stream_port, 20003);
        assert!(c.verify_stream_client_cert);
        assert_eq!(c.stream_authorization, StreamAuthorizationConfig::default());
        assert_eq!(c.stream_authorization.mode, None);
        assert_eq!(c.tunnel_limits, ListenerLimits::default());
        assert_eq!(c.stream_limits, ListenerLimits::default());
        let back: CloudStreamConfig =
            serde_saphyr::from_str(&serde_saphyr::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn stream_authorization_should_parse_the_kubelet_mode_names() {
        let c: CloudStreamConfig = serde_saphyr::from_str(
            "streamAuthorization: {mode: AlwaysAllow, cacheAuthorizedTTLSeconds: 10, cacheUnauthorizedTTLSeconds: 1}",
        )
        .unwrap();
        assert_eq!(
            c.stream_authorization,
            StreamAuthorizationConfig {
                mode: Some(StreamAuthorizationMode::AlwaysAllow),
                cache_authorized_ttl_seconds: 10,
                cache_unauthorized_ttl_seconds: 1,
                ..StreamAuthorizationConfig::default()
            }
        );
        let c: CloudStreamConfig =
            serde_saphyr::from_str("streamAuthorization: {mode: Webhook}").unwrap();
        assert_eq!(
            c.stream_authorization.mode,
            Some(StreamAuthorizationMode::Webhook)
        );
        assert_eq!(c.stream_authorization.cache_authorized_ttl_seconds, 300);
        assert!(
            serde_saphyr::from_str::<CloudStreamConfig>("streamAuthorization: {mode: webhook}")
                .is_err()
        );
    }

    #[test]
    fn listener_limits_should_parse_under_their_own_keys() {
        let c: CloudStreamConfig = serde_saphyr::from_str(
            "streamLimits: {maxConnections: 5, preAuthTimeoutSeconds: 2}\ntunnelLimits: {maxHandshakes: 3, maxUnauthenticatedPerIP: 1}",
        )
        .unwrap();
        assert_eq!(c.stream_limits.max_connections, 5);
        assert_eq!(c.stream_limits.pre_auth_timeout_seconds, 2);
        // Keys left out keep the listener's defaults.
        assert_eq!(c.stream_limits.max_handshakes, 1_024);
        assert_eq!(c.tunnel_limits.max_handshakes, 3);
        assert_eq!(c.tunnel_limits.max_unauthenticated_per_ip, 1);
        assert_eq!(c.tunnel_limits.max_connections, 10_000);
    }

    #[test]
    fn iptables_manager_should_default_to_internal_and_enabled() {
        let d: IptablesManagerConfig = serde_saphyr::from_str("{}").unwrap();
        assert!(d.runs_inside_cloudcore());
        let e: IptablesManagerConfig = serde_saphyr::from_str("mode: external").unwrap();
        assert_eq!(e.mode, IptablesMode::External);
        assert!(!e.runs_inside_cloudcore());
    }
}
