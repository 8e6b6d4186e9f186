//! The name rules Kubernetes applies to object names and namespaces, checked before a name
//! taken from an edge's message reaches a URL.
//!
//! A name that passes contains only `a-z`, `0-9`, `-` and `.`, so it cannot carry a path
//! separator, a query (`?`), a fragment (`#`) or an escape (`%`) into a request path.

/// Longest DNS-1123 label (namespaces, most label-like names).
pub const LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (most object names).
pub const SUBDOMAIN_MAX: usize = 253;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    /// The name is empty.
    #[error("{what} must not be empty")]
    Empty {
        /// What was checked (`namespace`, `name`).
        what: &'static str,
    },
    /// The name is longer than its rule allows.
    #[error("{what} {name:?} is longer than {max} characters")]
    TooLong {
        /// What was checked.
        what: &'static str,
        /// The refused name.
        name: String,
        /// The limit.
        max: usize,
    },
    /// The name breaks the character rules.
    #[error(
        "{what} {name:?} is not a valid {rule}: lowercase alphanumerics, '-'{dots}, starting and ending with an alphanumeric"
    )]
    Malformed {
        /// What was checked.
        what: &'static str,
        /// The refused name.
        name: String,
        /// `DNS-1123 label` or `DNS-1123 subdomain`.
        rule: &'static str,
        /// `" or '.'"` for subdomains, empty for labels.
        dots: &'static str,
    },
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn label_ok(s: &[u8]) -> bool {
    match (s.first(), s.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first) && is_alnum(last) && s.iter().all(|&b| is_alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// True for a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= LABEL_MAX && label_ok(s.as_bytes())
}

/// True for a DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    // Dot-separated parts, each starting and ending with an alphanumeric; one pass over the
    // bytes (names are checked on every edge request).
    let b = s.as_bytes();
    if b.is_empty() || b.len() > SUBDOMAIN_MAX {
        return false;
    }
    let mut prev = b'.';
    for &c in b {
        let ok = match c {
            b'a'..=b'z' | b'0'..=b'9' => true,
            b'-' => prev != b'.',
            b'.' => is_alnum(prev),
            _ => false,
        };
        if !ok {
            return false;
        }
        prev = c;
    }
    is_alnum(prev)
}

/// `namespace` as a DNS-1123 label, as Kubernetes validates namespaces.
pub fn namespace(ns: &str) -> Result<&str, InvalidName> {
    check(
        ns,
        "namespace",
        LABEL_MAX,
        "DNS-1123 label",
        "",
        is_dns1123_label,
    )
}

/// `name` as a DNS-1123 subdomain, the rule for pods, nodes, ConfigMaps, Secrets, leases,
/// service accounts, volumes, events and certificate signing requests.
pub fn object_name<'a>(what: &'static str, name: &'a str) -> Result<&'a str, InvalidName> {
    check(
        name,
        what,
        SUBDOMAIN_MAX,
        "DNS-1123 subdomain",
        " or '.'",
        is_dns1123_subdomain,
    )
}

/// `name` as a Node name: a DNS-1123 subdomain, as Kubernetes validates Node names. Every
/// node name cloudcore takes from the wire (a certificate request's `NodeName`, a
/// WebSocket's `Node_id`, a tunnel's node header, a resource path) passes this before it is
/// used, so a name can never carry a path, query or fragment into a request for another
/// node's objects.
pub fn node_name(name: &str) -> Result<&str, InvalidName> {
    object_name("node name", name)
}

fn check<'a>(
    s: &'a str,
    what: &'static str,
    max: usize,
    rule: &'static str,
    dots: &'static str,
    ok: fn(&str) -> bool,
) -> Result<&'a str, InvalidName> {
    if s.is_empty() {
        return Err(InvalidName::Empty { what });
    }
    if s.len() > max {
        return Err(InvalidName::TooLong {
            what,
            name: truncated(s),
            max,
        });
    }
    if !ok(s) {
        return Err(InvalidName::Malformed {
            what,
            name: truncated(s),
            rule,
            dots,
        });
    }
    Ok(s)
}

/// At most 64 characters of a refused name, so an error (and its log line) stays small.
fn truncated(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_dns_1123() {
        for ok in [
            "a",
            "default",
            "kube-node-lease",
            "a1",
            "0",
            &"a".repeat(63),
        ] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a.b",
            "a/b",
            "a?b",
            "a%2fb",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn subdomains_follow_dns_1123() {
        for ok in [
            "a",
            "edge-1",
            "a.b.c",
            "csr-x7k2",
            "my-pod.1",
            &"a".repeat(253),
        ] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a/b",
            "p/status",
            "p?dryRun=All",
            "p#x",
            "Pod",
            "a .b",
            "ü",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn node_names_refuse_what_would_change_a_url() {
        for ok in ["edge-1", "edge.example.com", "a"] {
            assert_eq!(node_name(ok), Ok(ok));
        }
        for bad in [
            "victim?x=1",
            "victim?",
            "victim#",
            "victim/status",
            "victim%2f",
            "..",
            "Edge",
            "edge_1",
            "",
        ] {
            assert!(node_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_name_what_and_why_and_stay_short() {
        let e = object_name("pod name", "x/status").unwrap_err();
        assert!(
            e.to_string()
                .contains("pod name \"x/status\" is not a valid DNS-1123 subdomain")
        );
        let e = namespace("").unwrap_err();
        assert_eq!(e.to_string(), "namespace must not be empty");
        let long = "a".repeat(10_000);
        let e = object_name("name", &long).unwrap_err();
        assert!(e.to_string().len() < 200, "{e}");
    }
}
