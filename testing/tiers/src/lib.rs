//! Test-only: the tiers of the test suite, and the run-time check a test makes before it uses
//! a prerequisite that `cargo` cannot provide.
//!
//! | tier | the tests need | on a machine without it |
//! |---|---|---|
//! | (none) | `cargo` alone | always run |
//! | [`Tier::ApiServer`] | a real kube-apiserver + etcd (`scripts/k8s-testenv`: Go, or binaries it built before) | skipped, reason printed |
//! | [`Tier::Root`] | root, `ip`, `iptables`, `setpriv` (network namespaces) | skipped, reason printed |
//! | [`Tier::Edgecore`] | a KubeEdge edgecore binary, `xz` and `sqlite3` (most of these tests name the API server tier too) | skipped, reason printed |
//! | [`Tier::Helm`] | `helm` (`scripts/helm build`: Go, or a helm of your own in `HELM_BIN` or on `PATH`) | skipped, reason printed |
//!
//! A test names its tiers first thing; without them it returns at once (it counts as passed),
//! and the first skip of each tier in a test binary prints one line saying why on stderr,
//! which `cargo test` shows and `scripts/test` collects. In CI (`CI=true`) or when
//! `CLOUDCORE_TEST_TIERS` requires a tier, a missing prerequisite fails the test instead.
//!
//! ```no_run
//! #[test]
//! fn nodes_are_written() {
//!     test_tiers::require!(ApiServer);
//!     // ... talks to the API server
//! }
//! ```
//!
//! `CLOUDCORE_TEST_TIERS`: unset, run what this machine has (`CI=true`: require every tier);
//! `all`, require every tier; `none`, skip every tier; a list such as `apiserver,edgecore`,
//! require those and skip the others.

mod edgecore;
mod probe;

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

pub use edgecore::{EdgecoreSource, edgecore_archive, edgecore_source, peer_dir};

/// A prerequisite beyond `cargo` that some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// A real Kubernetes API server: `scripts/k8s-testenv` builds it with Go on first use and
    /// caches it, and needs `openssl`, `curl`, `python3`, `flock` and `setsid` to run it.
    ApiServer,
    /// Root with `ip`, `iptables` and `setpriv`: tests of the iptables manager and the
    /// diagnosis work in network namespaces of their own.
    Root,
    /// An unmodified KubeEdge edgecore (see [`edgecore_source`]), `xz` to unpack it and
    /// `sqlite3` to read its store.
    Edgecore,
    /// Helm, for the chart's tests ([`helm`] says which one).
    Helm,
}

/// The helm the chart's tests run (`scripts/helm path`: `HELM_BIN`, else the one `scripts/helm
/// build` cached, else `helm` on `PATH`), or why there is none.
pub fn helm() -> Result<std::path::PathBuf, String> {
    probe::helm()
}

/// Every tier, in the order `scripts/test` reports them.
pub const ALL: [Tier; 4] = [Tier::ApiServer, Tier::Root, Tier::Edgecore, Tier::Helm];

impl Tier {
    /// The name `CLOUDCORE_TEST_TIERS` and the skip notices use.
    pub fn name(self) -> &'static str {
        match self {
            Tier::ApiServer => "apiserver",
            Tier::Root => "root",
            Tier::Edgecore => "edgecore",
            Tier::Helm => "helm",
        }
    }

    /// What the tier's tests need, in a few words.
    pub fn needs(self) -> &'static str {
        match self {
            Tier::ApiServer => "a real Kubernetes API server",
            Tier::Root => "root and network namespaces",
            Tier::Edgecore => "a real KubeEdge edgecore",
            Tier::Helm => "helm",
        }
    }

    /// Why this machine cannot run the tier (checked once per process), or `None` when it can.
    pub fn missing(self) -> Option<&'static str> {
        static FOUND: [OnceLock<Option<String>>; 4] = [const { OnceLock::new() }; 4];
        let slot = &FOUND[self as usize];
        slot.get_or_init(|| match self {
            Tier::ApiServer => probe::api_server(),
            Tier::Root => probe::root(),
            Tier::Edgecore => probe::edgecore(),
            Tier::Helm => probe::helm().err(),
        })
        .as_deref()
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `CLOUDCORE_TEST_TIERS` (and `CI`) ask of a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Run it when this machine has what it needs, else skip with the reason.
    IfAvailable,
    /// Run it; a missing prerequisite fails the test.
    Required,
    /// Skip it.
    Skipped,
}

/// The policy for `tier`, from `CLOUDCORE_TEST_TIERS`, else `CI`.
pub fn policy(tier: Tier) -> Policy {
    policy_from(
        std::env::var("CLOUDCORE_TEST_TIERS").ok().as_deref(),
        std::env::var("CI").ok().as_deref(),
        tier,
    )
}

fn policy_from(tiers: Option<&str>, ci: Option<&str>, tier: Tier) -> Policy {
    match tiers.map(str::trim) {
        Some("all") => Policy::Required,
        Some("none") => Policy::Skipped,
        Some(list) if !list.is_empty() => {
            if list.split(',').any(|t| t.trim() == tier.name()) {
                Policy::Required
            } else {
                Policy::Skipped
            }
        }
        _ if matches!(ci, Some("true" | "1")) => Policy::Required,
        _ => Policy::IfAvailable,
    }
}

/// The token a skipped test returns: `()` for a test returning nothing, `Ok(())` for one
/// returning a `Result`.
#[derive(Debug)]
#[must_use = "a skipped test must return at once"]
pub struct Skipped(());

impl From<Skipped> for () {
    fn from(_: Skipped) {}
}

impl<E> From<Skipped> for Result<(), E> {
    fn from(_: Skipped) -> Self {
        Ok(())
    }
}

/// Decides whether the calling test runs: `None` to run it, `Some` to skip it (after printing
/// the tier's notice, once per process).
///
/// # Panics
/// When the tier is required (CI, `CLOUDCORE_TEST_TIERS`) and this machine lacks it: the
/// message says what is missing and how to get it.
#[track_caller]
pub fn skip(tier: Tier) -> Option<Skipped> {
    let why = match (policy(tier), tier.missing()) {
        (Policy::Skipped, _) => "not selected by CLOUDCORE_TEST_TIERS",
        (_, None) => return None,
        (Policy::Required, Some(why)) => panic!(
            "this test needs {} (tier `{tier}`), which is required here (CI=true or \
             CLOUDCORE_TEST_TIERS): {why}",
            tier.needs()
        ),
        (Policy::IfAvailable, Some(why)) => why,
    };
    notice_once(tier, why);
    Some(Skipped(()))
}

/// The notice `scripts/test` collects: one line, on stderr past the test harness's capture.
fn notice_once(tier: Tier, why: &str) {
    static SAID: [OnceLock<()>; 4] = [const { OnceLock::new() }; 4];
    SAID[tier as usize].get_or_init(|| {
        let line = format!(
            "test-tiers: skipped tier `{tier}` ({}): {why}\n",
            tier.needs()
        );
        // Written to the process's stderr, not through `eprintln!`, which the test harness
        // captures and shows only for failing tests.
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
}

/// Runs the calling test only if this machine has every named [`Tier`]; otherwise returns from
/// it at once (see [`skip`]). Works in tests returning `()` and `Result<(), E>`.
///
/// ```no_run
/// fn a_test() -> Result<(), std::io::Error> {
///     test_tiers::require!(ApiServer, Edgecore);
///     Ok(())
/// }
/// # a_test().unwrap();
/// ```
#[macro_export]
macro_rules! require {
    ($($tier:ident),+ $(,)?) => {
        $(
            if let Some(skipped) = $crate::skip($crate::Tier::$tier) {
                return skipped.into();
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_variable_runs_what_is_there_and_ci_requires_everything() {
        assert_eq!(policy_from(None, None, Tier::Root), Policy::IfAvailable);
        assert_eq!(
            policy_from(None, Some("false"), Tier::Root),
            Policy::IfAvailable
        );
        assert_eq!(
            policy_from(None, Some("true"), Tier::Root),
            Policy::Required
        );
        assert_eq!(
            policy_from(Some(""), Some("1"), Tier::Edgecore),
            Policy::Required
        );
    }

    #[test]
    fn the_variable_wins_over_ci() {
        assert_eq!(
            policy_from(Some("none"), Some("true"), Tier::Root),
            Policy::Skipped
        );
        assert_eq!(policy_from(Some("all"), None, Tier::Root), Policy::Required);
        let list = Some("apiserver, edgecore");
        assert_eq!(policy_from(list, None, Tier::ApiServer), Policy::Required);
        assert_eq!(policy_from(list, None, Tier::Edgecore), Policy::Required);
        assert_eq!(policy_from(list, Some("true"), Tier::Root), Policy::Skipped);
    }

    #[test]
    fn a_skipped_test_returns_unit_or_ok() {
        let unit: () = Skipped(()).into();
        let ok: Result<(), String> = Skipped(()).into();
        assert_eq!((unit, ok), ((), Ok(())));
    }
}
