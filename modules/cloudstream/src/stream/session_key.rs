//! Which session a `/stats` or `/metrics` request is for: the node name from
//! `X-Forwarded-Uri` (node proxy requests), else the host part of `Host` (the node IP).

use kubeedge_wire::http1::RequestHead;

/// Which session a request is for: by node name or by the address the API server dialed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionKey {
    /// A node name, from `X-Forwarded-Uri`.
    Node(String),
    /// The host part of `Host`: the address the API server dialed (an IP, or a name when
    /// the Node's preferred address is a hostname).
    Host(String),
}

/// The registry key for a metrics request: the node named in an `X-Forwarded-Uri` of
/// `/api/v1/nodes/<node>/proxy/…` (more than 6 `/`-separated parts), else the host part of
/// `Host` (the node IP the API server dialed).
pub(crate) fn session_key(head: &RequestHead) -> Option<SessionKey> {
    if let Some(uri) = head.headers.get_str("X-Forwarded-Uri")
        && uri.starts_with("/api/v1/nodes/")
    {
        let parts: Vec<&str> = uri.split('/').collect();
        if parts.len() > 6 && !parts[4].is_empty() {
            return Some(SessionKey::Node(parts[4].to_owned()));
        }
    }
    let host = head.headers.get_str("Host")?.trim();
    Some(host_part(host).to_owned())
        .filter(|h| !h.is_empty())
        .map(SessionKey::Host)
}

/// `[::1]:10351` → `::1`, `10.0.0.5:10351` → `10.0.0.5`, `edge` → `edge` (upstream splits
/// on the first `:`, which breaks IPv6).
fn host_part(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead::with_headers("GET", "/metrics", headers)
    }

    #[test]
    fn forwarded_uri_should_name_the_node_and_short_ones_fall_back_to_host() {
        let h = head(&[
            ("Host", "10.0.0.5:10351"),
            ("X-Forwarded-Uri", "/api/v1/nodes/edge-1/proxy/metrics"),
        ]);
        assert_eq!(session_key(&h), Some(SessionKey::Node("edge-1".into())));
        let h = head(&[
            ("Host", "10.0.0.5:10351"),
            ("X-Forwarded-Uri", "/api/v1/nodes/edge-1/proxy"),
        ]);
        assert_eq!(session_key(&h), Some(SessionKey::Host("10.0.0.5".into())));
        let h = head(&[("host", "[fd00::5]:10351")]);
        assert_eq!(session_key(&h), Some(SessionKey::Host("fd00::5".into())));
        assert_eq!(session_key(&head(&[])), None);
    }
}
