//! Why a cluster operation failed; every message names the command and what it said.

/// A failure of the driver. A missing prerequisite is an error naming its package, never a skip.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `scripts/local-up` (or `scripts/k8s-testenv`) failed; its stderr says why.
    #[error("{command} failed ({status}):\n{stderr}")]
    Script {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// `local-up up` printed no line for a key of its interface.
    #[error("local-up up printed no {0}= line")]
    MissingLine(&'static str),
    /// kubectl failed.
    #[error("kubectl {args} failed ({status}): {stderr}")]
    Kubectl {
        /// Its arguments.
        args: String,
        /// How it ended.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A process could not be run or talked to.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Output that should have been JSON (or Prometheus text) was not.
    #[error("{what}: {message}")]
    Parse {
        /// What was being read.
        what: String,
        /// Why it did not parse.
        message: String,
    },
    /// A command or condition did not finish in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;
