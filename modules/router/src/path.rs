//! Paths and topics: which REST rule a request URI reaches, what is left of it for the target,
//! and which eventbus rule an uploaded MQTT topic belongs to.

/// The path of a REST-source rule, without leading or trailing `/` (as KubeEdge keys it), in
/// segments; a `{name}` segment matches any one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestPath {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
}

/// A REST call matched to a rule path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matched {
    /// Segments of the rule path (a longer path wins).
    pub(crate) len: usize,
    /// Literal segments among them (more wins between equally long paths).
    pub(crate) literals: usize,
    /// What follows the rule path: `/<more segments>` (or empty), then `?<query>` if any.
    pub(crate) param: String,
    /// The `/<more segments>` part alone (eventbus topics take no query).
    pub(crate) extra_path: String,
}

impl RestPath {
    /// Reads a rule's `path` (`/a/{id}/b/` is `a`, any, `b`).
    pub(crate) fn parse(path: &str) -> RestPath {
        let segments = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.len() > 2 && s.starts_with('{') && s.ends_with('}') {
                    Segment::Any
                } else {
                    Segment::Literal(s.to_owned())
                }
            })
            .collect();
        RestPath { segments }
    }

    /// Matches the part of a request URI after `/<node>/<namespace>/` (query included):
    /// the rule's segments must be the first segments of the request path, whole
    /// (`/a` reaches `/a`, `/a/b`, `/a?x` but not `/ab`).
    pub(crate) fn matches(&self, rest: &str) -> Option<Matched> {
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        let mut literals = 0;
        for segment in &self.segments {
            let part = parts.next()?;
            match segment {
                Segment::Literal(l) if l == part => literals += 1,
                Segment::Literal(_) => return None,
                Segment::Any => {}
            }
        }
        let extra: Vec<&str> = parts.collect();
        let extra_path = if extra.is_empty() {
            String::new()
        } else {
            format!("/{}", extra.join("/"))
        };
        let mut param = extra_path.clone();
        if let Some(q) = query {
            param.push('?');
            param.push_str(q);
        }
        Some(Matched {
            len: self.segments.len(),
            literals,
            param,
            extra_path,
        })
    }
}

impl std::fmt::Display for RestPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            match s {
                Segment::Literal(l) => f.write_str(l)?,
                Segment::Any => f.write_str("{}")?,
            }
        }
        Ok(())
    }
}

/// Go's `path.Clean` without the leading `/`: empty and `.` segments dropped, `..` removes the
/// segment before it. What KubeEdge's `path.Join` makes of `<namespace>/<topic>`.
pub(crate) fn clean_topic(topic: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in topic.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out.join("/")
}

/// MQTT topic filter matching: `+` is one level, a final `#` any number of levels (none
/// included). KubeEdge's cloud matches uploads to rules by exact string, so a rule whose topic
/// has wildcards subscribes at the edge but never delivers; here it delivers.
pub(crate) fn topic_matches(filter: &str, topic: &str) -> bool {
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return f.next().is_none(),
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The eventbus target topic for a REST call: the rule's topic, then the call's extra path
/// (KubeEdge: `<topic without trailing "/">/<param without leading "/">`).
pub(crate) fn target_topic(topic: &str, extra_path: &str) -> String {
    if extra_path.is_empty() {
        topic.to_owned()
    } else {
        format!(
            "{}/{}",
            topic.trim_end_matches('/'),
            extra_path.trim_start_matches('/')
        )
    }
}

/// The servicebus target path for a REST call: the rule's path, the call's extra path and its
/// query (`/target` + `/a?x=1` is `/target/a?x=1`; `/target` + `?x=1` is `/target?x=1`).
pub(crate) fn target_path(path: &str, param: &str) -> String {
    if param.is_empty() {
        path.to_owned()
    } else if param.starts_with('?') {
        format!("{path}{param}")
    } else {
        format!(
            "{}/{}",
            path.trim_end_matches('/'),
            param.trim_start_matches('/')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_paths_match_whole_leading_segments() {
        let p = RestPath::parse("/a/");
        assert_eq!(p.to_string(), "a");
        let m = p.matches("a/b/c?x=1").unwrap();
        assert_eq!(
            (m.param.as_str(), m.extra_path.as_str()),
            ("/b/c?x=1", "/b/c")
        );
        assert_eq!(p.matches("a").unwrap().param, "");
        assert_eq!(p.matches("a?q").unwrap().param, "?q");
        assert!(p.matches("ab").is_none(), "anchored at segment boundaries");
        assert!(p.matches("x/a").is_none(), "anchored at the start");
        let any = RestPath::parse("dev/{id}/state");
        let m = any.matches("dev/7/state/now").unwrap();
        assert_eq!((m.len, m.literals, m.param.as_str()), (3, 2, "/now"));
        assert!(any.matches("dev/7").is_none());
    }

    #[test]
    fn the_longest_path_is_the_better_match() {
        let (a, ab) = (RestPath::parse("/a"), RestPath::parse("/a/b"));
        let uri = "a/b/c";
        assert!(ab.matches(uri).unwrap().len > a.matches(uri).unwrap().len);
    }

    #[test]
    fn topics_clean_and_match_like_mqtt() {
        assert_eq!(clean_topic("ns//t/./x/../y/"), "ns/t/y");
        assert_eq!(clean_topic("ns//test"), "ns/test");
        assert!(topic_matches("ns/a/+/c", "ns/a/b/c"));
        assert!(!topic_matches("ns/a/+/c", "ns/a/b/d"));
        assert!(topic_matches("ns/a/#", "ns/a"));
        assert!(topic_matches("ns/a/#", "ns/a/b/c"));
        assert!(!topic_matches("ns/a/#", "ns/b"));
        assert!(topic_matches("ns/a", "ns/a"));
        assert!(!topic_matches("ns/a", "ns/a/b"));
        assert!(!topic_matches("ns/#/x", "ns/a/x"), "# only at the end");
    }

    #[test]
    fn targets_take_the_extra_path_as_kubeedge_does() {
        assert_eq!(target_topic("test", ""), "test");
        assert_eq!(target_topic("test/", "/a/b"), "test/a/b");
        assert_eq!(target_topic("/test", ""), "/test");
        assert_eq!(target_path("/target", "/a?x=1"), "/target/a?x=1");
        assert_eq!(target_path("/target", "?x=1"), "/target?x=1");
        assert_eq!(target_path("/target", ""), "/target");
    }
}
