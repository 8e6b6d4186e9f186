//! One request on a connection: read it (bounded), check it is a volume operation for a node,
//! and shape the answer, exactly as KubeEdge's CSI driver reads it.

use beehive::{Content, Message};
use kubeedge_api::names::{self, operation::VOLUME_OPERATIONS};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request read (KubeEdge reads one buffer of 10,480 bytes and cuts what is longer).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Why a request is refused. Each is answered with an `error` message.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Nothing arrived before the client closed its side.
    #[error("failed with error: context is empty")]
    Empty,
    /// More than [`MAX_REQUEST_BYTES`] without a complete message.
    #[error("the request is larger than {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    /// Not a message in KubeEdge's JSON.
    #[error("the request is not a message: {0}")]
    Malformed(String),
    /// A message of another kind than a volume operation for one node's volume.
    #[error(
        "only createvolume, deletevolume, controllerpublishvolume and controllerunpublishvolume \
         on node/<node>/<namespace>/volume/<id> are served, not {operation:?} on {resource:?}"
    )]
    NotAVolumeRequest {
        /// The operation asked.
        operation: String,
        /// The resource named.
        resource: String,
    },
    /// Reading failed.
    #[error("reading the request: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one request: until a complete JSON value has arrived (a client that keeps its side
/// open for the answer is served) or the client closes its side, at most
/// [`MAX_REQUEST_BYTES`].
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Vec<u8>, RequestError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return if buf.iter().all(u8::is_ascii_whitespace) {
                Err(RequestError::Empty)
            } else {
                Ok(buf)
            };
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = complete_value(&buf) {
            buf.truncate(end);
            return Ok(buf);
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Err(RequestError::TooLarge);
        }
    }
}

/// The end of the first JSON value in `buf` when it is complete, or when `buf` cannot be JSON
/// anyway (the parse error is then reported); `None` while more may come.
fn complete_value(buf: &[u8]) -> Option<usize> {
    let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<serde::de::IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => Some(values.byte_offset()),
        Some(Err(e)) if e.is_eof() => None,
        Some(Err(_)) => Some(buf.len()),
        None => None,
    }
}

/// A refused request: why, and the message when it decoded (the error answer names it).
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub error: RequestError,
    /// The request, when it was a message.
    pub request: Option<Box<Message>>,
}

impl From<RequestError> for Refused {
    fn from(error: RequestError) -> Self {
        Refused {
            error,
            request: None,
        }
    }
}

/// Decodes the request and checks it is a volume operation on
/// `node/<node>/<namespace>/volume/<id>` (KubeEdge sends anything on; here nothing but what
/// the CSI driver sends reaches an edge).
pub fn parse(bytes: &[u8]) -> Result<Message, Refused> {
    let msg = Message::from_json(bytes).map_err(|e| RequestError::Malformed(e.to_string()))?;
    let op = msg.route.operation.as_str();
    let is_volume = VOLUME_OPERATIONS.contains(&op) && volume_resource(&msg.route.resource);
    if !is_volume {
        let error = RequestError::NotAVolumeRequest {
            operation: op.to_owned(),
            resource: msg.route.resource.to_string(),
        };
        return Err(Refused {
            error,
            request: Some(Box::new(msg)),
        });
    }
    Ok(msg)
}

/// `node/<node>/<namespace>/volume/<id>` with a DNS-1123 node and namespace and an id of word
/// characters, `-`, `.` and `+` (cloudhub's volume pattern).
fn volume_resource(resource: &str) -> bool {
    let parts: Vec<&str> = resource.split('/').collect();
    let word = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'))
    };
    matches!(parts.as_slice(), ["node", node, ns, "volume", id]
        if kubeedge_api::validation::is_dns1123_subdomain(node)
            && kubeedge_api::validation::is_dns1123_label(ns)
            && word(id))
}

/// KubeEdge's error answer: new id, parent = the request's id, source `cloudhub`, group and
/// resource of the request, operation `error`, the text as content.
pub fn error_answer(request: Option<&Message>, text: &str) -> Message {
    let empty = Message::default();
    let request = request.unwrap_or(&empty);
    let mut answer = request.error_response(text);
    answer.route.source = names::CLOUDHUB.into();
    answer.route.group = request.route.group.clone();
    answer
}

/// The edge's answer as the client gets it: unchanged, unless its content is `null` (edged
/// failed, or has no CSI driver: KubeEdge passes the `null` on and the driver fails to decode
/// it), which becomes an error answer.
pub fn edge_answer(request: &Message, answer: Message) -> Message {
    if answer.content.is_null() {
        return error_answer(
            Some(request),
            "the edge answered without a result: its edged failed the operation or has no CSI driver",
        );
    }
    answer
}

/// JSON of `msg`, as written on the socket.
pub fn encode(msg: &Message) -> Vec<u8> {
    msg.to_json()
}

/// Content as the CSI driver sends it: the CSI request in protobuf JSON, as a JSON string.
pub fn csi_content(request: &serde_json::Value) -> Content {
    Content::string(request.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(op: &str, resource: &str) -> Message {
        Message::new()
            .with_route("cloudhub", "resource", resource, op)
            .with_content(csi_content(&serde_json::json!({"name": "pvc-1"})))
    }

    #[tokio::test]
    async fn a_request_is_read_whole_when_complete_or_at_eof_and_never_beyond_the_limit() {
        let msg = volume("createvolume", "node/e1/default/volume/v1");
        let bytes = encode(&msg);
        // The client keeps its side open after the message: read as soon as it is complete.
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn({
            let bytes = bytes.clone();
            async move {
                use tokio::io::AsyncWriteExt;
                client.write_all(&bytes).await.unwrap();
                client
            }
        });
        assert_eq!(read(&mut server).await.unwrap(), bytes);
        drop(writer.await.unwrap());
        // 20 KiB (over KubeEdge's one buffer) arrive whole.
        let big = volume("createvolume", "node/e1/default/volume/v1").with_content(csi_content(
            &serde_json::json!({"name": "x".repeat(20 * 1024)}),
        ));
        let bytes = encode(&big);
        let mut r = &bytes[..];
        assert_eq!(read(&mut r).await.unwrap().len(), bytes.len());
        // Garbage is returned at once for its parse error, emptiness refused, size bounded.
        let mut r = &b"garbage"[..];
        assert_eq!(read(&mut r).await.unwrap(), b"garbage");
        let mut r = &b"  \n"[..];
        assert!(matches!(read(&mut r).await, Err(RequestError::Empty)));
        let endless = format!("{{\"a\":\"{}", "x".repeat(MAX_REQUEST_BYTES + 10));
        let mut r = endless.as_bytes();
        assert!(matches!(read(&mut r).await, Err(RequestError::TooLarge)));
    }

    #[test]
    fn only_volume_operations_on_a_nodes_volume_pass() {
        assert!(
            parse(&encode(&volume(
                "createvolume",
                "node/e1/default/volume/v-1.x"
            )))
            .is_ok()
        );
        for (op, resource) in [
            ("insert", "node/e1/default/pod/p"),
            ("createvolume", "node/e1/default/pod/p"),
            ("createvolume", "default/volume/v"),
            ("createvolume", "node/E_1/default/volume/v"),
            ("createvolume", "node/e1/default/volume/v/extra"),
            ("deletevolume", "node/e1/default/volume/-v"),
        ] {
            let refused = parse(&encode(&volume(op, resource))).unwrap_err();
            assert!(
                matches!(refused.error, RequestError::NotAVolumeRequest { .. }),
                "{op} {resource}"
            );
            assert!(refused.request.is_some());
        }
        let refused = parse(b"{\"header\": 7}").unwrap_err();
        assert!(matches!(refused.error, RequestError::Malformed(_)));
        assert!(refused.request.is_none());
    }

    #[test]
    fn answers_are_kubeedges_shapes() {
        let req = volume("createvolume", "node/e1/default/volume/v1");
        let err = error_answer(Some(&req), "timeout");
        assert_eq!(err.header.parent_id, req.header.id);
        assert_eq!(
            (
                err.route.source.as_str(),
                err.route.group.as_str(),
                err.route.resource.as_str(),
                err.route.operation.as_str()
            ),
            ("cloudhub", "resource", "node/e1/default/volume/v1", "error")
        );
        assert_eq!(err.content.as_string().as_deref(), Some("timeout"));
        let null = Message::with_parent(req.header.id.clone());
        assert_eq!(edge_answer(&req, null).route.operation, "error");
        let object = Message::with_parent(req.header.id.clone()).with_content(
            Content::json(&serde_json::json!({"volume": {"volume_id": "v1"}})).unwrap(),
        );
        assert_eq!(
            edge_answer(&req, object.clone()),
            object,
            "an object passes unchanged"
        );
    }
}
