//! The router's messages, exactly as KubeEdge's router and edgecore's eventbus and servicebus
//! write and read them: the one place their shapes are defined.

use std::collections::BTreeMap;

use base64::Engine;
use beehive::{Content, Id, Message};
use kubeedge_api::names;
use kubeedge_api::rules::{ExecError, ExecResult};
use serde::{Deserialize, Serialize};

use crate::route::RuleKey;

/// Source of messages for edgecore's eventbus (`modules.RouterSourceEventBus`).
pub const SOURCE_EVENTBUS: &str = "router_eventbus";
/// Source of messages for edgecore's servicebus (`modules.RouterSourceServiceBus`).
pub const SOURCE_SERVICEBUS: &str = "router_servicebus";
/// Source of the MQTT messages edgecore's eventbus uploads.
pub const SOURCE_BUS: &str = "bus";
/// Source of edgecore's servicebus answers.
pub const SOURCE_EDGE_SERVICEBUS: &str = "servicebus";
/// Operations of the control and data messages.
pub mod op {
    /// Subscribe an MQTT topic at the edge.
    pub const SUBSCRIBE: &str = "subscribe";
    /// Unsubscribe it.
    pub const UNSUBSCRIBE: &str = "unsubscribe";
    /// Publish the content on the resource's topic.
    pub const PUBLISH: &str = "publish";
    /// An edge upload (eventbus message or servicebus answer).
    pub const UPLOAD: &str = "upload";
}

/// `subscribe`/`unsubscribe` of `<namespace>/<topic>` at `node`: source `router_eventbus`,
/// group `user`, resource `node/<node>/<namespace>/<topic>`, no content.
pub(crate) fn subscription(node: &str, topic: &str, operation: &'static str) -> Message {
    Message::new().with_route(
        SOURCE_EVENTBUS,
        names::GROUP_USER,
        format!("node/{node}/{topic}"),
        operation,
    )
}

/// `publish` of `body` on `topic` at `node`, with the REST call's id as message id: content the
/// body as a JSON string (Go's `string(body)`: invalid UTF-8 becomes U+FFFD).
pub(crate) fn publish(id: &Id, node: &str, topic: &str, body: &[u8]) -> Message {
    let mut msg = Message::new()
        .with_route(
            SOURCE_EVENTBUS,
            names::GROUP_USER,
            format!("node/{node}/{topic}"),
            op::PUBLISH,
        )
        .with_content(Content::string(String::from_utf8_lossy(body)));
    msg.header.id = id.clone();
    msg
}

/// Go's `http.Header`: canonical names to every value.
pub type Headers = BTreeMap<String, Vec<String>>;

/// edgecore's `HTTPRequest`: what its servicebus sends to the local service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Headers (Go `http.Header`).
    #[serde(default)]
    pub header: Option<Headers>,
    /// The body (Go `[]byte`: base64).
    #[serde(default, with = "base64_bytes")]
    pub body: Vec<u8>,
    /// The method.
    #[serde(default)]
    pub method: String,
    /// Always empty: the resource carries port and path.
    #[serde(default)]
    pub url: String,
}

/// edgecore's `HTTPResponse`: the local service's answer, or the servicebus's own error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// Headers (Go `http.Header`).
    #[serde(default)]
    pub header: Option<Headers>,
    /// The status code.
    #[serde(default)]
    pub status_code: i64,
    /// The body (Go `[]byte`: base64).
    #[serde(default, with = "base64_bytes")]
    pub body: Vec<u8>,
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Vec::new()),
            Some(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The servicebus request for a REST call: message id = the call's id, source
/// `router_servicebus`, group `user`, operation the HTTP method, resource
/// `node/<node>/<port>:<path>`, content an [`HttpRequest`].
pub(crate) fn servicebus_request(
    id: &Id,
    node: &str,
    port: u16,
    path: &str,
    method: &str,
    header: Headers,
    body: &[u8],
) -> Message {
    let request = HttpRequest {
        header: Some(header),
        body: body.to_vec(),
        method: method.to_owned(),
        url: String::new(),
    };
    let mut msg = Message::new()
        .with_route(
            SOURCE_SERVICEBUS,
            names::GROUP_USER,
            format!("node/{node}/{port}:{path}"),
            method,
        )
        .with_content(Content::json(&request).unwrap_or_default());
    msg.header.id = id.clone();
    msg
}

/// Go's `textproto.CanonicalMIMEHeaderKey` for names of token characters: `content-type` is
/// `Content-Type`.
pub(crate) fn canonical_header(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        if !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)) {
            return name.to_owned();
        }
        out.push(if upper {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
        upper = c == '-';
    }
    out
}

/// Reads an edge servicebus answer: content an [`HttpResponse`] object (or a string holding
/// one).
pub(crate) fn servicebus_answer(msg: &Message) -> Result<HttpResponse, serde_json::Error> {
    msg.content.parse_bytes()
}

/// The content of an eventbus upload: the MQTT payload (a JSON string on the wire).
pub(crate) fn upload_payload(msg: &Message) -> Vec<u8> {
    msg.content.bytes().into_owned()
}

/// The rule status message to edgecontroller: source `router`, group `resource`, operation
/// `update`, resource `node/nodeid/<namespace or "default">/rulestatus/<name>` (the literal
/// `nodeid`, as KubeEdge), content an [`ExecResult`] standing for `count` deliveries.
pub(crate) fn rule_status(rule: &RuleKey, failure: Option<&str>, count: u32) -> Message {
    let namespace = if rule.namespace.is_empty() {
        "default"
    } else {
        &rule.namespace
    };
    let result = ExecResult {
        rule_id: rule.name.clone(),
        project_id: rule.namespace.clone(),
        status: if failure.is_some() {
            ExecResult::FAIL
        } else {
            ExecResult::SUCCESS
        }
        .into(),
        error: match failure {
            Some(detail) => ExecError {
                detail: detail.to_owned(),
                timestamp: k8s_openapi::jiff::Timestamp::now().to_string(),
            },
            None => ExecError {
                detail: String::new(),
                timestamp: "0001-01-01T00:00:00Z".into(),
            },
        },
        count: (count != 1).then_some(count),
    };
    Message::new()
        .with_route(
            names::ROUTER,
            names::GROUP_RESOURCE,
            format!("node/nodeid/{namespace}/rulestatus/{}", rule.name),
            beehive::constants::operation::UPDATE,
        )
        .with_content(Content::json(&result).unwrap_or_default())
}

/// The node of an edge message as cloudhub prefixed it (`node/<node>/…`), and the rest.
pub(crate) fn edge_node(resource: &str) -> Option<(&str, &str)> {
    let rest = resource.strip_prefix("node/")?;
    let (node, rest) = rest.split_once('/').unwrap_or((rest, ""));
    (!node.is_empty()).then_some((node, rest))
}

/// `body` as base64 (for logs and tests).
pub fn base64(body: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(body)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wire(msg: &Message) -> serde_json::Value {
        serde_json::from_slice(&msg.to_json()).unwrap()
    }

    #[test]
    fn publish_and_subscription_are_kubeedges_shapes() {
        let id = Id::new_v4();
        let m = wire(&publish(&id, "edge-1", "test/a", b"{\"temp\":21}"));
        assert_eq!(m["header"]["msg_id"], id.to_string());
        assert!(m["header"].get("parent_msg_id").is_none());
        assert_eq!(
            m["route"],
            json!({"source": "router_eventbus", "group": "user", "operation": "publish",
                   "resource": "node/edge-1/test/a"})
        );
        assert_eq!(m["content"], "{\"temp\":21}");
        let s = wire(&subscription("edge-1", "default/test", op::SUBSCRIBE));
        assert_eq!(s["route"]["resource"], "node/edge-1/default/test");
        assert_eq!(s["route"]["operation"], "subscribe");
        assert!(s["content"].is_null());
    }

    #[test]
    fn the_servicebus_request_carries_go_header_and_base64_body() {
        let id = Id::new_v4();
        let mut header = Headers::new();
        header.insert(canonical_header("content-type"), vec!["text/plain".into()]);
        let m = wire(&servicebus_request(
            &id,
            "edge-1",
            6666,
            "/target/a?x=1",
            "POST",
            header,
            b"hi",
        ));
        assert_eq!(
            m["route"],
            json!({"source": "router_servicebus", "group": "user", "operation": "POST",
                   "resource": "node/edge-1/6666:/target/a?x=1"})
        );
        assert_eq!(
            m["content"],
            json!({"header": {"Content-Type": ["text/plain"]}, "body": "aGk=", "method": "POST", "url": ""})
        );
    }

    #[test]
    fn edge_answers_decode_from_an_object_or_a_string() {
        let object = Message::new().with_content(
            Content::json(
                &json!({"header": {"Server": ["x"]}, "status_code": 201, "body": "b2s="}),
            )
            .unwrap(),
        );
        let a = servicebus_answer(&object).unwrap();
        assert_eq!((a.status_code, a.body.as_slice()), (201, &b"ok"[..]));
        let string = Message::new().with_content(Content::string(
            r#"{"header":null,"status_code":404,"body":null}"#,
        ));
        let a = servicebus_answer(&string).unwrap();
        assert_eq!((a.status_code, a.body.len()), (404, 0));
    }

    #[test]
    fn rule_status_is_go_exec_result_to_edgecontroller() {
        let key = RuleKey {
            namespace: "ns".into(),
            name: "r".into(),
        };
        let m = wire(&rule_status(&key, None, 1));
        assert_eq!(
            m["route"],
            json!({"source": "router", "group": "resource", "operation": "update",
                   "resource": "node/nodeid/ns/rulestatus/r"})
        );
        assert_eq!(m["content"]["Status"], "SUCCESS");
        assert!(m["content"].get("Count").is_none());
        let m = wire(&rule_status(&key, Some("504 Gateway Timeout"), 3));
        assert_eq!(
            (
                &m["content"]["Status"],
                &m["content"]["Error"]["Detail"],
                &m["content"]["Count"]
            ),
            (&json!("FAIL"), &json!("504 Gateway Timeout"), &json!(3))
        );
    }

    #[test]
    fn header_names_are_canonical_as_go_writes_them() {
        assert_eq!(canonical_header("content-type"), "Content-Type");
        assert_eq!(canonical_header("X-FOO-bar"), "X-Foo-Bar");
        assert_eq!(canonical_header("bad name"), "bad name");
        assert_eq!(edge_node("node/e1/ns/t"), Some(("e1", "ns/t")));
        assert_eq!(edge_node("node/e1/"), Some(("e1", "")));
        assert_eq!(edge_node("e1/ns"), None);
    }
}
