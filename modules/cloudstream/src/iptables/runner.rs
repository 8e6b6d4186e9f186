//! How iptables commands run: behind a trait, so tests can run the real binaries inside a
//! network namespace (or as an unprivileged user) by prefixing the command.

use std::fmt;
use std::io;

use futures::future::BoxFuture;

/// What a finished command printed and returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit code (`None` when killed by a signal).
    pub status: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl CommandOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// Runs a program with arguments and collects its output. `Err` only when it could not be
/// started (e.g. `NotFound`).
pub trait CommandRunner: Send + Sync + fmt::Debug {
    /// Runs `program args…`.
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
    ) -> BoxFuture<'a, io::Result<CommandOutput>>;
}

/// Runs commands on this host, optionally behind a prefix such as
/// `ip netns exec NAME` (the command then runs inside that namespace).
#[derive(Debug, Clone, Default)]
pub struct SystemRunner {
    prefix: Vec<String>,
}

impl SystemRunner {
    /// Runs commands directly.
    pub fn new() -> Self {
        SystemRunner::default()
    }

    /// Runs every command as `prefix… program args…`.
    pub fn with_prefix(prefix: impl IntoIterator<Item = impl Into<String>>) -> Self {
        SystemRunner {
            prefix: prefix.into_iter().map(Into::into).collect(),
        }
    }

    /// Runs every command inside network namespace `name` (`ip netns exec name …`).
    pub fn in_netns(name: &str) -> Self {
        SystemRunner::with_prefix(["ip", "netns", "exec", name])
    }
}

impl CommandRunner for SystemRunner {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        Box::pin(async move {
            let mut argv: Vec<&str> = self.prefix.iter().map(String::as_str).collect();
            argv.push(program);
            argv.extend(args.iter().map(String::as_str));
            let out = tokio::process::Command::new(argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output()
                .await?;
            Ok(CommandOutput {
                status: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        })
    }
}
