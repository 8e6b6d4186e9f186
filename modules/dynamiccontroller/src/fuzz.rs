//! Everything an edge controls in a request is parsed without panicking, whatever the bytes:
//! keys, selectors, options and Application envelopes (property tests over arbitrary and
//! mutated real inputs).

use kubeedge_api::application::{Application, ListOptions, PatchInfo};
use proptest::prelude::*;

use crate::key::{self, ResourceKey};
use crate::requests::is_pass_through;
use crate::selector::{FieldSelector, LabelSelector};

const KEYS: [&str; 5] = [
    "/core/v1/services/null/null",
    "/discovery.k8s.io/v1/endpointslices/kube-system/null",
    "/apps/v1/deployments/default/nginx",
    "/rbac.authorization.k8s.io/v1/clusterroles/null/system:node",
    "/apis/apps/v1",
];
const SELECTORS: [&str; 5] = [
    "app=demo,tier!=db",
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless",
    "env in (a, b),x notin (c)",
    "spec.nodeName=edge-1,metadata.namespace==default",
    "metadata.name=a\\,b",
];
const APPLICATION: &str = r#"{"ID":"73be","Key":"/core/v1/services/null/null","Verb":"list","Nodename":"edge-node-1","Option":"eyJsaW1pdCI6NTAwfQ==","ReqBody":null,"Subresource":"","RespBody":null,"Status":"InApplying","Reason":"","Error":{"ErrStatus":{"metadata":{}}},"Timestamp":"0001-01-01T00:00:00Z"}"#;

/// A seed with a few bytes replaced, inserted or cut.
fn mutated(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::sample::select(seeds),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..6),
    )
        .prop_map(|(seed, edits)| {
            let mut b = seed.as_bytes().to_vec();
            for (at, byte, kind) in edits {
                let i = if b.is_empty() { 0 } else { at.index(b.len()) };
                match kind {
                    0 if !b.is_empty() => b[i] = byte,
                    1 => b.insert(i, byte),
                    _ => b.truncate(i),
                }
            }
            String::from_utf8_lossy(&b).into_owned()
        })
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z0-9=!,.()/ \\\\-]{0,64}"]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keys_parse_or_refuse(k in prop_oneof![text(), mutated(&KEYS)]) {
        if let Ok(parsed) = ResourceKey::parse(&k) {
            // What parses builds a path that stays a path.
            let p = parsed.object_path(true, "").unwrap_or_else(|| parsed.collection_path(true));
            prop_assert!(!p.contains("..") && !p.contains('?') && !p.contains('#') && !p.contains('%'));
        }
        let _ = is_pass_through(&k, "get");
        let _ = key::subresource(&k);
    }

    #[test]
    fn selectors_parse_or_refuse(s in prop_oneof![text(), mutated(&SELECTORS)]) {
        if let Err(e) = LabelSelector::parse(&s) {
            prop_assert_eq!(e.code(), 400);
        }
        if let Err(e) = FieldSelector::parse(&s) {
            prop_assert_eq!(e.code(), 400);
        }
    }

    #[test]
    fn applications_and_options_decode_or_refuse(a in mutated(&[APPLICATION])) {
        if let Ok(app) = serde_json::from_str::<Application>(&a) {
            let _ = app.options::<ListOptions>();
            let _ = app.options::<PatchInfo>();
            let _ = app.options::<serde_json::Value>();
        }
    }
}
