//! Every CRD the project defines, for `manifests/` and for tests that register them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::reliablesyncs::{ClusterObjectSync, ObjectSync};

/// All CRDs, in a stable order: reliablesyncs, devices, rules, operations, policy.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut all = vec![ObjectSync::crd(), ClusterObjectSync::crd()];
    all.extend(crate::devices::crds());
    all.extend(crate::rules::crds());
    all.extend(crate::operations::crds());
    all.extend(crate::policy::crds());
    all
}

/// A CRD as the YAML written to `manifests/crds/<name>.yaml`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(crd)
}

/// The file name of a CRD's manifest: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}
