//! How the edge checks the cloud's server certificate.

/// How an edge checks the certificate the cloud presents (hub WebSocket, certificate server
/// renewal, stream tunnel). The default verifies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerVerification {
    /// The server certificate must chain to the KubeEdge CA the edge holds and name the host
    /// it dials (an IP or DNS SAN), as edgecore's edgehub checks. The default.
    #[default]
    VerifyWithCa,
    /// **Insecure**: any server certificate is accepted. The handshake signature is still
    /// checked (the server holds the key of what it presents), but anyone on the network
    /// path can present a certificate of their own and read or forge everything the edge
    /// exchanges. Only for lab set-ups whose server certificate does not name the address
    /// dialed. Upstream edgestream always behaves like this.
    InsecureSkipVerify,
}
