//! The KubeEdge message: header, route, content, and their Go-compatible JSON form.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::constants::operation;
use crate::json::{self, DecodeError, MAX_JSON_DEPTH};
use crate::message_text::{Id, Str};
use crate::sender::Sender;

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
///
/// Equality compares the wire fields only: the [`Sender`] the bus writes is not one of them.
#[derive(Clone, Debug, Default)]
pub struct Header {
    /// `msg_id`: UUID v4 of this message.
    pub id: Id,
    /// `parent_msg_id`: for a response, the `msg_id` it answers; empty otherwise.
    pub parent_id: Id,
    /// `timestamp`: creation time in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// `resourceversion`: Kubernetes resourceVersion of the content, if any.
    pub resource_version: Str,
    /// `sync`: set on the delivered copy of a synchronous request.
    pub sync: bool,
    /// `type`: Go's context type; carried, never used for routing here.
    pub message_type: Str,
    /// The endpoint that sent the message on the bus (see [`Message::sender`]); not on the
    /// wire. Written only by the bus.
    pub(crate) sender: Option<Sender>,
}

impl PartialEq for Header {
    fn eq(&self, other: &Self) -> bool {
        let Header {
            id,
            parent_id,
            timestamp,
            resource_version,
            sync,
            message_type,
            sender: _,
        } = self;
        *id == other.id
            && *parent_id == other.parent_id
            && *timestamp == other.timestamp
            && *resource_version == other.resource_version
            && *sync == other.sync
            && *message_type == other.message_type
    }
}

impl Eq for Header {}

/// Message route (`model.MessageRoute`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Producing module.
    pub source: Str,
    /// Destination module; unused by the channel bus, carried when set.
    pub destination: Str,
    /// Consumer group (`resource`, `twin`, `meta`, …).
    pub group: Str,
    /// Verb (see [`crate::constants::operation`]).
    pub operation: Str,
    /// Slash-separated resource path.
    pub resource: Str,
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

/// A fresh lowercase UUID v4 as text (36 characters), as Go's `uuid.New().String()`.
/// Messages hold theirs as an [`Id`] ([`Id::new_v4`]), which costs no allocation.
pub fn new_id() -> String {
    Id::new_v4().to_string()
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
    pub fn with_parent(parent_id: impl Into<Id>) -> Self {
        Message {
            header: Header {
                id: Id::new_v4(),
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
        source: impl Into<Str>,
        group: impl Into<Str>,
        resource: impl Into<Str>,
        operation: impl Into<Str>,
    ) -> Self {
        self.route.source = source.into();
        self.route.group = group.into();
        self.route.resource = resource.into();
        self.route.operation = operation.into();
        self
    }

    /// Sets the resource version header.
    pub fn with_resource_version(mut self, rv: impl Into<Str>) -> Self {
        self.header.resource_version = rv.into();
        self
    }

    /// Sets the destination.
    pub fn with_destination(mut self, destination: impl Into<Str>) -> Self {
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
        self.header.id = Id::new_v4();
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
        resp.route.operation = Str::from_static(operation::RESPONSE);
        resp.content = content;
        resp
    }

    /// An error answer to this message (Go `NewErrorMessage`): parent = this id, this
    /// resource, operation `error`, the text as string content, empty source and group.
    pub fn error_response(&self, text: impl AsRef<str>) -> Message {
        let mut resp = Message::with_parent(self.header.id.clone());
        resp.route.resource = self.route.resource.clone();
        resp.route.operation = Str::from_static(operation::RESPONSE_ERROR);
        resp.content = Content::string(text);
        resp
    }

    /// A copy with a fresh id (Go `Clone`): keeps parent, timestamp, source, group, resource,
    /// operation and content; drops destination, resource version, sync and type.
    pub fn clone_with_new_id(&self) -> Message {
        Message {
            header: Header {
                id: Id::new_v4(),
                parent_id: self.header.parent_id.clone(),
                timestamp: self.header.timestamp,
                ..Header::default()
            },
            route: Route {
                source: self.route.source.clone(),
                group: self.route.group.clone(),
                operation: self.route.operation.clone(),
                resource: self.route.resource.clone(),
                destination: Str::EMPTY,
            },
            content: self.content.clone(),
        }
    }

    /// The bus endpoint this message was last sent through: written by the bus on every send,
    /// never taken from the route, header or content (see [`Sender`] for the guarantee).
    /// `None` for a message that was built or decoded here and not sent on a bus.
    ///
    /// A handler that trusts a message because of who sent it decides on this, not on
    /// `route.source`, which the message's author chose.
    pub fn sender(&self) -> Option<Sender> {
        self.header.sender
    }

    /// True when the bus delivered this message from the endpoint named `name`.
    pub fn is_sent_by(&self, name: &str) -> bool {
        self.header.sender.is_some_and(|s| s == name)
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
    ///
    /// Refuses what Go's decoder refuses (see the `Deserialize` impl): wrong field types, with
    /// Go's text naming the field, nesting deeper than [`json::MAX_JSON_DEPTH`] and content
    /// numbers outside `float64`. The error names the JSON path where decoding stopped
    /// ([`DecodeError::path`]).
    pub fn from_json(bytes: &[u8]) -> Result<Message, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| DecodeError::at(e, failure_path(bytes)))
    }
}

/// The JSON path where decoding `bytes` as a [`Message`] fails, found by decoding again with path
/// tracking (only on failure, so successful decoding pays nothing for it).
fn failure_path(bytes: &[u8]) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, Message>(&mut de) {
        Err(e) => Some(e.path().to_string()).filter(|p| p != "."),
        Ok(_) => None,
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

#[cfg(feature = "bus")]
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

// ---- Go's limits and Go's error messages ----

/// A Go struct field, for error messages as `encoding/json` writes them: `Go struct field
/// MessageHeader.header.timestamp of type int64` (the innermost struct type, the JSON path,
/// the Go type).
#[derive(Clone, Copy)]
struct GoField {
    strct: &'static str,
    path: &'static str,
    ty: &'static str,
}

const MSG_HEADER: GoField = GoField {
    strct: "Message",
    path: "header",
    ty: "model.MessageHeader",
};
const MSG_ROUTE: GoField = GoField {
    strct: "Message",
    path: "route",
    ty: "model.MessageRoute",
};
const MSG_CONTENT: GoField = GoField {
    strct: "Message",
    path: "content",
    ty: "float64",
};

const fn header_field(path: &'static str, ty: &'static str) -> GoField {
    GoField {
        strct: "MessageHeader",
        path,
        ty,
    }
}

const fn route_field(path: &'static str) -> GoField {
    GoField {
        strct: "MessageRoute",
        path,
        ty: "string",
    }
}

/// Go's `UnmarshalTypeError` text (without Go's `json: ` prefix; serde_json adds the position).
fn type_error<E: de::Error>(field: GoField, value: impl fmt::Display) -> E {
    E::custom(format_args!(
        "cannot unmarshal {value} into Go struct field {}.{} of type {}",
        field.strct, field.path, field.ty
    ))
}

/// Visitor methods that refuse every JSON kind the target does not take, naming the field
/// (`self.go_field()`) as Go does. Lists which of `bool number string array object` to refuse.
macro_rules! refuse_kinds {
    ($($kind:ident)*) => { $( refuse_kinds!(@ $kind); )* };
    (@ bool) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(type_error(self.go_field(), "bool"))
        }
    };
    (@ number) => {
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(type_error(self.go_field(), "number"))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(type_error(self.go_field(), "number"))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(type_error(self.go_field(), "number"))
        }
    };
    (@ string) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(type_error(self.go_field(), "string"))
        }
    };
    (@ array) => {
        fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(type_error(self.go_field(), "array"))
        }
    };
    (@ object) => {
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(type_error(self.go_field(), "object"))
        }
    };
}

/// A string field; JSON `null` gives `None` (Go leaves the field untouched).
struct GoString(GoField);

impl GoString {
    fn go_field(&self) -> GoField {
        self.0
    }
}

impl<'de> de::DeserializeSeed<'de> for GoString {
    type Value = Option<Str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Str>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GoString {
    type Value = Option<Str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string for {}", self.0.path)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Str>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Str>, E> {
        Ok(Some(Str::from(v)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Option<Str>, E> {
        Ok(Some(Str::from(v)))
    }
    refuse_kinds!(bool number array object);
}

/// An `int64` field: integers only, within `i64`.
struct GoI64(GoField);

impl GoI64 {
    fn go_field(&self) -> GoField {
        self.0
    }
}

impl<'de> de::DeserializeSeed<'de> for GoI64 {
    type Value = Option<i64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GoI64 {
    type Value = Option<i64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer for {}", self.0.path)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<i64>, E> {
        Ok(Some(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<i64>, E> {
        i64::try_from(v)
            .map(Some)
            .map_err(|_| type_error(self.0, format_args!("number {v}")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<i64>, E> {
        Err(type_error(self.0, format_args!("number {v:?}")))
    }
    refuse_kinds!(bool string array object);
}

/// A `bool` field.
struct GoBool(GoField);

impl GoBool {
    fn go_field(&self) -> GoField {
        self.0
    }
}

impl<'de> de::DeserializeSeed<'de> for GoBool {
    type Value = Option<bool>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<bool>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GoBool {
    type Value = Option<bool>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a bool for {}", self.0.path)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<bool>, E> {
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<bool>, E> {
        Ok(Some(v))
    }
    refuse_kinds!(number string array object);
}

/// What Go's decoder refuses in text that is otherwise valid JSON.
#[derive(Debug, PartialEq, Eq)]
enum GoLimit<'a> {
    /// Nesting deeper than [`MAX_JSON_DEPTH`].
    Depth,
    /// A number outside `float64` range (only checked where Go decodes into `interface{}`).
    Number(&'a str),
}

/// Byte classes for [`check_go_limits_exact`]: 0 plain, 1 quote, 2 opener, 3 closer, 4 number start.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = 1;
    t[b'[' as usize] = 2;
    t[b'{' as usize] = 2;
    t[b']' as usize] = 3;
    t[b'}' as usize] = 3;
    t[b'-' as usize] = 4;
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] = 4;
        d += 1;
    }
    t
};

/// Checks valid JSON `text` that sits at nesting depth `depth` for what Go refuses: nesting
/// beyond [`MAX_JSON_DEPTH`], and (with `numbers`) numbers that overflow `float64`.
///
/// Cheap tests rule out almost every message without following strings: text too short to
/// nest that deep, or with fewer `[`/`{` bytes than the depth left, cannot nest too deep; a
/// number can only overflow with an exponent (a digit followed by `e`/`E`, found eight bytes
/// at a time and each looked at locally) or with 309 or more digits in a row. Only what these
/// cannot rule out gets the exact scan.
fn check_go_limits(text: &str, depth: usize, numbers: bool) -> Result<(), GoLimit<'_>> {
    let b = text.as_bytes();
    let room = MAX_JSON_DEPTH.saturating_sub(depth);
    // Every level needs an opener and a closer.
    let mut suspect = b.len() >= 2 * room && count_openers(b) > room;
    if numbers && !suspect {
        suspect = exponent_may_overflow(b) || has_long_digit_run(b);
    }
    if suspect {
        check_go_limits_exact(text, depth, numbers)
    } else {
        Ok(())
    }
}

const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;

/// 0x80 in every byte of `v` that is zero (exact, no false positives).
fn zero_bytes(v: u64) -> u64 {
    !(((v & LO7).wrapping_add(LO7)) | v | LO7)
}

/// 0x80 in every byte of `w` that is an ASCII digit.
fn digit_bytes(w: u64) -> u64 {
    let high_is_3 = zero_bytes((w & (0xf0 * ONES)) ^ (0x30 * ONES));
    let low_below_10 = !((w & (0x0f * ONES)).wrapping_add(0x06 * ONES)) & (0x10 * ONES);
    high_is_3 & (low_below_10 << 3)
}

/// 0x80 in every byte of `w` that is `e` or `E`.
fn e_bytes(w: u64) -> u64 {
    zero_bytes((w | (0x20 * ONES)) ^ (u64::from(b'e') * ONES))
}

/// `[` and `{` bytes (strings included), eight at a time.
fn count_openers(b: &[u8]) -> usize {
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    let mut n = 0;
    for w in words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        // `[` is 0x5b and `{` 0x7b: the same byte once 0x20 is set.
        n += zero_bytes((w | (0x20 * ONES)) ^ (0x7b * ONES)).count_ones() as usize;
    }
    n + tail.iter().filter(|&&c| c == b'[' || c == b'{').count()
}

/// True if some `e`/`E` after a digit belongs to a token, delimited as JSON numbers are, that
/// does not parse as a finite `f64` (a string can hold such a token too: the exact scan
/// decides).
fn exponent_may_overflow(b: &[u8]) -> bool {
    // Whether the last byte of the previous word was a digit, as 0x80 in byte 0.
    let mut carry = 0u64;
    let mut base = 0;
    let mut words = b.chunks_exact(8);
    for w in words.by_ref() {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        let e = e_bytes(w);
        if e != 0 {
            // A digit at byte j followed by an `e` at byte j + 1 (also across words).
            let mut pairs = e & ((digit_bytes(w) << 8) | carry);
            while pairs != 0 {
                let at = base + (pairs.trailing_zeros() / 8) as usize;
                if !exponent_token_is_finite(b, at) {
                    return true;
                }
                pairs &= pairs - 1;
            }
        }
        carry = u64::from((w >> 56) as u8 & 0xf0 == 0x30 && ((w >> 56) as u8 & 0x0f) < 10) << 7;
        base += 8;
    }
    (base.max(1)..b.len()).any(|e| {
        (b[e] | 0x20) == b'e' && b[e - 1].is_ascii_digit() && !exponent_token_is_finite(b, e)
    })
}

fn is_number_byte(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// Whether the token around the exponent at `e` is finite, or is not a number at all (not
/// delimited the way a JSON number is, so inside a string).
fn exponent_token_is_finite(b: &[u8], e: usize) -> bool {
    let start = b[..e]
        .iter()
        .rposition(|&c| !is_number_byte(c))
        .map_or(0, |p| p + 1);
    let end = b[e..]
        .iter()
        .position(|&c| !is_number_byte(c))
        .map_or(b.len(), |p| e + p);
    let before_ok = start == 0
        || matches!(
            b[start - 1],
            b':' | b',' | b'[' | b' ' | b'\t' | b'\n' | b'\r'
        );
    let after_ok =
        end == b.len() || matches!(b[end], b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r');
    if !(before_ok && after_ok) {
        return true;
    }
    std::str::from_utf8(&b[start..end])
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}

/// True if 301 or more digits follow each other: such a run covers two consecutive samples
/// taken every 150 bytes, and the bytes between them.
fn has_long_digit_run(b: &[u8]) -> bool {
    let mut k = 0;
    while k + 150 < b.len() {
        if b[k].is_ascii_digit()
            && b[k + 150].is_ascii_digit()
            && b[k..k + 150].iter().all(u8::is_ascii_digit)
        {
            return true;
        }
        k += 150;
    }
    false
}

/// The exact check: one pass following strings (skipped with `memchr`); a number is parsed
/// only when it has an exponent or more than 300 characters (nothing shorter can overflow).
fn check_go_limits_exact(text: &str, mut depth: usize, numbers: bool) -> Result<(), GoLimit<'_>> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match CLASS[b[i] as usize] {
            0 => i += 1,
            1 => {
                // Skip the string: find its closing quote, stepping over escapes. Short
                // strings (most keys) byte by byte, long ones with memchr.
                i += 1;
                let short_end = (i + 16).min(b.len());
                while i < short_end && b[i] != b'"' && b[i] != b'\\' {
                    i += 1;
                }
                loop {
                    match b.get(i) {
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => i += 2,
                        Some(_) => match memchr::memchr2(b'"', b'\\', &b[i..]) {
                            Some(k) => i += k,
                            None => return Ok(()),
                        },
                        None => return Ok(()),
                    }
                }
            }
            2 => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(GoLimit::Depth);
                }
                i += 1;
            }
            3 => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ if numbers => {
                let start = i;
                let mut exponent = false;
                while i < b.len() {
                    match b[i] {
                        b'0'..=b'9' | b'-' | b'+' | b'.' => {}
                        b'e' | b'E' => exponent = true,
                        _ => break,
                    }
                    i += 1;
                }
                if exponent || i - start > 300 {
                    let number = &text[start..i];
                    if !number.parse::<f64>().is_ok_and(f64::is_finite) {
                        return Err(GoLimit::Number(number));
                    }
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

fn limit_error<E: de::Error>(limit: GoLimit<'_>, path: &str) -> E {
    match limit {
        GoLimit::Depth => E::custom(format_args!(
            "nesting in {path} exceeds Go's maximum depth of {MAX_JSON_DEPTH}"
        )),
        GoLimit::Number(n) => type_error(MSG_CONTENT, format_args!("number {n}")),
    }
}

/// Skips the value of a key Go does not know, refusing it if it nests deeper than Go allows
/// (`depth`: the depth of the object holding the key).
fn skip_unknown<'de, A: MapAccess<'de>>(
    map: &mut A,
    key: &Key<'_>,
    depth: usize,
) -> Result<(), A::Error> {
    map.next_value_seed(Checked {
        depth,
        numbers: false,
        path: &key.0,
    })
    .map(drop)
}

/// A value kept as raw JSON and checked against Go's limits while it is decoded (so a
/// path-tracking deserializer sees the error at the value's path).
struct Checked<'p> {
    /// Depth of the object that holds the value.
    depth: usize,
    /// Also refuse numbers outside `float64` (Go decodes the value into `interface{}`).
    numbers: bool,
    /// Where the value is, for the error text.
    path: &'p str,
}

impl<'de> de::DeserializeSeed<'de> for Checked<'_> {
    type Value = Content;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Content, D::Error> {
        let content = Content::deserialize(d)?;
        check_go_limits(content.as_json(), self.depth, self.numbers)
            .map_err(|limit| limit_error(limit, self.path))?;
        Ok(content)
    }
}

struct HeaderVisitor;

impl HeaderVisitor {
    fn go_field(&self) -> GoField {
        MSG_HEADER
    }
}

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message header object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Header, E> {
        Ok(Header::default())
    }

    refuse_kinds!(bool number string array);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut h = Header::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            // Go: a JSON null leaves the field untouched.
            if key_is(&key, "msg_id") {
                let f = header_field("header.msg_id", "string");
                if let Some(id) = map.next_value_seed(GoString(f))? {
                    h.id = Id::from(id);
                }
            } else if key_is(&key, "parent_msg_id") {
                let f = header_field("header.parent_msg_id", "string");
                if let Some(id) = map.next_value_seed(GoString(f))? {
                    h.parent_id = Id::from(id);
                }
            } else if key_is(&key, "timestamp") {
                let f = header_field("header.timestamp", "int64");
                h.timestamp = map.next_value_seed(GoI64(f))?.unwrap_or(h.timestamp);
            } else if key_is(&key, "resourceversion") {
                let f = header_field("header.resourceversion", "string");
                h.resource_version = map
                    .next_value_seed(GoString(f))?
                    .unwrap_or(h.resource_version);
            } else if key_is(&key, "sync") {
                let f = header_field("header.sync", "bool");
                h.sync = map.next_value_seed(GoBool(f))?.unwrap_or(h.sync);
            } else if key_is(&key, "type") {
                let f = header_field("header.type", "string");
                h.message_type = map.next_value_seed(GoString(f))?.unwrap_or(h.message_type);
            } else {
                skip_unknown(&mut map, &key, 2)?;
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

impl RouteVisitor {
    fn go_field(&self) -> GoField {
        MSG_ROUTE
    }
}

impl<'de> Visitor<'de> for RouteVisitor {
    type Value = Route;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message route object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Route, E> {
        Ok(Route::default())
    }

    refuse_kinds!(bool number string array);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Route, A::Error> {
        let mut r = Route::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let (field, go) = if key_is(&key, "source") {
                (&mut r.source, route_field("route.source"))
            } else if key_is(&key, "destination") {
                (&mut r.destination, route_field("route.destination"))
            } else if key_is(&key, "group") {
                (&mut r.group, route_field("route.group"))
            } else if key_is(&key, "operation") {
                (&mut r.operation, route_field("route.operation"))
            } else if key_is(&key, "resource") {
                (&mut r.resource, route_field("route.resource"))
            } else {
                skip_unknown(&mut map, &key, 2)?;
                continue;
            };
            if let Some(value) = map.next_value_seed(GoString(go))? {
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

/// Go's text for a top-level value of the wrong kind.
fn not_a_message<E: de::Error>(kind: &str) -> E {
    E::custom(format_args!(
        "cannot unmarshal {kind} into Go value of type model.Message"
    ))
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Message, E> {
        Err(not_a_message("bool"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Message, E> {
        Err(not_a_message("number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Message, E> {
        Err(not_a_message("number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Message, E> {
        Err(not_a_message("number"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Message, E> {
        Err(not_a_message("string"))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Message, A::Error> {
        Err(not_a_message("array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut m = Message::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key_is(&key, "header") {
                m.header = map.next_value()?;
            } else if key_is(&key, "route") {
                m.route = map.next_value()?;
            } else if key_is(&key, "content") {
                // Go decodes content into `interface{}`: numbers become float64, and the
                // whole document is held to Go's depth limit.
                m.content = map.next_value_seed(Checked {
                    depth: 1,
                    numbers: true,
                    path: "content",
                })?;
            } else {
                skip_unknown(&mut map, &key, 1)?;
            }
        }
        Ok(m)
    }
}

/// Decoding refuses what Go's `encoding/json` refuses when it decodes a `model.Message`, so
/// nothing is accepted here that a Go peer would then choke on:
/// * a field of the wrong type, with Go's text naming the field (`cannot unmarshal string into
///   Go struct field MessageHeader.header.timestamp of type int64`);
/// * nesting deeper than [`MAX_JSON_DEPTH`] anywhere in the message (content and unknown keys
///   included);
/// * a number in the content outside `float64` range (`1e400`).
impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MessageVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::{GoLimit, check_go_limits, check_go_limits_exact};
    use crate::json::MAX_JSON_DEPTH;

    #[test]
    fn the_scan_skips_strings_and_finds_depth_and_overflowing_numbers() {
        assert_eq!(check_go_limits(r#"{"a":"[[[[\"]]"}"#, 1, true), Ok(()));
        assert_eq!(check_go_limits("[1e308,-1e-400,0.5]", 1, true), Ok(()));
        assert_eq!(
            check_go_limits("[1,-1E+400]", 1, true),
            Err(GoLimit::Number("-1E+400"))
        );
        assert_eq!(check_go_limits("[1e400]", 1, false), Ok(()));
        let long = format!("[1{}]", "0".repeat(309));
        assert!(matches!(
            check_go_limits(&long, 1, true),
            Err(GoLimit::Number(_))
        ));
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(check_go_limits(&deep(MAX_JSON_DEPTH - 1), 1, true), Ok(()));
        assert_eq!(
            check_go_limits(&deep(MAX_JSON_DEPTH), 1, true),
            Err(GoLimit::Depth)
        );
    }

    #[test]
    fn the_word_tests_match_byte_tests() {
        let text: Vec<u8> = (0u8..=255).chain(b"[{1e5 9E[{".iter().copied()).collect();
        assert_eq!(
            super::count_openers(&text),
            text.iter().filter(|&&c| c == b'[' || c == b'{').count()
        );
        for w in text.chunks_exact(8) {
            let word = u64::from_le_bytes(w.try_into().unwrap());
            for (j, &c) in w.iter().enumerate() {
                let bit = |m: u64| (m >> (8 * j + 7)) & 1 == 1;
                assert_eq!(bit(super::digit_bytes(word)), c.is_ascii_digit(), "{c}");
                assert_eq!(bit(super::e_bytes(word)), c == b'e' || c == b'E', "{c}");
            }
        }
        for n in [
            "1e400",
            "[2,1e400]",
            "[12345678,1e400]",
            "[1234567,1e400]",
            "[123456789012345,1E400]",
        ] {
            assert!(super::exponent_may_overflow(n.as_bytes()), "{n}");
            assert!(
                !super::exponent_may_overflow(n.replace("400", "40").as_bytes()),
                "{n}"
            );
        }
    }

    #[test]
    fn the_quick_tests_never_miss_what_the_exact_scan_finds() {
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        let long = format!("{{\"a\":1{}}}", "0".repeat(400));
        for text in [
            r#"{"uid":"4f3c2b1a-0e9d-4c8b","n":1e400}"#,
            r#"{"s":"x,1e400,y","n":1}"#,
            r#"["1e400 in a string",2E+5,-3.5e-7]"#,
            r#"[1,2,3e308]"#,
            "1e400",
            "-1E400",
            "[0.5e400]",
            "[ 1e999 ]",
            long.as_str(),
            deep.as_str(),
        ] {
            assert_eq!(
                check_go_limits(text, 1, true),
                check_go_limits_exact(text, 1, true),
                "{}",
                &text[..text.len().min(60)]
            );
        }
    }
}
