//! What a job spec must say before any node is chosen, and the settings it yields. Every
//! refusal is a sentence an operator reads in `status.reason`, naming the field, the value
//! and what would be accepted.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use kubeedge_api::operations::CHECK_ITEMS;
use kubeedge_api::validation::is_dns1123_subdomain;
use regex::Regex;

/// The settings every kind has, as written (checked by [`settings`]).
#[derive(Debug, Clone, Copy)]
pub struct Common<'a> {
    /// Where the settings live in the spec, for reasons (`spec.` or
    /// `spec.imagePrePullTemplate.`).
    pub path: &'static str,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
    /// `concurrency`.
    pub concurrency: i64,
    /// `failureTolerate`.
    pub failure_tolerate: &'a str,
    /// `checkItems` (ConfigUpdateJob has none).
    pub check_items: &'a [String],
}

/// `timeoutSeconds` when unset or 0, as KubeEdge documents it (its v1alpha2 code applies no
/// timeout at all then).
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 300;
/// The longest `timeoutSeconds` accepted: a week.
pub const MAX_TIMEOUT_SECONDS: i64 = 7 * 24 * 3600;
/// `failureTolerate` when unset, as KubeEdge documents it (its code uses 0).
pub const DEFAULT_FAILURE_TOLERATE: f64 = 0.1;
/// The most `retryTimes` accepted (each retry pulls every image again, 0.5 s apart).
pub const MAX_RETRY_TIMES: i64 = 100;

/// The settings of a running job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// How long a node's task may go without progress before it is `Unknown`.
    pub timeout: Duration,
    /// How many of this replica's nodes may have their task in flight at once.
    pub concurrency: usize,
    /// The fraction of failed nodes the job tolerates and still completes.
    pub tolerance: f64,
}

/// The settings of `common`, or the reason they are refused.
pub fn settings(common: &Common<'_>) -> Result<Settings, String> {
    let p = common.path;
    let timeout = match common.timeout_seconds {
        None | Some(0) => DEFAULT_TIMEOUT_SECONDS,
        Some(t) if (1..=MAX_TIMEOUT_SECONDS).contains(&t) => t,
        Some(t) => {
            return Err(format!(
                "{p}timeoutSeconds is {t}: it must be between 1 and {MAX_TIMEOUT_SECONDS} (a week), or 0 or unset for the default {DEFAULT_TIMEOUT_SECONDS}"
            ));
        }
    };
    let concurrency = match common.concurrency {
        0 => 1,
        c if c > 0 => usize::try_from(c).unwrap_or(usize::MAX),
        c => {
            return Err(format!(
                "{p}concurrency is {c}: it must be 1 or more, or 0 or unset for the default 1"
            ));
        }
    };
    let tolerance = match common.failure_tolerate.trim() {
        "" => DEFAULT_FAILURE_TOLERATE,
        text => match text.parse::<f64>() {
            Ok(t) if (0.0..=1.0).contains(&t) => t,
            _ => {
                return Err(format!(
                    "{p}failureTolerate is {text:?}: it must be a decimal number from 0 to 1, such as \"0.1\" (unset: 0.1)"
                ));
            }
        },
    };
    for item in common.check_items {
        if !CHECK_ITEMS.contains(&item.as_str()) {
            return Err(format!(
                "{p}checkItems has {item:?}: the edge checks only {CHECK_ITEMS:?}"
            ));
        }
    }
    Ok(Settings {
        timeout: Duration::from_secs(timeout as u64),
        concurrency,
        tolerance,
    })
}

/// The settings of a job already running: invalid values (the spec was edited after the job
/// started, which KubeEdge ignores too) fall back to the defaults.
pub fn settings_or_default(common: &Common<'_>) -> Settings {
    settings(common).unwrap_or(Settings {
        timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECONDS as u64),
        concurrency: 1,
        tolerance: DEFAULT_FAILURE_TOLERATE,
    })
}

/// A job whose name cloudhub would route to the wrong node: it takes the node of a task
/// message from the first `node` segment of its resource.
pub fn job_name(name: &str) -> Result<(), String> {
    if name == "node" {
        return Err(
            "a job may not be named \"node\": its task messages could not be routed to the edge; create it under another name".into(),
        );
    }
    Ok(())
}

static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^v\d+\.\d+\.\d+(-[a-zA-Z0-9_.]+(?:-[a-zA-Z0-9_.]+)*)?$")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

static IMAGE_REPO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._:-]*/[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*(@sha256:[A-Fa-f0-9]{64}|:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// `NodeUpgradeJob.spec.version`: what the edge accepts (`pkg/util/validation`).
pub fn upgrade_version(version: &str) -> Result<(), String> {
    if VERSION.is_match(version) {
        Ok(())
    } else {
        Err(format!(
            "spec.version is {version:?}: it must be an edgecore version such as \"v1.23.0\""
        ))
    }
}

/// `NodeUpgradeJob.spec.image`: empty (the default repository), or a repository the edge
/// accepts, without a tag (the edge appends `:<version>`).
pub fn upgrade_image(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Ok(());
    }
    let tagged = image
        .rsplit_once('/')
        .is_some_and(|(_, last)| last.contains(':') || last.contains('@'));
    if !IMAGE_REPO.is_match(image) || tagged {
        return Err(format!(
            "spec.image is {image:?}: it must be an image repository with a registry or namespace and no tag, such as \"kubeedge/installation-package\" (the edge pulls <image>:<version>)"
        ));
    }
    Ok(())
}

/// `ImagePrePullJob.spec.imagePrePullTemplate.images`: at least one, none empty or with
/// blanks.
pub fn images(images: &[String]) -> Result<(), String> {
    if images.is_empty() {
        return Err(
            "spec.imagePrePullTemplate.images is empty: list at least one image to pull".into(),
        );
    }
    for image in images {
        if image.is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "spec.imagePrePullTemplate.images has {image:?}: an image reference may not be empty or contain blanks"
            ));
        }
    }
    Ok(())
}

/// `ImagePrePullJob.spec.imagePrePullTemplate.imageSecrets`: empty, or `<namespace>/<name>`.
pub fn image_secret(secret: &str) -> Result<(), String> {
    if secret.is_empty() {
        return Ok(());
    }
    match secret.split_once('/') {
        Some((ns, name)) if is_dns1123_subdomain(ns) && is_dns1123_subdomain(name) => Ok(()),
        _ => Err(format!(
            "spec.imagePrePullTemplate.imageSecrets is {secret:?}: it must name a Secret as <namespace>/<name>"
        )),
    }
}

/// The namespace and name of `imageSecrets` (already checked by [`image_secret`]).
pub fn split_secret(secret: &str) -> Option<(&str, &str)> {
    secret
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
}

/// `ImagePrePullJob.spec.imagePrePullTemplate.retryTimes`.
pub fn retry_times(n: i64) -> Result<(), String> {
    if (0..=MAX_RETRY_TIMES).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "spec.imagePrePullTemplate.retryTimes is {n}: it must be between 0 and {MAX_RETRY_TIMES}"
        ))
    }
}

/// `ConfigUpdateJob.spec.updateFields`: at least one, keys and values the edge's
/// `keadm config-update --set k=v,…` can carry.
pub fn update_fields(fields: &BTreeMap<String, String>) -> Result<(), String> {
    if fields.is_empty() {
        return Err(
            "spec.updateFields is empty: name at least one edgecore.yaml field to change, such as modules.edgeHub.heartbeat: \"20\"".into(),
        );
    }
    for (k, v) in fields {
        if k.is_empty() || k.contains(['=', ',']) || k.chars().any(char::is_whitespace) {
            return Err(format!(
                "spec.updateFields has the key {k:?}: keys are dotted edgecore.yaml paths without '=', ',' or blanks"
            ));
        }
        if v.contains(',') {
            return Err(format!(
                "spec.updateFields.{k} is {v:?}: a value may not contain ',' (the edge passes the fields to keadm as k=v,k=v)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(timeout: Option<i64>, concurrency: i64, tolerate: &str) -> Common<'_> {
        Common {
            path: "spec.",
            timeout_seconds: timeout,
            concurrency,
            failure_tolerate: tolerate,
            check_items: &[],
        }
    }

    #[test]
    fn defaults_apply_when_unset_and_bad_values_get_a_reason() {
        let s = settings(&common(None, 0, "")).unwrap();
        assert_eq!(s.timeout, Duration::from_secs(300));
        assert_eq!((s.concurrency, s.tolerance), (1, 0.1));
        let s = settings(&common(Some(20), 3, "0.5")).unwrap();
        assert_eq!(
            (s.timeout.as_secs(), s.concurrency, s.tolerance),
            (20, 3, 0.5)
        );
        for (c, want) in [
            (common(Some(-5), 0, ""), "spec.timeoutSeconds is -5"),
            (common(Some(4_294_967_295), 0, ""), "between 1 and 604800"),
            (common(None, -1, ""), "spec.concurrency is -1"),
            (common(None, 0, "abc"), "failureTolerate is \"abc\""),
            (common(None, 0, "1.5"), "from 0 to 1"),
            (common(None, 0, "NaN"), "from 0 to 1"),
        ] {
            let reason = settings(&c).unwrap_err();
            assert!(reason.contains(want), "{reason}");
        }
        let items = ["disk".to_string(), "gpu".to_string()];
        let mut c = common(None, 0, "");
        c.check_items = &items;
        assert!(settings(&c).unwrap_err().contains("\"gpu\""));
        assert_eq!(settings_or_default(&common(Some(-1), 0, "")).concurrency, 1);
    }

    #[test]
    fn kind_rules() {
        assert!(upgrade_version("v1.23.0").is_ok());
        assert!(upgrade_version("v1.23.0-beta.0").is_ok());
        assert!(
            upgrade_version("1.23.0")
                .unwrap_err()
                .contains("\"1.23.0\"")
        );
        assert!(upgrade_image("").is_ok());
        assert!(upgrade_image("127.0.0.1:5000/kubeedge/installation-package").is_ok());
        assert!(upgrade_image("kubeedge/installation-package:v1").is_err());
        assert!(upgrade_image("busybox").is_err());
        assert!(images(&[]).unwrap_err().contains("is empty"));
        assert!(images(&["a b".into()]).is_err());
        assert!(images(&["127.0.0.1:5000/x:1".into()]).is_ok());
        assert!(image_secret("default/regcred").is_ok());
        assert!(image_secret("regcred").is_err());
        assert!(image_secret("a/b/c").is_err());
        assert!(retry_times(-1).is_err());
        assert!(update_fields(&BTreeMap::new()).is_err());
        let ok = BTreeMap::from([("modules.edgeHub.heartbeat".to_string(), "20".to_string())]);
        assert!(update_fields(&ok).is_ok());
        let comma = BTreeMap::from([("a".to_string(), "1,2".to_string())]);
        assert!(update_fields(&comma).is_err());
        assert!(job_name("node").is_err());
        assert!(job_name("nodes").is_ok());
    }
}
