//! Why the harness could not do what a test asked; every message names what is missing.

use std::path::Path;

/// A harness failure. Missing prerequisites are errors, never skips.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The edgecore archive or its config template is not where it should be.
    #[error("edgecore binary missing: {0}")]
    EdgecoreMissing(String),
    /// `xz` could not be run.
    #[error("xz is missing (needed to unpack edgecore; apt-get install xz-utils): {0}")]
    XzMissing(String),
    /// `xz` ran and failed.
    #[error("xz failed: {0}")]
    XzFailed(String),
    /// The unpacked binary is not the one the suite is written against.
    #[error("{file}: sha256 of the unpacked binary is {actual}, expected {expected}")]
    Checksum {
        /// The archive.
        file: String,
        /// The hash the suite expects.
        expected: String,
        /// The hash found.
        actual: String,
    },
    /// Unpacking failed earlier in this process (the first failure, as text).
    #[error("{0}")]
    Unpack(String),
    /// Our cloudcore binary (crate `cloudcore-server`'s, or the root crate's example) is not
    /// built.
    #[error(
        "cloudcore binary missing at {0}: build it with `cargo build -p cloudcore-server` \
         (or `cargo build --example cloudcore`), or set CLOUDCORE_BIN"
    )]
    CloudcoreMissing(String),
    /// A file or process operation failed.
    #[error("{path}: {source}")]
    Io {
        /// What was being accessed.
        path: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A process ended or failed to become ready; the message carries its log tail.
    #[error("{what}\n--- log tail ---\n{log}")]
    Process {
        /// What went wrong.
        what: String,
        /// The last lines of its log.
        log: String,
    },
    /// A configuration could not be produced.
    #[error("config: {0}")]
    Config(String),
    /// A Kubernetes call failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The edge store could not be read.
    #[error("edge store: {0}")]
    Store(String),
    /// A condition did not hold in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A program the harness runs is not installed.
    #[error("`{tool}` is not installed (apt-get install {package}); the harness needs it {why}")]
    ToolMissing {
        /// The program.
        tool: String,
        /// The Debian/Ubuntu package that has it.
        package: String,
        /// What for.
        why: String,
    },
    /// keadm is not where it should be.
    #[error("keadm binary missing: {0}")]
    KeadmMissing(String),
}

impl Error {
    pub(crate) fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

/// Result of the harness.
pub type Result<T, E = Error> = std::result::Result<T, E>;
