//! The host programs the container-runtime scenarios run, found on `PATH` or named missing
//! with the package that has them.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::error::{Error, Result};

/// `tool` on `PATH`, or [`Error::ToolMissing`] naming `package` and `why`.
pub fn require(tool: &str, package: &str, why: &str) -> Result<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(tool))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| Error::ToolMissing {
            tool: tool.into(),
            package: package.into(),
            why: why.into(),
        })
}

/// Runs `cmd` to completion; a non-zero exit is an error carrying its output.
pub fn run(mut cmd: Command) -> Result<Output> {
    let what = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::io(&what, e))?;
    if !out.status.success() {
        return Err(Error::Process {
            what: format!("{what} failed: {}", out.status),
            log: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(out)
}
