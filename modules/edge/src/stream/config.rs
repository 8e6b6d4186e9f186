//! edgecore's `modules.edgeStream` keys with their defaults, and the agent's own options.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pki::stream_tls::{TlsError, TlsMaterial};
use serde::{Deserialize, Serialize};

use crate::ServerVerification;

/// `modules.edgeStream` (edgecore `EdgeStream`, defaults from `default.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EdgeStreamConfig {
    /// Run the agent (edgecore default `false`).
    pub enable: bool,
    /// CA the tunnel server's certificate must chain to. Upstream loads it but never
    /// verifies the server; here [`client_tls`] verifies against it (load it into the
    /// material's `ca`) unless told `InsecureSkipVerify`.
    #[serde(rename = "tlsTunnelCAFile")]
    pub tls_tunnel_ca_file: String,
    /// The node certificate presented to the tunnel.
    pub tls_tunnel_cert_file: String,
    /// Its key.
    pub tls_tunnel_private_key_file: String,
    /// Seconds for the whole dial: TCP, TLS and the upgrade.
    pub handshake_timeout: i32,
    /// Seconds without anything from the cloud before the tunnel is dropped (upstream: unused).
    pub read_deadline: i32,
    /// The tunnel server, `host:port`.
    pub server: String,
    /// Seconds a write may take (upstream: unused).
    pub write_deadline: i32,
}

impl Default for EdgeStreamConfig {
    fn default() -> Self {
        EdgeStreamConfig {
            enable: false,
            tls_tunnel_ca_file: "/etc/kubeedge/ca/rootCA.crt".into(),
            tls_tunnel_cert_file: "/etc/kubeedge/certs/server.crt".into(),
            tls_tunnel_private_key_file: "/etc/kubeedge/certs/server.key".into(),
            handshake_timeout: 30,
            read_deadline: 15,
            server: "127.0.0.1:10004".into(),
            write_deadline: 15,
        }
    }
}

fn secs(v: i32, fallback: u64) -> Duration {
    Duration::from_secs(u64::try_from(v).ok().filter(|s| *s > 0).unwrap_or(fallback))
}

impl EdgeStreamConfig {
    pub(crate) fn handshake(&self) -> Duration {
        secs(self.handshake_timeout, 30)
    }

    pub(crate) fn read(&self) -> Duration {
        secs(self.read_deadline, 15)
    }

    pub(crate) fn write(&self) -> Duration {
        secs(self.write_deadline, 15)
    }
}

/// Who the agent is and where it relays to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOptions {
    /// `modules.edged.hostnameOverride`: sent as `SessionHostNameOverride`; must match the
    /// certificate's `system:node:<name>`.
    pub node_name: String,
    /// `modules.edged.nodeIP`; empty means the local address of the tunnel connection.
    pub node_ip: String,
    /// The local kubelet-compatible server. Streams only ever go here, whatever host the
    /// cloud names (upstream dials the cloud's `url.Host`).
    pub kubelet: SocketAddr,
    /// Ping period (upstream 5 s).
    pub ping_interval: Duration,
    /// Wait before redialing after a tunnel ends (upstream 2 s); doubles on each failed dial up to
    /// [`AgentOptions::redial_max`], with ±25 % jitter (upstream has none, so edges redial in
    /// lockstep).
    pub redial_base: Duration,
    /// Longest wait between dials.
    pub redial_max: Duration,
    /// Bytes queued toward one slow local connection before that stream is ended.
    pub stream_queue_bytes: usize,
    /// Read buffer of local connections (upstream 256 bytes).
    pub relay_buffer: usize,
}

impl AgentOptions {
    /// Defaults for `node_name` at `node_ip`, relaying to `127.0.0.1:10350`.
    pub fn new(node_name: &str, node_ip: &str) -> Self {
        AgentOptions {
            node_name: node_name.to_owned(),
            node_ip: node_ip.to_owned(),
            kubelet: SocketAddr::from(([127, 0, 0, 1], 10350)),
            ping_interval: Duration::from_secs(5),
            redial_base: Duration::from_secs(2),
            redial_max: Duration::from_secs(30),
            stream_queue_bytes: 8 << 20,
            relay_buffer: 32 * 1024,
        }
    }
}

/// The tunnel client TLS: presents the node certificate from `material` and verifies the
/// server against `material.ca` (chain and the host dialed). Upstream edgestream skips
/// that check; [`client_tls_with`] with `InsecureSkipVerify` does the same.
pub fn client_tls(material: &TlsMaterial) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    client_tls_with(material, ServerVerification::VerifyWithCa)
}

/// [`client_tls`] with an explicit [`ServerVerification`]; `InsecureSkipVerify` accepts any
/// server certificate (see its warning).
pub fn client_tls_with(
    material: &TlsMaterial,
    verification: ServerVerification,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let ca = match verification {
        ServerVerification::VerifyWithCa => Some(material.ca.as_slice()),
        ServerVerification::InsecureSkipVerify => {
            tracing::warn!(
                "tunnel TLS: server certificate verification is OFF (InsecureSkipVerify)"
            );
            None
        }
    };
    pki::stream_tls::client_config(material.cert_chain.clone(), material.key.clone_key(), ca)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_edgecore_key_should_parse_and_default() {
        let d: EdgeStreamConfig = serde_saphyr::from_str("{}").unwrap();
        assert_eq!(d, EdgeStreamConfig::default());
        assert_eq!(d.server, "127.0.0.1:10004");
        assert_eq!(
            (d.handshake_timeout, d.read_deadline, d.write_deadline),
            (30, 15, 15)
        );
        let yaml = "enable: true\ntlsTunnelCAFile: /c\ntlsTunnelCertFile: /a\ntlsTunnelPrivateKeyFile: /b\nhandshakeTimeout: 3\nreadDeadline: 4\nserver: 10.0.0.1:10004\nwriteDeadline: 5\n";
        let c: EdgeStreamConfig = serde_saphyr::from_str(yaml).unwrap();
        assert!(c.enable);
        assert_eq!(c.tls_tunnel_ca_file, "/c");
        assert_eq!(c.tls_tunnel_cert_file, "/a");
        assert_eq!(c.tls_tunnel_private_key_file, "/b");
        assert_eq!(
            (c.handshake(), c.read(), c.write()),
            (
                Duration::from_secs(3),
                Duration::from_secs(4),
                Duration::from_secs(5)
            )
        );
        assert_eq!(c.server, "10.0.0.1:10004");
    }
}
