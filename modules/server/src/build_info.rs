//! What this build of cloudcore is: version, git commit, build date and compiler, as
//! `cloudcore --version` prints them, the start-up log line says them and
//! `cloudcore_build_info` exports them (the build script records them; see `build.rs`).

/// The crate version (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The abbreviated git commit the binary was built from, or `unknown` (a build without `.git`
/// and without `CLOUDCORE_GIT_COMMIT`).
pub const GIT_COMMIT: &str = env!("CLOUDCORE_GIT_COMMIT");

/// When it was built (`SOURCE_DATE_EPOCH` when set), UTC, RFC 3339.
pub const BUILD_DATE: &str = env!("CLOUDCORE_BUILD_DATE");

/// `rustc --version` of the compiler that built it.
pub const RUSTC_VERSION: &str = env!("CLOUDCORE_RUSTC_VERSION");

/// What `cloudcore --version` prints after the program name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("CLOUDCORE_GIT_COMMIT"),
    ", built ",
    env!("CLOUDCORE_BUILD_DATE"),
    ", ",
    env!("CLOUDCORE_RUSTC_VERSION"),
    ")"
);
