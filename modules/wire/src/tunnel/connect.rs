//! The JSON a `*_CONNECT` message carries, encoded byte-for-byte as Go's `encoding/json`
//! encodes KubeEdge's `Edged*Connection` structs, and decoded as leniently as Go decodes them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::gourl::GoUrl;

/// Errors decoding CONNECT JSON.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Not JSON at all, or not an object.
    #[error("connect JSON is malformed: {0}")]
    Json(#[from] serde_json::Error),
    /// Valid JSON with a field of the wrong shape.
    #[error("connect JSON field {field} is {problem}")]
    Field {
        /// The field (`MessID`, `url`, `header`, `method`).
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// Request headers as Go's `http.Header`: names (as given) to values, sorted by name.
pub type GoHeader = BTreeMap<String, Vec<String>>;

/// One CONNECT payload: the request the edge replays against its local kubelet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Must equal the frame's connect id: the edge answers with this id.
    pub mess_id: u64,
    /// The request URL (from the cloud: scheme `http`, host `127.0.0.1:10350`).
    pub url: GoUrl,
    /// The request headers, names in Go's canonical form when built by [`ConnectRequest::new`].
    pub header: GoHeader,
    /// `GET` or `POST` for exec/attach; `None` for logs and metrics (no `method` key).
    pub method: Option<String>,
}

impl ConnectRequest {
    /// A request from incoming header pairs: names are canonicalised and values grouped in
    /// order, as Go's server does; `Host` is left out (Go keeps it apart from the headers).
    pub fn new<'a>(
        mess_id: u64,
        url: GoUrl,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        method: Option<&str>,
    ) -> Self {
        let mut header = GoHeader::new();
        for (name, value) in headers {
            let name = canonical_header_key(name);
            if name == "Host" {
                continue;
            }
            header
                .entry(name)
                .or_default()
                .push(String::from_utf8_lossy(value).into_owned());
        }
        ConnectRequest {
            mess_id,
            url,
            header,
            method: method.map(str::to_owned),
        }
    }

    /// The JSON exactly as Go 1.26 encodes the struct: key order, `\u0026`-style escapes,
    /// `"User":null`, and a `header` object that is never `null`.
    pub fn to_go_json(&self) -> String {
        let u = &self.url;
        let mut out = String::with_capacity(320);
        let _ = write!(out, "{{\"MessID\":{},\"url\":{{\"Scheme\":", self.mess_id);
        go_string(&mut out, &u.scheme);
        out.push_str(",\"Opaque\":");
        go_string(&mut out, &u.opaque);
        out.push_str(",\"User\":null,\"Host\":");
        go_string(&mut out, &u.host);
        out.push_str(",\"Path\":");
        go_string(&mut out, &u.path);
        out.push_str(",\"Fragment\":");
        go_string(&mut out, &u.fragment);
        out.push_str(",\"RawQuery\":");
        go_string(&mut out, &u.raw_query);
        out.push_str(",\"RawPath\":");
        go_string(&mut out, &u.raw_path);
        out.push_str(",\"RawFragment\":");
        go_string(&mut out, &u.raw_fragment);
        let _ = write!(
            out,
            ",\"ForceQuery\":{},\"OmitHost\":{}}},\"header\":{{",
            u.force_query, u.omit_host
        );
        for (i, (name, values)) in self.header.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            go_string(&mut out, name);
            out.push_str(":[");
            for (j, v) in values.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                go_string(&mut out, v);
            }
            out.push(']');
        }
        out.push('}');
        if let Some(m) = &self.method {
            out.push_str(",\"method\":");
            go_string(&mut out, m);
        }
        out.push('}');
        out
    }

    /// Decodes as Go's `json.Unmarshal` would: keys matched case-insensitively, any key order,
    /// unknown keys ignored, `null` where Go allows it.
    pub fn from_json(data: &[u8]) -> Result<Self, ConnectError> {
        let root: Value = serde_json::from_slice(data)?;
        let obj = root.as_object().ok_or(ConnectError::Field {
            field: "(root)",
            problem: "not an object",
        })?;
        let mut req = ConnectRequest::default();
        if let Some(v) = field(obj, "MessID") {
            req.mess_id = match v {
                Value::Null => 0,
                v => v.as_u64().ok_or(ConnectError::Field {
                    field: "MessID",
                    problem: "not an unsigned integer",
                })?,
            };
        }
        if let Some(v) = field(obj, "url") {
            req.url = decode_url(v)?;
        }
        if let Some(v) = field(obj, "header") {
            req.header = decode_header(v)?;
        }
        if let Some(v) = field(obj, "method") {
            req.method = match v {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                _ => {
                    return Err(ConnectError::Field {
                        field: "method",
                        problem: "not a string",
                    });
                }
            };
        }
        Ok(req)
    }
}

/// Go's field lookup: an exact key first, then a case-insensitive one.
fn field<'a>(obj: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn decode_url(v: &Value) -> Result<GoUrl, ConnectError> {
    const BAD: ConnectError = ConnectError::Field {
        field: "url",
        problem: "not an object of strings and booleans",
    };
    let obj = match v {
        Value::Null => return Ok(GoUrl::default()),
        Value::Object(o) => o,
        _ => return Err(BAD),
    };
    let text = |name: &str| -> Result<String, ConnectError> {
        match field(obj, name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(BAD),
        }
    };
    let flag = |name: &str| -> Result<bool, ConnectError> {
        match field(obj, name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(BAD),
        }
    };
    Ok(GoUrl {
        scheme: text("Scheme")?,
        opaque: text("Opaque")?,
        host: text("Host")?,
        path: text("Path")?,
        raw_path: text("RawPath")?,
        raw_query: text("RawQuery")?,
        force_query: flag("ForceQuery")?,
        fragment: text("Fragment")?,
        raw_fragment: text("RawFragment")?,
        omit_host: flag("OmitHost")?,
    })
}

fn decode_header(v: &Value) -> Result<GoHeader, ConnectError> {
    const BAD: ConnectError = ConnectError::Field {
        field: "header",
        problem: "not an object of string lists",
    };
    let obj = match v {
        Value::Null => return Ok(GoHeader::new()),
        Value::Object(o) => o,
        _ => return Err(BAD),
    };
    let mut out = GoHeader::new();
    for (name, values) in obj {
        let list = match values {
            Value::Null => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned).ok_or(BAD))
                .collect::<Result<_, _>>()?,
            _ => return Err(BAD),
        };
        out.insert(name.clone(), list);
    }
    Ok(out)
}

/// Go's `textproto.CanonicalMIMEHeaderKey`: upper case at the start and after `-`, lower case
/// elsewhere; names holding bytes outside the token set are returned unchanged.
pub fn canonical_header_key(name: &str) -> String {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !name.bytes().all(token) {
        return name.to_owned();
    }
    let mut upper = true;
    name.bytes()
        .map(|b| {
            let c = if upper {
                b.to_ascii_uppercase()
            } else {
                b.to_ascii_lowercase()
            };
            upper = b == b'-';
            c as char
        })
        .collect()
}

/// Appends `s` as Go's encoder writes a string with HTML escaping on.
fn go_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 15)] as char);
            }
            c if (c as u32) < 0x20 => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 15)] as char);
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go emits for a LOGS_CONNECT with id 7 (303 bytes).
    const GO_LOGS_7: &str = r#"{"MessID":7,"url":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350","Path":"/containerLogs/default/nginx/nginx","Fragment":"","RawQuery":"follow=true\u0026tailLines=10","RawPath":"","RawFragment":"","ForceQuery":false,"OmitHost":false},"header":{"User-Agent":["kube-apiserver/v1.32.0"]}}"#;

    fn logs_7() -> ConnectRequest {
        let url = GoUrl::from_request_target(
            "/containerLogs/default/nginx/nginx?follow=true&tailLines=10",
            "http",
            "127.0.0.1:10350",
        )
        .unwrap();
        ConnectRequest::new(
            7,
            url,
            [
                ("user-agent", &b"kube-apiserver/v1.32.0"[..]),
                ("Host", &b"127.0.0.1:10351"[..]),
            ],
            None,
        )
    }

    #[test]
    fn logs_connect_should_encode_exactly_as_go() {
        let json = logs_7().to_go_json();
        assert_eq!(json, GO_LOGS_7);
        assert_eq!(json.len(), 303);
    }

    #[test]
    fn exec_connect_should_add_method_and_keep_header_order_sorted() {
        let url = GoUrl::from_request_target(
            "/exec/ns/p/c?command=sh&stdin=1",
            "http",
            "127.0.0.1:10350",
        )
        .unwrap();
        let req = ConnectRequest::new(
            300,
            url,
            [
                ("x-stream-protocol-version", &b"v5.channel.k8s.io"[..]),
                ("connection", &b"Upgrade"[..]),
                ("upgrade", &b"SPDY/3.1"[..]),
                ("X-Stream-Protocol-Version", &b"channel.k8s.io"[..]),
            ],
            Some("POST"),
        );
        let json = req.to_go_json();
        assert!(json.starts_with(r#"{"MessID":300,"url":{"Scheme":"http""#));
        assert!(json.ends_with(
            r#""header":{"Connection":["Upgrade"],"Upgrade":["SPDY/3.1"],"X-Stream-Protocol-Version":["v5.channel.k8s.io","channel.k8s.io"]},"method":"POST"}"#
        ));
        assert!(json.contains(r#""RawQuery":"command=sh\u0026stdin=1""#));
        assert_eq!(ConnectRequest::from_json(json.as_bytes()).unwrap(), req);
    }

    #[test]
    fn header_should_be_an_empty_object_never_null() {
        let req = ConnectRequest::new(1, GoUrl::default(), [], None);
        assert!(req.to_go_json().contains(r#""header":{}"#));
    }

    #[test]
    fn go_escapes_should_cover_html_controls_and_line_separators() {
        let mut out = String::new();
        go_string(&mut out, "a<b>&\"\\\n\t\u{1}\u{8}\u{c}\u{2028}é\u{7f}");
        assert_eq!(
            out,
            "\"a\\u003cb\\u003e\\u0026\\\"\\\\\\n\\t\\u0001\\b\\f\\u2028é\u{7f}\""
        );
    }

    #[test]
    fn decoder_should_accept_go_json_in_any_key_order_and_spelling() {
        assert_eq!(
            ConnectRequest::from_json(GO_LOGS_7.as_bytes()).unwrap(),
            logs_7()
        );
        // Go ≤ 1.18 key order, lower-case keys, extra keys, null header values.
        let old = r#"{"messid":7,"URL":{"Scheme":"http","Opaque":"","User":null,"Host":"127.0.0.1:10350","Path":"/containerLogs/default/nginx/nginx","RawPath":"","ForceQuery":false,"RawQuery":"follow=true\u0026tailLines=10","Fragment":"","RawFragment":""},"Header":{"User-Agent":["kube-apiserver/v1.32.0"]},"extra":1}"#;
        assert_eq!(ConnectRequest::from_json(old.as_bytes()).unwrap(), logs_7());
        let null_header = r#"{"MessID":3,"url":{"Path":"/metrics"},"header":null}"#;
        let req = ConnectRequest::from_json(null_header.as_bytes()).unwrap();
        assert!(req.header.is_empty());
        assert_eq!(req.mess_id, 3);
    }

    #[test]
    fn decoder_should_refuse_broken_json_without_panicking() {
        for bad in [
            &b"{"[..],
            b"[]",
            b"{\"MessID\":-1}",
            b"{\"header\":{\"A\":[1]}}",
            b"{\"url\":\"x\"}",
            b"\xff\xfe",
        ] {
            assert!(ConnectRequest::from_json(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn canonical_keys_should_match_go() {
        assert_eq!(
            canonical_header_key("sec-websocket-key"),
            "Sec-Websocket-Key"
        );
        assert_eq!(
            canonical_header_key("X-STREAM-protocol"),
            "X-Stream-Protocol"
        );
        assert_eq!(canonical_header_key("bad key"), "bad key");
    }
}
