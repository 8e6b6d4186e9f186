//! The standard operation and resource-type strings of KubeEdge's beehive `model` package.

/// Operations (`route.operation`).
pub mod operation {
    /// `insert`
    pub const INSERT: &str = "insert";
    /// `delete`
    pub const DELETE: &str = "delete";
    /// `query`
    pub const QUERY: &str = "query";
    /// `update`
    pub const UPDATE: &str = "update";
    /// `patch`
    pub const PATCH: &str = "patch";
    /// `upload`
    pub const UPLOAD: &str = "upload";
    /// `response`: an answer; `parent_msg_id` names the request.
    pub const RESPONSE: &str = "response";
    /// `error`: an error answer.
    pub const RESPONSE_ERROR: &str = "error";
    /// `unhold-upgrade`
    pub const UNHOLD_UPGRADE: &str = "unhold-upgrade";
}

/// Resource types (the type segment of `route.resource`).
pub mod resource_type {
    /// `pod`
    pub const POD: &str = "pod";
    /// `configmap`
    pub const CONFIGMAP: &str = "configmap";
    /// `serviceaccounttoken`
    pub const SERVICE_ACCOUNT_TOKEN: &str = "serviceaccounttoken";
    /// `secret`
    pub const SECRET: &str = "secret";
    /// `node`
    pub const NODE: &str = "node";
    /// `podlist`
    pub const POD_LIST: &str = "podlist";
    /// `podstatus`
    pub const POD_STATUS: &str = "podstatus";
    /// `podpatch`
    pub const POD_PATCH: &str = "podpatch";
    /// `nodestatus`
    pub const NODE_STATUS: &str = "nodestatus";
    /// `nodepatch`
    pub const NODE_PATCH: &str = "nodepatch";
    /// `rule`
    pub const RULE: &str = "rule";
    /// `ruleendpoint`
    pub const RULE_ENDPOINT: &str = "ruleendpoint";
    /// `rulestatus`
    pub const RULE_STATUS: &str = "rulestatus";
    /// `lease`
    pub const LEASE: &str = "lease";
    /// `event`
    pub const EVENT: &str = "event";
    /// `serviceaccountaccess`
    pub const SERVICE_ACCOUNT_ACCESS: &str = "serviceaccountaccess";
    /// `certificatesigningrequest`
    pub const CSR: &str = "certificatesigningrequest";
    /// `k8s/ca.crt`: the whole resource of a Kubernetes CA query.
    pub const K8S_CA: &str = "k8s/ca.crt";
}

/// The content of a successful acknowledgement (`MessageSuccessfulContent`).
pub const SUCCESS_CONTENT: &str = "OK";
