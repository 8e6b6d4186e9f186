//! Errors of the hub client.

/// What can go wrong bootstrapping or talking to cloudhub.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The token is not `<ca hash>.<jwt>` (4 dot-separated parts).
    #[error("malformed bootstrap token")]
    BadToken,
    /// The CA served by the cloud does not hash to the token's first part.
    #[error("the cloud's CA (sha256 {got}) does not match the token ({want})")]
    CaMismatch {
        /// Hash from the token.
        want: String,
        /// Hash of what was downloaded.
        got: String,
    },
    /// The certificate server answered with an error status.
    #[error("certificate server answered {status}: {body}")]
    Http {
        /// HTTP status.
        status: u16,
        /// Response text.
        body: String,
    },
    /// Connecting, TLS, HTTP or WebSocket failed.
    #[error("{context}: {message}")]
    Transport {
        /// What was being done.
        context: &'static str,
        /// The cause.
        message: String,
    },
    /// Key material problem.
    #[error("certificates")]
    Pki(#[from] pki::Error),
    /// Reading or writing certificate files failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The client has stopped; the message is handed back.
    #[error("hub client stopped")]
    Stopped(Box<beehive::Message>),
}

impl HubError {
    pub(crate) fn transport(context: &'static str, e: impl std::fmt::Display) -> Self {
        HubError::Transport {
            context,
            message: e.to_string(),
        }
    }
}
