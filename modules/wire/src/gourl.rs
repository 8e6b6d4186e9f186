//! Go's `net/url.URL` as the CONNECT JSON carries it, with Go's path escaping rules, so a
//! request target survives the trip cloud → JSON → edge exactly as Go would rebuild it.

/// Errors turning text into a [`GoUrl`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// A `%` not followed by two hex digits (Go: `invalid URL escape`).
    #[error("invalid URL escape {0:?}")]
    BadEscape(String),
    /// The request target is not an absolute path.
    #[error("request target {0:?} is not an absolute path")]
    NotAbsolute(String),
    /// The path or query holds bytes that cannot go on an HTTP request line.
    #[error("URL holds characters not allowed in a request target")]
    Unsafe,
}

/// The fields of Go's `url.URL` that the tunnel uses (`User` is always `null`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoUrl {
    /// `http` from the cloud.
    pub scheme: String,
    /// Unused by the tunnel; kept for round trips.
    pub opaque: String,
    /// `127.0.0.1:10350` from the cloud.
    pub host: String,
    /// The decoded path.
    pub path: String,
    /// The original escaped path when it differs from Go's default escaping, else empty.
    pub raw_path: String,
    /// Query text as received, without `?`.
    pub raw_query: String,
    /// A `?` with an empty query.
    pub force_query: bool,
    /// Decoded fragment (never sent by the apiserver).
    pub fragment: String,
    /// Raw fragment.
    pub raw_fragment: String,
    /// Go 1.19+ field; false from the cloud.
    pub omit_host: bool,
}

impl GoUrl {
    /// What Go's server stores for an incoming request target (`url.ParseRequestURI`), with
    /// the given scheme and host.
    pub fn from_request_target(target: &str, scheme: &str, host: &str) -> Result<Self, UrlError> {
        if !target.starts_with('/') {
            return Err(UrlError::NotAbsolute(target.to_owned()));
        }
        let (raw, query, force_query) = match target.split_once('?') {
            Some((p, q)) => (p, q, q.is_empty()),
            None => (target, "", false),
        };
        let path = unescape_path(raw)?;
        let raw_path = if escape_path(&path) == raw {
            String::new()
        } else {
            raw.to_owned()
        };
        Ok(GoUrl {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            path,
            raw_path,
            raw_query: query.to_owned(),
            force_query,
            ..GoUrl::default()
        })
    }

    /// Go's `URL.EscapedPath`: `RawPath` when it is a valid encoding of `Path`, else `Path`
    /// escaped.
    pub fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded_path(&self.raw_path)
            && unescape_path(&self.raw_path).is_ok_and(|p| p == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_owned();
        }
        escape_path(&self.path)
    }

    /// The request target (`/path?query`) for an HTTP/1.1 request line. Refuses anything an
    /// attacker could use to smuggle a second line or header.
    pub fn request_target(&self) -> Result<String, UrlError> {
        let mut path = self.escaped_path();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        if self.force_query || !self.raw_query.is_empty() {
            path.push('?');
            path.push_str(&self.raw_query);
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(UrlError::Unsafe);
        }
        Ok(path)
    }

    /// Go's `URL.String()` for the shapes the tunnel uses (no user info, no opaque form).
    pub fn to_go_string(&self) -> String {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(&self.scheme);
            out.push(':');
        }
        let path = self.escaped_path();
        if !self.scheme.is_empty() || !self.host.is_empty() {
            if !self.host.is_empty() || !self.path.is_empty() {
                out.push_str("//");
            }
            out.push_str(&self.host);
        }
        if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
            out.push('/');
        }
        out.push_str(&path);
        if self.force_query || !self.raw_query.is_empty() {
            out.push('?');
            out.push_str(&self.raw_query);
        }
        out
    }
}

/// Go's `shouldEscape(c, encodePath)`.
fn should_escape_path(c: u8) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    // Unreserved marks, and the reserved characters Go leaves alone in paths (all but `?`).
    !matches!(
        c,
        b'-' | b'_' | b'.' | b'~' | b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'@'
    )
}

/// Go's `escape(s, encodePath)`: `%XX` with upper-case hex, spaces as `%20`.
pub(crate) fn escape_path(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if should_escape_path(b) {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes().all(|b| {
        matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape_path(b)
    })
}

/// Go's `unescape(s, encodePath)`; bytes that do not form UTF-8 become U+FFFD (a Go string
/// could hold them, a Rust one cannot; the apiserver never sends such paths).
pub(crate) fn unescape_path(s: &str) -> Result<String, UrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = bytes.get(i + 1).and_then(|c| (*c as char).to_digit(16));
            let lo = bytes.get(i + 2).and_then(|c| (*c as char).to_digit(16));
            match (hi, lo) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => {
                    let end = (i + 3).min(bytes.len());
                    return Err(UrlError::BadEscape(
                        String::from_utf8_lossy(&bytes[i..end]).into_owned(),
                    ));
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_with_space_should_rebuild_escaped() {
        let u = GoUrl {
            scheme: "http".into(),
            host: "127.0.0.1:10350".into(),
            path: "/x y".into(),
            raw_query: "a=1".into(),
            ..GoUrl::default()
        };
        assert_eq!(u.to_go_string(), "http://127.0.0.1:10350/x%20y?a=1");
        assert_eq!(u.request_target().unwrap(), "/x%20y?a=1");
    }

    #[test]
    fn request_target_should_parse_like_go() {
        let u = GoUrl::from_request_target(
            "/containerLogs/default/nginx/nginx?follow=true&tailLines=10",
            "http",
            "127.0.0.1:10350",
        )
        .unwrap();
        assert_eq!(u.path, "/containerLogs/default/nginx/nginx");
        assert_eq!(u.raw_path, "");
        assert_eq!(u.raw_query, "follow=true&tailLines=10");
        // A non-default escaping is kept in RawPath and sent back verbatim.
        let u = GoUrl::from_request_target("/a%2Fb", "http", "h").unwrap();
        assert_eq!(u.path, "/a/b");
        assert_eq!(u.raw_path, "/a%2Fb");
        assert_eq!(u.request_target().unwrap(), "/a%2Fb");
        assert!(GoUrl::from_request_target("/a%zz", "http", "h").is_err());
        assert!(GoUrl::from_request_target("a", "http", "h").is_err());
    }

    #[test]
    fn request_target_should_refuse_line_breaks_in_the_query() {
        let u = GoUrl {
            path: "/containerLogs/a/b/c".into(),
            raw_query: "x=1\r\nHost: evil".into(),
            ..GoUrl::default()
        };
        assert_eq!(u.request_target(), Err(UrlError::Unsafe));
    }
}
