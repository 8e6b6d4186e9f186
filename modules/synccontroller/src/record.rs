//! One ObjectSync or ClusterObjectSync, and the decision what to send for it.

use kube::ResourceExt;
use kube::api::DynamicObject;
use kubeedge_api::reliablesyncs::{ClusterObjectSync, ObjectSync, parse_object_sync_name};
use kubeedge_api::version;

/// Which record: namespaced ObjectSync or ClusterObjectSync.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RecordKey {
    /// `ObjectSync` `<namespace>/<name>`.
    Namespaced { namespace: String, name: String },
    /// `ClusterObjectSync` `<name>`.
    Cluster { name: String },
}

impl RecordKey {
    pub(crate) fn name(&self) -> &str {
        match self {
            RecordKey::Namespaced { name, .. } | RecordKey::Cluster { name } => name,
        }
    }

    /// The namespace token of message resources: the record's namespace, or `null`.
    pub(crate) fn namespace_token(&self) -> &str {
        match self {
            RecordKey::Namespaced { namespace, .. } => namespace,
            RecordKey::Cluster { .. } => kubeedge_api::names::NULL_NAMESPACE,
        }
    }
}

/// The fields of a record the reconciler needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: RecordKey,
    /// Node and object UID from the name; `None` when the name does not parse.
    pub(crate) target: Option<(String, String)>,
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) object_name: String,
    /// `status.objectResourceVersion`: what the edge acknowledged.
    pub(crate) acked: String,
}

fn target(name: &str) -> Option<(String, String)> {
    parse_object_sync_name(name).map(|(n, u)| (n.to_owned(), u.to_owned()))
}

impl Record {
    pub(crate) fn namespaced(os: &ObjectSync) -> Record {
        let name = os.name_any();
        Record {
            target: target(&name),
            key: RecordKey::Namespaced {
                namespace: os.namespace().unwrap_or_default(),
                name,
            },
            api_version: os.spec.object_api_version.clone(),
            kind: os.spec.object_kind.clone(),
            object_name: os.spec.object_name.clone(),
            acked: os
                .status
                .as_ref()
                .map(|s| s.object_resource_version.clone())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn cluster(cos: &ClusterObjectSync) -> Record {
        let name = cos.name_any();
        Record {
            target: target(&name),
            key: RecordKey::Cluster { name },
            api_version: cos.spec.object_api_version.clone(),
            kind: cos.spec.object_kind.clone(),
            object_name: cos.spec.object_name.clone(),
            acked: cos
                .status
                .as_ref()
                .map(|s| s.object_resource_version.clone())
                .unwrap_or_default(),
        }
    }
}

/// Why a record without a status sends nothing (yet: see the reconciler's grace).
pub(crate) const NOT_ACKNOWLEDGED: &str = "nothing acknowledged yet";

/// What to do for a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Send nothing (why, for the log).
    Skip(&'static str),
    /// The live object is newer than what the edge acknowledged: send it.
    Update,
    /// The object is gone: tell the edge to delete its copy.
    Orphan,
    /// An object of that name exists with another UID: the record belongs to a previous
    /// incarnation (deleted and recreated under the same name). What to do depends on how the
    /// edge matches a delete (by UID for pods, by name for everything else).
    Superseded,
}

/// Decides for `record` given the live object (`None` = it does not exist). Never panics on
/// bad versions: an unparsable one counts as "unknown, resend" (Go panics).
pub(crate) fn decide(record: &Record, object: Option<&DynamicObject>) -> Decision {
    let Some((_, uid)) = &record.target else {
        return Decision::Skip("record name is not <node>.<uid>");
    };
    let Some(object) = object else {
        return Decision::Orphan;
    };
    if object.metadata.uid.as_deref() != Some(uid.as_str()) {
        return Decision::Superseded;
    }
    if record.acked.is_empty() {
        return Decision::Skip(NOT_ACKNOWLEDGED);
    }
    let live = object
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default();
    if version::compare(live, &record.acked).is_none() {
        tracing::warn!(record = record.key.name(), live, acked = %record.acked, "unparsable resource version, resending");
    }
    if version::is_newer(live, &record.acked) {
        Decision::Update
    } else {
        Decision::Skip("up to date")
    }
}

/// Whether [`decide`] says "up to date" for a record named `name` showing `acked`, given the
/// live `object`, read from borrowed fields: the periodic pass leaves such records alone without
/// copying them into a [`Record`].
pub(crate) fn settled(name: &str, acked: &str, object: &DynamicObject) -> bool {
    let Some((_, uid)) = parse_object_sync_name(name) else {
        return false;
    };
    let live = object
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default();
    !acked.is_empty()
        && object.metadata.uid.as_deref() == Some(uid)
        && version::compare(live, acked).is_some()
        && !version::is_newer(live, acked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn record(acked: &str) -> Record {
        Record {
            key: RecordKey::Namespaced {
                namespace: "ns".into(),
                name: "edge.2.u1".into(),
            },
            target: target("edge.2.u1"),
            api_version: "v1".into(),
            kind: "Pod".into(),
            object_name: "web".into(),
            acked: acked.into(),
        }
    }

    fn object(uid: &str, rv: &str) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            data: serde_json::json!({}),
        }
    }

    #[test]
    fn decisions_follow_the_reconcile_rules() {
        assert_eq!(
            record("5").target,
            Some(("edge.2".to_string(), "u1".to_string()))
        );
        assert_eq!(decide(&record("5"), None), Decision::Orphan);
        assert_eq!(
            decide(&record("5"), Some(&object("other", "9"))),
            Decision::Superseded
        );
        assert_eq!(
            decide(&record("5"), Some(&object("u1", "9"))),
            Decision::Update
        );
        assert_eq!(
            decide(&record("9"), Some(&object("u1", "9"))),
            Decision::Skip("up to date")
        );
        assert_eq!(
            decide(&record("10"), Some(&object("u1", "9"))),
            Decision::Skip("up to date")
        );
        assert_eq!(
            decide(&record(""), Some(&object("u1", "9"))),
            Decision::Skip("nothing acknowledged yet")
        );
        assert_eq!(
            decide(&record("abc"), Some(&object("u1", "9"))),
            Decision::Update,
            "bad versions never panic"
        );
        let mut bad = record("5");
        bad.target = None;
        assert!(matches!(decide(&bad, None), Decision::Skip(_)));
    }

    /// The periodic pass skips a record on `settled` alone: it must say yes exactly where
    /// `decide` says "up to date", never where anything would be sent or waited for.
    #[test]
    fn settled_is_exactly_decide_up_to_date() {
        let objects = [
            object("u1", "9"),
            object("u1", "10"),
            object("u1", "abc"),
            object("u1", ""),
            object("other", "9"),
        ];
        for acked in ["", "0", "5", "9", "10", "abc"] {
            for name in ["edge.2.u1", "nodot", "edge.2.other"] {
                for obj in &objects {
                    let mut r = record(acked);
                    r.target = target(name);
                    let up_to_date = decide(&r, Some(obj)) == Decision::Skip("up to date");
                    assert_eq!(
                        settled(name, acked, obj),
                        up_to_date,
                        "record {name} acked {acked:?}, object {:?}",
                        obj.metadata
                    );
                }
            }
        }
        assert!(settled("edge.2.u1", "9", &object("u1", "9")));
        assert!(!settled("edge.2.u1", "9", &object("u1", "10")), "newer");
        assert!(!settled("edge.2.u1", "", &object("u1", "9")), "no status");
        assert!(!settled("edge.2.u1", "9", &object("u2", "9")), "recreated");
    }
}
