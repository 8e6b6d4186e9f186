//! Label and field selectors in the Kubernetes string syntax, parsed once per watch and
//! matched against cached objects the way the API server matches them.

use kube::api::DynamicObject;
use kubeedge_api::status::StatusError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<LabelReq>);

/// One field requirement: the dotted path, the value, and whether it must equal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldReq>);

fn invalid(what: &str, selector: &str, why: &str) -> StatusError {
    StatusError::bad_request(format!(
        "unable to parse requirement: invalid {what} selector {:?}: {why}",
        selector.chars().take(256).collect::<String>()
    ))
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(kubeedge_api::validation::is_dns1123_subdomain)
        && is_label_value(name)
        && !name.is_empty()
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && v.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, ()> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(());
        }
    }
    if depth != 0 {
        return Err(());
    }
    out.push(&s[start..]);
    Ok(out)
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<LabelSelector, StatusError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(LabelSelector::default());
        }
        let err = |why: &str| invalid("label", s, why);
        let mut reqs = Vec::new();
        for part in split_top(s).map_err(|_| err("unbalanced parentheses"))? {
            let part = part.trim();
            let req = if let Some(key) = part.strip_prefix('!') {
                let key = key.trim();
                is_label_key(key).then(|| LabelReq::NotExists(key.to_owned()))
            } else if let Some((key, set)) = part
                .split_once(" notin ")
                .map(|(k, v)| (k, (v, false)))
                .or_else(|| part.split_once(" in ").map(|(k, v)| (k, (v, true))))
            {
                let (values, positive) = set;
                let key = key.trim();
                let inner = values
                    .trim()
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .ok_or_else(|| err("a set must be in parentheses"))?;
                let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
                (is_label_key(key) && values.iter().all(|v| is_label_value(v))).then(|| {
                    if positive {
                        LabelReq::In(key.to_owned(), values)
                    } else {
                        LabelReq::NotIn(key.to_owned(), values)
                    }
                })
            } else if let Some((key, value)) = part.split_once("!=") {
                let (key, value) = (key.trim(), value.trim());
                (is_label_key(key) && is_label_value(value))
                    .then(|| LabelReq::NotIn(key.to_owned(), vec![value.to_owned()]))
            } else if let Some((key, value)) = part.split_once('=') {
                let value = value.strip_prefix('=').unwrap_or(value);
                let (key, value) = (key.trim(), value.trim());
                (is_label_key(key) && is_label_value(value))
                    .then(|| LabelReq::In(key.to_owned(), vec![value.to_owned()]))
            } else {
                is_label_key(part).then(|| LabelReq::Exists(part.to_owned()))
            };
            reqs.push(req.ok_or_else(|| err("not a requirement of the selector syntax"))?);
        }
        Ok(LabelSelector(reqs))
    }

    pub(crate) fn matches(&self, obj: &DynamicObject) -> bool {
        let labels = obj.metadata.labels.as_ref();
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
        })
    }
}

/// Splits on unescaped `sep`, keeping escapes for the caller.
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let (mut out, mut start, mut escaped) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == sep && !escaped => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => escaped = false,
        }
    }
    out.push(&s[start..]);
    out
}

fn unescape(s: &str) -> Result<String, ()> {
    let (mut out, mut chars) = (String::with_capacity(s.len()), s.chars());
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return Err(()),
            }
        } else if c == '=' || c == ',' {
            return Err(());
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    pub(crate) fn parse(s: &str) -> Result<FieldSelector, StatusError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(FieldSelector::default());
        }
        let err = |why: &str| invalid("field", s, why);
        let mut reqs = Vec::new();
        for part in split_unescaped(s, ',') {
            let (path, value, equal) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, v, true)
            } else {
                return Err(err(
                    "want <field>=<value>, <field>==<value> or <field>!=<value>",
                ));
            };
            let path = path.trim();
            if path.is_empty()
                || !path
                    .split('.')
                    .all(|seg| !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_alphanumeric()))
            {
                return Err(err("the field must be a dotted path"));
            }
            let value =
                unescape(value).map_err(|_| err("invalid escape or unescaped '=' or ','"))?;
            reqs.push(FieldReq {
                path: path.to_owned(),
                value,
                equal,
            });
        }
        Ok(FieldSelector(reqs))
    }

    pub(crate) fn matches(&self, obj: &DynamicObject) -> bool {
        self.0
            .iter()
            .all(|r| (field(obj, &r.path) == r.value) == r.equal)
    }
}

/// A field as the API server's field selectors read it: absent fields are `""`.
fn field(obj: &DynamicObject, path: &str) -> String {
    match path {
        "metadata.name" => obj.metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => obj.metadata.namespace.clone().unwrap_or_default(),
        _ => {
            let mut v = &obj.data;
            for seg in path.split('.') {
                match v.get(seg) {
                    Some(next) => v = next,
                    None => return String::new(),
                }
            }
            match v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(json: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn label_selectors_match_as_the_api_server_does() {
        let o = obj(
            serde_json::json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"a","labels":{"app":"demo","tier":"web"}}}),
        );
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=demo"));
        assert!(m("app==demo,tier"));
        assert!(!m("app!=demo"));
        assert!(m("app in (demo, other)"));
        assert!(!m("app notin (demo)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        // EdgeMesh's selector.
        assert!(m(
            "!service.kubernetes.io/service-proxy-name,!service.edgemesh.kubeedge.io/service-proxy-name,!service.kubernetes.io/headless"
        ));
    }

    #[test]
    fn bad_selectors_are_refused_not_panicked_on() {
        for bad in [
            "!!",
            "a b",
            "app in demo",
            "app in (a",
            "=x",
            "a=b=c d",
            "x in ((a))",
        ] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(e.code(), 400, "{bad}");
        }
        for bad in ["a=b=c", "noop", "=x", "a..b=c", "a=b\\"] {
            let e = FieldSelector::parse(bad).unwrap_err();
            assert_eq!(e.code(), 400, "{bad}");
        }
    }

    #[test]
    fn field_selectors_read_metadata_and_object_fields() {
        let pod = obj(
            serde_json::json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":{"nodeName":"edge-1"},"status":{"phase":"Running"}}),
        );
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&pod);
        assert!(m("spec.nodeName=edge-1"));
        assert!(!m("spec.nodeName=edge-2"));
        assert!(m("metadata.namespace=default,metadata.name==p"));
        assert!(m("status.phase!=Pending"));
        assert!(m("spec.missing="));
        assert!(FieldSelector::parse("metadata.name=a\\,b").unwrap().0[0].value == "a,b");
    }
}
