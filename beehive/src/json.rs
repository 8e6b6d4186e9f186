//! JSON the way Go's `encoding/json` writes it.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, Serializer};

/// Deepest nesting of arrays and objects Go's `encoding/json` accepts (`maxNestingDepth`),
/// counting the message object itself as 1. A deeper message is refused by Go peers, so
/// [`crate::Message`] decoding refuses it too.
pub const MAX_JSON_DEPTH: usize = 10_000;

/// A message that could not be decoded from JSON.
///
/// Type errors name the field as Go does (`cannot unmarshal string into Go struct field
/// MessageHeader.header.timestamp of type int64`); errors from [`crate::Message::from_json`]
/// also carry the JSON path where decoding stopped ([`DecodeError::path`]).
#[derive(Debug)]
pub struct DecodeError {
    error: serde_json::Error,
    path: Option<String>,
}

impl DecodeError {
    /// A decoding failure at `path` (a JSON path such as `header.timestamp`, if known).
    pub(crate) fn at(error: serde_json::Error, path: Option<String>) -> Self {
        DecodeError { error, path }
    }

    /// The JSON path where decoding stopped (`header.timestamp`), when known.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The underlying JSON error.
    pub fn json_error(&self) -> &serde_json::Error {
        &self.error
    }
}

impl From<serde_json::Error> for DecodeError {
    fn from(error: serde_json::Error) -> Self {
        DecodeError { error, path: None }
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(f, "invalid message json at {path}: {}", self.error),
            None => write!(f, "invalid message json: {}", self.error),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Compact JSON with Go's HTML-safe string escaping: `<` `>` `&` become `\u003c` `\u003e`
/// `\u0026`, and U+2028/U+2029 are escaped. Raw values are written unchanged.
#[derive(Debug, Default, Clone, Copy)]
pub struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, ch) in fragment.char_indices() {
            let escaped: &[u8] = match ch {
                '<' => b"\\u003c",
                '>' => b"\\u003e",
                '&' => b"\\u0026",
                '\u{2028}' => b"\\u2028",
                '\u{2029}' => b"\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escaped)?;
            start = i + ch.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn write_raw_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        CompactFormatter.write_raw_fragment(writer, fragment)
    }
}

/// Serializes `value` as Go would.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(256);
    let mut ser = Serializer::with_formatter(&mut out, GoFormatter);
    value.serialize(&mut ser)?;
    Ok(out)
}

/// Serializes `value` as Go would, into a `String`.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let bytes = to_vec(value)?;
    // The serializer only ever writes UTF-8.
    Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
}
