//! Errors of the cloudhub crate.

/// What can fail while preparing or running the hub.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable (upstream treats these as fatal).
    #[error("invalid cloudhub configuration: {0}")]
    Config(String),
    /// Key material could not be created, loaded or stored.
    #[error("certificates")]
    Pki(#[from] pki::Error),
    /// A Kubernetes call failed (secrets, nodes, ObjectSyncs).
    #[error("kubernetes")]
    Kube(#[from] kube::Error),
    /// A listener could not be bound or started.
    #[error("listener {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A stored secret does not have the expected keys.
    #[error("secret {0} is malformed: {1}")]
    Secret(String, String),
}

/// `Result` with the cloudhub [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
