//! Where log lines go and how they look: `--logging-format` (the flag Kubernetes components
//! use) chooses text or JSON; text is coloured only on a terminal, so `kubectl logs` and log
//! collectors never see escape codes.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `--logging-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// One human-readable line per event; ANSI colour only when stdout is a terminal and
    /// `NO_COLOR` is unset or empty.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level.
    Json,
}

/// Installs the process's subscriber (logs to stdout).
pub(crate) fn init(filter: EnvFilter, format: Format) {
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        Format::Text => builder.with_target(false).with_ansi(colour()).init(),
        Format::Json => builder.json().flatten_event(true).with_ansi(false).init(),
    }
}

/// Colour: stdout is a terminal and `NO_COLOR` (no-color.org) is unset or empty.
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
