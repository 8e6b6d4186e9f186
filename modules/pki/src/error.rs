//! Errors of the PKI crate.

/// What can go wrong building, loading or checking key material.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A private key could not be parsed in any supported format.
    #[error("invalid private key: {0}")]
    Key(String),
    /// A certificate could not be parsed or is not usable for its purpose.
    #[error("invalid certificate: {0}")]
    Certificate(String),
    /// PEM text without a usable block.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// Generating or signing a certificate failed.
    #[error("certificate generation failed")]
    Generate(#[source] rcgen::Error),
    /// A CSR is malformed or its signature does not verify.
    #[error("invalid certificate request: {0}")]
    Csr(String),
    /// A CSR asks for something the signer refuses (subject, usages).
    #[error("certificate request refused: {0}")]
    Refused(String),
    /// The bootstrap token is malformed, signed with another key, or expired.
    #[error("invalid token: {0}")]
    Token(String),
    /// A client certificate failed verification against the CA.
    #[error("client certificate rejected: {0}")]
    Unauthorized(String),
    /// The certificate was revoked: its node was deleted after it was issued.
    #[error(
        "certificate of node {node:?} was revoked: issued {issued}, node deleted {revoked}; bootstrap the node again with a token"
    )]
    Revoked {
        /// The node the certificate is for.
        node: String,
        /// Its notBefore (RFC 3339).
        issued: String,
        /// When the node's certificates were revoked (RFC 3339).
        revoked: String,
    },
    /// The revoked-certificate table has not been read yet, so no certificate is trusted.
    #[error("certificate revocations are not loaded yet (API server unreachable?); retry shortly")]
    RevocationsUnavailable,
    /// Building a rustls configuration failed.
    #[error("tls configuration failed")]
    Tls(#[source] rustls::Error),
    /// Reading or writing key material on disk failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Self {
        Error::Generate(e)
    }
}

/// `Result` with the PKI [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
