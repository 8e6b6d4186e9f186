//! The strings a [`crate::Message`] carries: [`Str`] for route and header text, [`Id`] for
//! message ids.
//!
//! Both are built for the bus's hot path, where a message is moved into a mailbox, handed to a
//! module and dropped: strings of up to 23 bytes (module names, groups, operations, short
//! resources) live inside the value and longer ones behind a shared reference count, so
//! cloning never copies text and dropping a short string frees nothing; a UUID id is its 16
//! bytes, rendered to its 36 characters only when written.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smol_str::SmolStr;

/// Immutable text of a message's route or header (Go `string`).
///
/// Up to 23 bytes are stored inline (no allocation, nothing to free); longer text is one
/// shared allocation, so [`Clone`] never copies it. Derefs to `str` and compares equal to
/// `str`, `&str` and `String` holding the same text.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Str(SmolStr);

impl Str {
    /// The empty string.
    pub const EMPTY: Str = Str::from_static("");

    /// Text that lives for the whole program: never copied, never freed.
    pub const fn from_static(text: &'static str) -> Self {
        Str(SmolStr::new_static(text))
    }

    /// A copy of `text` (inline when it is 23 bytes or less).
    pub fn new(text: impl AsRef<str>) -> Self {
        Str(SmolStr::new(text))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Deref for Str {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl AsRef<str> for Str {
    fn as_ref(&self) -> &str {
        self.0.as_str()
    }
}

impl Borrow<str> for Str {
    fn borrow(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.0.as_str(), f)
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl From<&str> for Str {
    fn from(text: &str) -> Self {
        Str(SmolStr::new(text))
    }
}

impl From<&String> for Str {
    fn from(text: &String) -> Self {
        Str(SmolStr::new(text))
    }
}

impl From<String> for Str {
    fn from(text: String) -> Self {
        Str(SmolStr::from(text))
    }
}

impl From<&Str> for Str {
    fn from(text: &Str) -> Self {
        text.clone()
    }
}

impl From<Box<str>> for Str {
    fn from(text: Box<str>) -> Self {
        Str(SmolStr::from(text))
    }
}

impl From<Arc<str>> for Str {
    fn from(text: Arc<str>) -> Self {
        Str(SmolStr::from(text))
    }
}

impl From<Cow<'_, str>> for Str {
    fn from(text: Cow<'_, str>) -> Self {
        match text {
            Cow::Borrowed(s) => Str::from(s),
            Cow::Owned(s) => Str::from(s),
        }
    }
}

impl From<Str> for String {
    fn from(text: Str) -> Self {
        text.0.into()
    }
}

impl From<&Str> for String {
    fn from(text: &Str) -> Self {
        text.as_str().to_owned()
    }
}

/// Equality with other string types, both ways round.
macro_rules! eq_str {
    ($ty:ty, $($other:ty),*) => {$(
        impl PartialEq<$other> for $ty {
            fn eq(&self, other: &$other) -> bool {
                self[..] == other[..]
            }
        }
        impl PartialEq<$ty> for $other {
            fn eq(&self, other: &$ty) -> bool {
                self[..] == other[..]
            }
        }
    )*};
}

eq_str!(Str, str, &str, String);

impl Serialize for Str {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl Visitor<'_> for StrVisitor {
            type Value = Str;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str, E> {
                Ok(Str::from(v))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str, E> {
                Ok(Str::from(v))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// A message id (`msg_id`, `parent_msg_id`; Go `string`).
///
/// A lowercase hyphenated UUID, the form every id the bus makes has, is kept as its 16 bytes;
/// any other text (an uppercase UUID, a peer's own scheme, empty) is kept as it came. Either
/// way the id displays and serializes as exactly the text it was made from, and two ids are
/// equal exactly when their texts are. It does not deref to `str` (a UUID has no text until it
/// is rendered): [`Id::as_str`] renders it on the stack, [`fmt::Display`] writes it.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Id(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// A UUID whose text is its lowercase hyphenated form.
    Uuid([u8; 16]),
    /// Any other text (never a lowercase hyphenated UUID, so equality stays textual).
    Text(Str),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Text(Str::EMPTY)
    }
}

impl Id {
    /// The empty id (no parent).
    pub const EMPTY: Id = Id(Repr::Text(Str::EMPTY));

    /// A fresh random UUID v4, as Go's `uuid.New().String()`.
    ///
    /// The random bits come from a per-thread cryptographic generator seeded by the operating
    /// system (uuid's `fast-rng`), not one `getrandom` call per id: every sync answer needs a
    /// fresh id, and the call was a tenth of a round trip.
    pub fn new_v4() -> Self {
        Id(Repr::Uuid(*uuid::Uuid::new_v4().as_bytes()))
    }

    /// The id whose text is `text`.
    pub fn new(text: &str) -> Self {
        match Self::lower_uuid(text) {
            Some(uuid) => Id(Repr::Uuid(uuid)),
            None => Id(Repr::Text(Str::from(text))),
        }
    }

    /// The bytes of `text` if it is a UUID written as lowercase hyphenated hex.
    fn lower_uuid(text: &str) -> Option<[u8; 16]> {
        if text.len() != 36 || text.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        // 36 characters, no uppercase: only the hyphenated form parses.
        uuid::Uuid::try_parse(text).ok().map(|u| *u.as_bytes())
    }

    /// True for the empty id.
    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Text(t) if t.is_empty())
    }

    /// The id as a UUID, when its text is a lowercase hyphenated one.
    pub fn uuid(&self) -> Option<uuid::Uuid> {
        match &self.0 {
            Repr::Uuid(b) => Some(uuid::Uuid::from_bytes(*b)),
            Repr::Text(_) => None,
        }
    }

    /// The id's text (a UUID rendered into the returned value, no allocation).
    pub fn as_str(&self) -> IdText<'_> {
        match &self.0 {
            Repr::Uuid(b) => {
                let mut buf = [0u8; 36];
                uuid::Uuid::from_bytes(*b)
                    .hyphenated()
                    .encode_lower(&mut buf);
                IdText(TextRepr::Uuid(buf))
            }
            Repr::Text(t) => IdText(TextRepr::Text(t.as_str())),
        }
    }
}

/// The text of an [`Id`], from [`Id::as_str`]; derefs to `str`.
pub struct IdText<'a>(TextRepr<'a>);

enum TextRepr<'a> {
    Uuid([u8; 36]),
    Text(&'a str),
}

impl Deref for IdText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match &self.0 {
            // Written by `encode_lower`: ASCII hex digits and hyphens.
            TextRepr::Uuid(buf) => std::str::from_utf8(buf).unwrap_or_default(),
            TextRepr::Text(t) => t,
        }
    }
}

impl fmt::Debug for IdText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for IdText<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for IdText<'_> {}

eq_str!(IdText<'_>, str, &str, String);

impl AsRef<str> for IdText<'_> {
    fn as_ref(&self) -> &str {
        self
    }
}

impl fmt::Display for IdText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.as_str())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.as_str(), f)
    }
}

impl From<&str> for Id {
    fn from(text: &str) -> Self {
        Id::new(text)
    }
}

impl From<&String> for Id {
    fn from(text: &String) -> Self {
        Id::new(text)
    }
}

impl From<String> for Id {
    fn from(text: String) -> Self {
        match Id::lower_uuid(&text) {
            Some(uuid) => Id(Repr::Uuid(uuid)),
            None => Id(Repr::Text(Str::from(text))),
        }
    }
}

impl From<Str> for Id {
    fn from(text: Str) -> Self {
        match Id::lower_uuid(&text) {
            Some(uuid) => Id(Repr::Uuid(uuid)),
            None => Id(Repr::Text(text)),
        }
    }
}

impl From<&Id> for Id {
    fn from(id: &Id) -> Self {
        id.clone()
    }
}

impl From<uuid::Uuid> for Id {
    fn from(uuid: uuid::Uuid) -> Self {
        Id(Repr::Uuid(*uuid.as_bytes()))
    }
}

impl From<Id> for String {
    fn from(id: Id) -> Self {
        id.as_str().to_owned()
    }
}

impl From<&Id> for String {
    fn from(id: &Id) -> Self {
        id.as_str().to_owned()
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        match &self.0 {
            Repr::Text(t) => t.as_str() == other,
            Repr::Uuid(_) => *self.as_str() == *other,
        }
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for Id {
    fn eq(&self, other: &String) -> bool {
        *self == **other
    }
}

impl PartialEq<Id> for str {
    fn eq(&self, other: &Id) -> bool {
        *other == *self
    }
}

impl PartialEq<Id> for &str {
    fn eq(&self, other: &Id) -> bool {
        *other == **self
    }
}

impl PartialEq<Id> for String {
    fn eq(&self, other: &Id) -> bool {
        *other == **self
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Str::deserialize(deserializer).map(Id::from)
    }
}

#[cfg(test)]
mod tests {
    use super::{Id, Str};

    #[test]
    fn ids_keep_their_text_and_compare_by_it() {
        let lower = "5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b01";
        let id = Id::new(lower);
        assert!(id.uuid().is_some(), "a lowercase UUID is kept as 16 bytes");
        assert_eq!(id.to_string(), lower);
        assert_eq!(id, lower);
        assert_eq!(Id::from(lower.to_owned()), id);
        for other in [
            "5F0C8A52-9A3E-4C1E-B7A4-2C6F3D1E9B01",
            "5f0c8a529a3e4c1eb7a42c6f3d1e9b01",
            "{5f0c8a52-9a3e-4c1e-b7a4-2c6f3d1e9b0}",
            "",
            "a",
        ] {
            let id = Id::new(other);
            assert!(id.uuid().is_none(), "{other}");
            assert_eq!(id.to_string(), other);
            assert_ne!(id, Id::new(lower));
        }
        let fresh = Id::new_v4();
        assert_eq!(Id::new(&fresh.to_string()), fresh);
        assert!(Id::default().is_empty() && !fresh.is_empty());
    }

    #[test]
    fn short_text_is_inline_and_equal_to_strings() {
        let s = Str::from("resource");
        assert_eq!(s, "resource");
        assert_eq!("resource", s);
        assert_eq!(s, String::from("resource"));
        assert_eq!(&*s, "resource");
        let long = Str::from("x".repeat(100));
        assert_eq!(long.clone(), long);
        assert_eq!(long.len(), 100);
    }
}
