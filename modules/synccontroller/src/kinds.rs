//! What a record's `objectAPIVersion`/`objectKind` name: group/version, resource, scope,
//! resource-type string and message source.

use kube::core::GroupVersionKind;
use kubeedge_api::names::{DEVICECONTROLLER, EDGECONTROLLER, POLICYCONTROLLER};
use kubeedge_api::{devices, policy};

/// Splits `v1` → (``, `v1`) and `devices.kubeedge.io/v1beta1` → (`devices.kubeedge.io`, `v1beta1`).
pub(crate) fn gvk(api_version: &str, kind: &str) -> Option<GroupVersionKind> {
    if kind.is_empty() {
        return None;
    }
    let (group, version) = group_version(api_version)?;
    Some(GroupVersionKind::gvk(group, version, kind))
}

/// Group and version of an `apiVersion` (see [`gvk`]), borrowed; `None` when malformed.
pub(crate) fn group_version(api_version: &str) -> Option<(&str, &str)> {
    match api_version.split_once('/') {
        Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => Some((g, v)),
        None if !api_version.is_empty() => Some(("", api_version)),
        _ => None,
    }
}

/// The resource-type segment of message resources: the kind lower-cased.
pub(crate) fn type_name(kind: &str) -> String {
    kind.to_lowercase()
}

/// KubeEdge's kind → plural rule (docs/controllers.md#synccontroller), used only when discovery
/// cannot answer.
pub(crate) fn plural_of(kind: &str) -> String {
    match kind {
        "Endpoints" => return "endpoints".into(),
        "PodStatus" => return "podstatus".into(),
        "NodeStatus" => return "nodestatus".into(),
        "CustomResourceDefinition" => return "customresourcedefinitions".into(),
        "Leases" => return "leases".into(),
        _ => {}
    }
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// The module an update of this group is sent as: devicecontroller for device kinds, so
/// the edge hands it to devicetwin (KubeEdge sends everything as
/// edgecontroller, so resynced devices reach edged instead); policycontroller for
/// ServiceAccountAccesses (the edge stores them without telling edged); edgecontroller
/// otherwise.
pub(crate) fn source_for(group: &str) -> &'static str {
    if group == devices::GROUP {
        DEVICECONTROLLER
    } else if group == policy::GROUP {
        POLICYCONTROLLER
    } else {
        EDGECONTROLLER
    }
}

/// Whether an object of this group goes to the edge without its status (a
/// ServiceAccountAccess's `status.nodeList` names other nodes).
pub(crate) fn without_status(group: &str) -> bool {
    group == policy::GROUP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_split_into_group_and_version() {
        let g = gvk("v1", "Pod").unwrap();
        assert_eq!((g.group.as_str(), g.version.as_str()), ("", "v1"));
        let g = gvk("devices.kubeedge.io/v1beta1", "Device").unwrap();
        assert_eq!(
            (g.group.as_str(), g.version.as_str(), g.kind.as_str()),
            ("devices.kubeedge.io", "v1beta1", "Device")
        );
        assert!(gvk("", "Pod").is_none());
        assert!(gvk("a/b/c", "Pod").is_none());
        assert!(gvk("/v1", "Pod").is_none());
        assert!(gvk("v1", "").is_none());
    }

    #[test]
    fn plurals_follow_kubeedge_rules() {
        assert_eq!(plural_of("Pod"), "pods");
        assert_eq!(plural_of("Ingress"), "ingresses");
        assert_eq!(plural_of("NetworkPolicy"), "networkpolicies");
        assert_eq!(plural_of("DeviceModel"), "devicemodels");
        assert_eq!(plural_of("Endpoints"), "endpoints");
        assert_eq!(type_name("PersistentVolumeClaim"), "persistentvolumeclaim");
        assert_eq!(source_for("devices.kubeedge.io"), "devicecontroller");
        assert_eq!(source_for("policy.kubeedge.io"), "policycontroller");
        assert_eq!(source_for(""), "edgecontroller");
        assert!(without_status("policy.kubeedge.io") && !without_status(""));
    }
}
