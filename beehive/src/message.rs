//! The KubeEdge message: header, route, content, and their Go-compatible JSON form.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::constants::operation;
use crate::json::{self, DecodeError};

/// One unit of work on the bus and on the wire: KubeEdge's `model.Message`.
///
/// The JSON form (`header`, `route`, `content`) is byte-compatible with Go's `encoding/json`
/// output for the same message: [`Message::to_json`] writes keys in Go's order, omits empty
/// fields exactly as Go does and escapes `<`, `>`, `&` like Go. Content is kept as raw JSON, so
/// a message decoded from Go re-encodes byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Identity, correlation and bookkeeping.
    pub header: Header,
    /// Where the message comes from and what it is about (Go field `Router`, JSON key `route`).
    pub route: Route,
    /// The payload, as raw JSON (`null` when absent).
    pub content: Content,
}

/// Message header (`model.MessageHeader`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `msg_id`: UUID v4 of this message.
    pub id: String,
    /// `parent_msg_id`: for a response, the `msg_id` it answers; empty otherwise.
    pub parent_id: String,
    /// `timestamp`: creation time in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// `resourceversion`: Kubernetes resourceVersion of the content, if any.
    pub resource_version: String,
    /// `sync`: set on the delivered copy of a synchronous request.
    pub sync: bool,
    /// `type`: Go's context type; carried, never used for routing here.
    pub message_type: String,
}

/// Message route (`model.MessageRoute`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Producing module.
    pub source: String,
    /// Destination module; unused by the channel bus, carried when set.
    pub destination: String,
    /// Consumer group (`resource`, `twin`, `meta`, …).
    pub group: String,
    /// Verb (see [`crate::constants::operation`]).
    pub operation: String,
    /// Slash-separated resource path.
    pub resource: String,
}

static NULL: LazyLock<Arc<RawValue>> = LazyLock::new(|| {
    Arc::from(RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!()))
});

/// Message content as raw JSON text, shared cheaply between clones.
///
/// Cloning never copies the payload, and content is immutable, so group members that receive
/// the same message cannot race on it.
#[derive(Clone)]
pub struct Content(Arc<RawValue>);

impl Content {
    /// JSON `null`: no content.
    pub fn null() -> Self {
        Content(NULL.clone())
    }

    /// A JSON string, e.g. `"OK"`.
    pub fn string(text: impl AsRef<str>) -> Self {
        let encoded = json::to_string(text.as_ref()).unwrap_or_else(|_| unreachable!());
        Content::from_json_text(encoded).unwrap_or_else(|_| unreachable!())
    }

    /// Serializes `value` as JSON (Go escaping rules).
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        Content::from_json_text(json::to_string(value)?)
    }

    /// Takes already-encoded JSON text; fails if it is not one valid JSON value.
    pub fn from_json_text(text: String) -> Result<Self, serde_json::Error> {
        Ok(Content(Arc::from(RawValue::from_string(text)?)))
    }

    /// Wraps a raw JSON value.
    pub fn from_raw(raw: Box<RawValue>) -> Self {
        Content(Arc::from(raw))
    }

    /// The JSON text exactly as it will be written.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// True when the content is JSON `null`.
    pub fn is_null(&self) -> bool {
        self.0.get() == "null"
    }

    /// The decoded string when the content is a JSON string.
    pub fn as_string(&self) -> Option<String> {
        let text = self.0.get();
        if text.starts_with('"') {
            serde_json::from_str(text).ok()
        } else {
            None
        }
    }

    /// Go's `GetContentData`: a JSON string gives its characters, anything else its JSON text
    /// (`null` for no content). Upstream handlers parse their input from these bytes.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self.as_string() {
            Some(s) => Cow::Owned(s.into_bytes()),
            None => Cow::Borrowed(self.0.get().as_bytes()),
        }
    }

    /// Parses the content as `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// Parses [`Content::bytes`] as `T`: accepts both an embedded object and a string that
    /// holds JSON text, as Go handlers do.
    pub fn parse_bytes<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.bytes())
    }
}

impl Default for Content {
    fn default() -> Self {
        Content::null()
    }
}

impl PartialEq for Content {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for Content {}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 200;
        let text = self.0.get();
        if text.len() <= MAX {
            write!(f, "Content({text})")
        } else {
            let cut = (0..=MAX)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            write!(f, "Content({}… {} bytes)", &text[..cut], text.len())
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Content(Arc::<RawValue>::deserialize(deserializer)?))
    }
}

/// A fresh lowercase UUID v4 (36 characters), as Go's `uuid.New().String()`.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Wall-clock milliseconds since the Unix epoch, as Go's `time.Now().UnixNano()/1e6`.
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Message {
    /// A new message: fresh id, no parent, timestamp now (Go `NewMessage("")`).
    pub fn new() -> Self {
        Message::with_parent("")
    }

    /// A new message answering `parent_id` (Go `NewMessage(parentID)`).
    pub fn with_parent(parent_id: impl Into<String>) -> Self {
        Message {
            header: Header {
                id: new_id(),
                parent_id: parent_id.into(),
                timestamp: now_millis(),
                ..Header::default()
            },
            ..Message::default()
        }
    }

    /// Sets source, group, resource and operation (Go `BuildRouter`); leaves destination alone.
    pub fn with_route(
        mut self,
        source: impl Into<String>,
        group: impl Into<String>,
        resource: impl Into<String>,
        operation: impl Into<String>,
    ) -> Self {
        self.route.source = source.into();
        self.route.group = group.into();
        self.route.resource = resource.into();
        self.route.operation = operation.into();
        self
    }

    /// Sets the resource version header.
    pub fn with_resource_version(mut self, rv: impl Into<String>) -> Self {
        self.header.resource_version = rv.into();
        self
    }

    /// Sets the destination.
    pub fn with_destination(mut self, destination: impl Into<String>) -> Self {
        self.route.destination = destination.into();
        self
    }

    /// Sets the content.
    pub fn with_content(mut self, content: Content) -> Self {
        self.content = content;
        self
    }

    /// Replaces the id with a fresh one (Go `UpdateID`).
    pub fn with_new_id(mut self) -> Self {
        self.header.id = new_id();
        self
    }

    /// A response to this message (Go `NewRespByMessage`): fresh id, parent = this id, same
    /// source, group, resource and type, operation `response`; destination, resource version
    /// and sync are not copied.
    pub fn response(&self, content: Content) -> Message {
        let mut resp = Message::with_parent(self.header.id.clone());
        resp.header.message_type = self.header.message_type.clone();
        resp.route.source = self.route.source.clone();
        resp.route.group = self.route.group.clone();
        resp.route.resource = self.route.resource.clone();
        resp.route.operation = operation::RESPONSE.to_owned();
        resp.content = content;
        resp
    }

    /// An error answer to this message (Go `NewErrorMessage`): parent = this id, this
    /// resource, operation `error`, the text as string content, empty source and group.
    pub fn error_response(&self, text: impl AsRef<str>) -> Message {
        let mut resp = Message::with_parent(self.header.id.clone());
        resp.route.resource = self.route.resource.clone();
        resp.route.operation = operation::RESPONSE_ERROR.to_owned();
        resp.content = Content::string(text);
        resp
    }

    /// A copy with a fresh id (Go `Clone`): keeps parent, timestamp, source, group, resource,
    /// operation and content; drops destination, resource version, sync and type.
    pub fn clone_with_new_id(&self) -> Message {
        Message {
            header: Header {
                id: new_id(),
                parent_id: self.header.parent_id.clone(),
                timestamp: self.header.timestamp,
                ..Header::default()
            },
            route: Route {
                source: self.route.source.clone(),
                group: self.route.group.clone(),
                operation: self.route.operation.clone(),
                resource: self.route.resource.clone(),
                destination: String::new(),
            },
            content: self.content.clone(),
        }
    }

    /// True for the zero message (Go `IsEmpty`).
    pub fn is_empty(&self) -> bool {
        *self == Message::default()
    }

    /// Encodes as Go's `json.Marshal` would (no trailing newline).
    pub fn to_json(&self) -> Vec<u8> {
        json::to_vec(self).unwrap_or_else(|_| unreachable!("a message always serializes"))
    }

    /// Decodes Go's JSON form. Keys match case-insensitively, unknown keys are ignored, the
    /// last of duplicate keys wins; `timestamp` must be an integer that fits `i64` and `sync`
    /// a boolean.
    pub fn from_json(bytes: &[u8]) -> Result<Message, DecodeError> {
        serde_json::from_slice(bytes).map_err(DecodeError::from)
    }
}

impl fmt::Display for Message {
    /// Go's `String()`: the log form, without content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MessageID: {} ParentID: {} Group: {} Source: {} Destination: {} Resource: {} Operation: {}",
            self.header.id,
            self.header.parent_id,
            self.route.group,
            self.route.source,
            self.route.destination,
            self.route.resource,
            self.route.operation
        )
    }
}

impl actix::Message for Message {
    type Result = ();
}

// ---- serde: Go field names and order, omissions as Go's `omitempty` ----

impl Serialize for Header {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("MessageHeader", 6)?;
        s.serialize_field("msg_id", &self.id)?;
        if !self.parent_id.is_empty() {
            s.serialize_field("parent_msg_id", &self.parent_id)?;
        }
        s.serialize_field("timestamp", &self.timestamp)?;
        if !self.resource_version.is_empty() {
            s.serialize_field("resourceversion", &self.resource_version)?;
        }
        if self.sync {
            s.serialize_field("sync", &true)?;
        }
        if !self.message_type.is_empty() {
            s.serialize_field("type", &self.message_type)?;
        }
        s.end()
    }
}

impl Serialize for Route {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("MessageRoute", 5)?;
        for (key, value) in [
            ("source", &self.source),
            ("destination", &self.destination),
            ("group", &self.group),
            ("operation", &self.operation),
            ("resource", &self.resource),
        ] {
            if !value.is_empty() {
                s.serialize_field(key, value)?;
            }
        }
        s.end()
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Message", 3)?;
        s.serialize_field("header", &self.header)?;
        s.serialize_field("route", &self.route)?;
        s.serialize_field("content", &self.content)?;
        s.end()
    }
}

/// Matches a JSON key against Go's field tag the way `encoding/json` does (ASCII
/// case-insensitively).
fn key_is(key: &Key<'_>, tag: &str) -> bool {
    key.0.eq_ignore_ascii_case(tag)
}

/// An object key, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message header object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Header, E> {
        Ok(Header::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut h = Header::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            // Go: a JSON null leaves the field untouched.
            if key_is(&key, "msg_id") {
                h.id = map.next_value::<Option<String>>()?.unwrap_or(h.id);
            } else if key_is(&key, "parent_msg_id") {
                h.parent_id = map.next_value::<Option<String>>()?.unwrap_or(h.parent_id);
            } else if key_is(&key, "timestamp") {
                h.timestamp = map.next_value::<Option<i64>>()?.unwrap_or(h.timestamp);
            } else if key_is(&key, "resourceversion") {
                h.resource_version = map
                    .next_value::<Option<String>>()?
                    .unwrap_or(h.resource_version);
            } else if key_is(&key, "sync") {
                h.sync = map.next_value::<Option<bool>>()?.unwrap_or(h.sync);
            } else if key_is(&key, "type") {
                h.message_type = map
                    .next_value::<Option<String>>()?
                    .unwrap_or(h.message_type);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(h)
    }
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(HeaderVisitor)
    }
}

struct RouteVisitor;

impl<'de> Visitor<'de> for RouteVisitor {
    type Value = Route;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message route object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Route, E> {
        Ok(Route::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Route, A::Error> {
        let mut r = Route::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let field = if key_is(&key, "source") {
                &mut r.source
            } else if key_is(&key, "destination") {
                &mut r.destination
            } else if key_is(&key, "group") {
                &mut r.group
            } else if key_is(&key, "operation") {
                &mut r.operation
            } else if key_is(&key, "resource") {
                &mut r.resource
            } else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if let Some(value) = map.next_value::<Option<String>>()? {
                *field = value;
            }
        }
        Ok(r)
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RouteVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut m = Message::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key_is(&key, "header") {
                m.header = map.next_value()?;
            } else if key_is(&key, "route") {
                m.route = map.next_value()?;
            } else if key_is(&key, "content") {
                m.content = map.next_value()?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(m)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}
