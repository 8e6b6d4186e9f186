//! The task messages on the wire: the resource grammar both ways, the edge's report
//! (`UpdateNodeActionStatus`), and what cloudcore sends down.
//!
//! ```text
//! down: taskmanager/taskmanager  Check                   operations.kubeedge.io/v1alpha2/<kind>/<job>/node/<node>  {spec}
//! up:   edgehub/hub              UpdateNodeActionStatus  (same resource; cloudhub puts node/<session>/ in front)   {action, succ, finishTime, reason, extend}
//! ```

use beehive::{Content, Message};
use kubeedge_api::names::{GROUP_RESOURCE, TASKMANAGER};
use kubeedge_api::operations::{API_VERSION, action};
use kubeedge_api::validation::is_dns1123_subdomain;
use serde::Deserialize;

use crate::kind::JobKind;

/// The operation of an edge's action report.
pub const REPORT_OPERATION: &str = "UpdateNodeActionStatus";

/// Largest report content accepted (a Pull report lists every image with its error text).
pub const MAX_REPORT_BYTES: usize = 256 * 1024;

/// `operations.kubeedge.io/v1alpha2/<kind>/<job>/node/<node>`: one node's task of one job.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskResource {
    /// The job kind.
    pub kind: JobKind,
    /// The job's name.
    pub job: String,
    /// The node's name.
    pub node: String,
}

impl TaskResource {
    /// The task of `node` in `job`.
    pub fn new(kind: JobKind, job: &str, node: &str) -> Self {
        TaskResource {
            kind,
            job: job.to_owned(),
            node: node.to_owned(),
        }
    }

    /// Parses the edge's form (no `node/<session>/` prefix): exactly six segments, the API
    /// version, a known kind, `node`, and DNS-1123 names for the job and the node.
    pub fn parse(resource: &str) -> Result<Self, Refusal> {
        let rest = resource
            .strip_prefix(API_VERSION)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or(Refusal::Legacy)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [kind, job, node_word, node] = parts[..] else {
            return Err(Refusal::Malformed("not <kind>/<job>/node/<node>"));
        };
        let kind = JobKind::from_resource_type(kind).ok_or(Refusal::Malformed("unknown kind"))?;
        if node_word != "node" || !is_dns1123_subdomain(job) || !is_dns1123_subdomain(node) {
            return Err(Refusal::Malformed("not <kind>/<job>/node/<node>"));
        }
        Ok(TaskResource::new(kind, job, node))
    }
}

impl std::fmt::Display for TaskResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{API_VERSION}/{}/{}/node/{}",
            self.kind.resource_type(),
            self.job,
            self.node
        )
    }
}

/// Why an upstream task message was not applied. Every variant is logged and counted; none
/// is answered (the edge expects no answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a v1alpha2 node-job report: KubeEdge's v1alpha1 traffic (`upgrade`, `prepull`,
    /// `task/<id>/node/<node>`, the certificate server's `/nodeupgrade`), which this cloudcore
    /// does not run.
    #[error("not a v1alpha2 node job report (v1alpha1 task traffic is not served)")]
    Legacy,
    /// The resource or content cannot be read.
    #[error("malformed report: {0}")]
    Malformed(&'static str),
    /// The message did not come through an edge session (no `node/<id>/` from cloudhub).
    #[error("report without the session's node")]
    NoSession,
    /// The resource names another node than the session it came from.
    #[error("a node may only report its own tasks")]
    OtherNode,
    /// The job does not exist, is being deleted, or is not of that kind.
    #[error("no such running job")]
    UnknownJob,
    /// The node is not one of the job's nodes, or its task was never sent to it.
    #[error("the node was not sent this task")]
    NotSent,
    /// The action is not in the kind's flow.
    #[error("unknown action")]
    UnknownAction,
    /// The node already reported as much as any flow can (a node cannot grow the job's
    /// status without bound).
    #[error("too many reports for this task")]
    TooMany,
    /// The report queue was full or the node held its share of it.
    #[error("report queue full")]
    QueueFull,
}

impl Refusal {
    /// All variants, in metric order.
    pub const ALL: [Refusal; 9] = [
        Refusal::Legacy,
        Refusal::Malformed(""),
        Refusal::NoSession,
        Refusal::OtherNode,
        Refusal::UnknownJob,
        Refusal::NotSent,
        Refusal::UnknownAction,
        Refusal::TooMany,
        Refusal::QueueFull,
    ];

    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Legacy => "legacy",
            Refusal::Malformed(_) => "malformed",
            Refusal::NoSession => "noSession",
            Refusal::OtherNode => "otherNode",
            Refusal::UnknownJob => "unknownJob",
            Refusal::NotSent => "notSent",
            Refusal::UnknownAction => "unknownAction",
            Refusal::TooMany => "tooMany",
            Refusal::QueueFull => "queueFull",
        }
    }

    /// Whether the refusal is a node reaching beyond its own tasks (counted in
    /// `cloudcore_node_authorization_denied_total`).
    pub fn is_denial(&self) -> bool {
        matches!(self, Refusal::OtherNode | Refusal::NotSent)
    }
}

/// The edge's report of one finished action (`pkg/nodetask/message.UpstreamMessage`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Report {
    /// The action that finished.
    pub action: String,
    /// Whether it succeeded.
    pub succ: bool,
    /// RFC 3339 time it finished (empty in ConfigUpdateJob reports: an edge bug).
    pub finish_time: String,
    /// The error text when it failed.
    pub reason: String,
    /// Kind-specific: `"<from>,<to>"` versions (upgrade) or the JSON list of image results
    /// (pull).
    pub extend: String,
}

/// One report as it came from the edge: the session's node, the task it names, the content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The task (its node is the session's).
    pub task: TaskResource,
    /// What the edge reported.
    pub report: Report,
}

/// Reads an upstream message from cloudhub: `node/<session>/<task resource>` with operation
/// [`REPORT_OPERATION`] and a [`Report`] as content.
pub fn parse_upstream(msg: &Message) -> Result<Upstream, Refusal> {
    let resource = msg.route.resource.as_str();
    let (session, rest) = resource
        .strip_prefix("node/")
        .and_then(|r| r.split_once('/'))
        .ok_or(Refusal::NoSession)?;
    if session.is_empty() {
        return Err(Refusal::NoSession);
    }
    if !rest.starts_with(API_VERSION) {
        return Err(Refusal::Legacy);
    }
    if msg.route.operation != REPORT_OPERATION {
        return Err(Refusal::Malformed("unknown operation"));
    }
    let task = TaskResource::parse(rest)?;
    if task.node != session {
        return Err(Refusal::OtherNode);
    }
    let bytes = msg.content.bytes();
    if bytes.len() > MAX_REPORT_BYTES {
        return Err(Refusal::Malformed("report too large"));
    }
    let report: Report =
        serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed("content"))?;
    Ok(Upstream { task, report })
}

/// The message that starts a node's task: operation `Check` (the only action the edge's flow
/// starts from), the job's spec as content, no resource version (no acknowledgement).
pub fn task_message(task: &TaskResource, spec: &serde_json::Value) -> Message {
    Message::new()
        .with_route(TASKMANAGER, TASKMANAGER, task.to_string(), action::CHECK)
        .with_content(Content::json(spec).unwrap_or_default())
}

/// A Secret put into (`insert`) or removed from (`delete`) the node's store, as the
/// edgecontroller sends objects: `node/<node>/<ns>/secret/<name>`, group `resource`, from
/// `taskmanager` (so cloudhub sends it once, without an acknowledgement record).
pub fn secret_message(
    node: &str,
    namespace: &str,
    name: &str,
    op: &str,
    secret: &serde_json::Value,
) -> Message {
    Message::new()
        .with_route(
            TASKMANAGER,
            GROUP_RESOURCE,
            format!("node/{node}/{namespace}/secret/{name}"),
            op,
        )
        .with_content(Content::json(secret).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(resource: &str, op: &str, content: &str) -> Message {
        Message::new()
            .with_route("edgehub", "hub", resource, op)
            .with_content(Content::from_json_text(content.into()).unwrap())
    }

    #[test]
    fn task_resources_round_trip_and_bad_ones_are_refused() {
        let t = TaskResource::new(JobKind::ImagePrePull, "prepull-1", "edge-1");
        let s = t.to_string();
        assert_eq!(
            s,
            "operations.kubeedge.io/v1alpha2/imageprepulljob/prepull-1/node/edge-1"
        );
        assert_eq!(TaskResource::parse(&s), Ok(t));
        for bad in [
            "operations.kubeedge.io/v1alpha2/imageprepulljob/j/node",
            "operations.kubeedge.io/v1alpha2/imageprepulljob/j/nodes/e",
            "operations.kubeedge.io/v1alpha2/imagepulljob/j/node/e",
            "operations.kubeedge.io/v1alpha2/imageprepulljob/J?x/node/e",
            "operations.kubeedge.io/v1alpha2/imageprepulljob/j/node/e/extra",
            "operations.kubeedge.io/v1alpha2/imageprepulljob/../node/e",
        ] {
            assert!(
                matches!(TaskResource::parse(bad), Err(Refusal::Malformed(_))),
                "{bad}"
            );
        }
        assert_eq!(TaskResource::parse("task/t1/node/e"), Err(Refusal::Legacy));
    }

    #[test]
    fn reports_are_read_only_for_the_sessions_own_node() {
        let good = report(
            "node/edge-1/operations.kubeedge.io/v1alpha2/nodeupgradejob/up-1/node/edge-1",
            REPORT_OPERATION,
            r#"{"action":"BackUp","succ":true,"finishTime":"2026-08-06T07:01:00Z","reason":"","extend":"v1.22.1,v1.23.0"}"#,
        );
        let up = parse_upstream(&good).unwrap();
        assert_eq!(up.task.job, "up-1");
        assert_eq!(up.report.extend, "v1.22.1,v1.23.0");
        assert!(up.report.succ);
        let other = report(
            "node/edge-2/operations.kubeedge.io/v1alpha2/nodeupgradejob/up-1/node/edge-1",
            REPORT_OPERATION,
            "{}",
        );
        assert_eq!(parse_upstream(&other), Err(Refusal::OtherNode));
        let unprefixed = report(
            "operations.kubeedge.io/v1alpha2/nodeupgradejob/up-1/node/edge-1",
            REPORT_OPERATION,
            "{}",
        );
        assert_eq!(parse_upstream(&unprefixed), Err(Refusal::NoSession));
        let legacy = report("node/edge-1/task/t/node/edge-1", "upgrade", "{}");
        assert_eq!(parse_upstream(&legacy), Err(Refusal::Legacy));
        let garbage = report(
            "node/edge-1/operations.kubeedge.io/v1alpha2/nodeupgradejob/up-1/node/edge-1",
            REPORT_OPERATION,
            "[1,2]",
        );
        assert!(matches!(
            parse_upstream(&garbage),
            Err(Refusal::Malformed(_))
        ));
        // A ConfigUpdateJob report without finishTime still reads.
        let cu = report(
            "node/e/operations.kubeedge.io/v1alpha2/configupdatejob/c/node/e",
            REPORT_OPERATION,
            r#"{"action":"Check","succ":true}"#,
        );
        assert_eq!(parse_upstream(&cu).unwrap().report.finish_time, "");
    }

    #[test]
    fn the_task_message_is_what_the_edge_expects() {
        let t = TaskResource::new(JobKind::ImagePrePull, "p", "edge-1");
        let m = task_message(
            &t,
            &serde_json::json!({"imagePrePullTemplate": {"images": ["a"]}}),
        );
        assert_eq!(
            (
                m.route.source.as_str(),
                m.route.group.as_str(),
                m.route.operation.as_str()
            ),
            ("taskmanager", "taskmanager", "Check")
        );
        assert_eq!(kubeedge_api::node_of(&m.route.resource), Some("edge-1"));
        assert!(m.header.resource_version.is_empty() && m.header.parent_id.is_empty());
        let json: serde_json::Value = serde_json::from_slice(&m.to_json()).unwrap();
        assert_eq!(json["content"]["imagePrePullTemplate"]["images"][0], "a");
    }
}
