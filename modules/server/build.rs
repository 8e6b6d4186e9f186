//! Build facts for `cloudcore --version`, the start-up log line and `cloudcore_build_info`:
//! the git commit, the build date and the compiler, as compile-time environment variables.
//!
//! Two `git` calls and no network; a build without `.git` (a source archive, the container
//! build) says `unknown` unless `CLOUDCORE_GIT_COMMIT` is given. `SOURCE_DATE_EPOCH` fixes the
//! date for reproducible builds. (A vergen-like crate would do the same with a dependency tree
//! of its own in every cloudcore build.)

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLOUDCORE_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = std::env::var("CLOUDCORE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CLOUDCORE_GIT_COMMIT={}", commit.trim());
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
    println!("cargo:rustc-env=CLOUDCORE_BUILD_DATE={}", rfc3339(epoch));
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CLOUDCORE_RUSTC_VERSION={rustc_version}");
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn git(args: &[&str]) -> Option<String> {
    run("git", args)
}

/// The abbreviated commit of `HEAD`; the script runs again when `HEAD` or its branch moves
/// (and only then, so the date is that of the build after the last move).
fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    // Only files that exist: cargo counts a missing one as changed, so the script would run
    // again on every build (a repository without packed refs has no `packed-refs`), and with
    // it a new build date and a recompiled crate.
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}

/// `seconds` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC; Howard Hinnant's days-to-civil).
fn rfc3339(seconds: u64) -> String {
    let (days, secs) = (seconds / 86_400, seconds % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}
