//! The pull secret of an ImagePrePullJob, as the edge reads it.
//!
//! KubeEdge's edge fetches `imageSecrets` through its metaManager and decodes the Secret's
//! `.dockerconfigjson` directly as a CRI `AuthConfig` (`{"username", "password", "auth",
//! "server_address", …}`); a standard `{"auths": {…}}` file decodes to no credentials at all,
//! so the pull goes out anonymously. Here cloudcore reads the Secret itself and hands the edge
//! the `AuthConfig` of the images' registry, under a name of its own: the edge cannot be
//! refused the Secret (an edge reads only Secrets its pods use) and a pod's own copy of the
//! same Secret on the edge is never replaced.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Map, Value, json};

/// The key of a docker config Secret.
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// The name the edge knows the job's pull secret by: upper case, so that it can never be the
/// name of a real Secret (Secret names are lower case).
pub fn edge_name(job: &str) -> String {
    format!("ImagePrePullJob.{job}")
}

/// The registry of an image reference, as container runtimes read it: the first path
/// component when it looks like a host (has `.` or `:`, or is `localhost`), else Docker Hub.
pub fn registry(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

fn host_of(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    }
}

/// The CRI `AuthConfig` JSON for `images` from a Secret's `.dockerconfigjson`: a standard
/// `{"auths": {host: {…}}}` gives the credentials of the first image's registry (or of the
/// only entry), without a server address; a file that already is an `AuthConfig` is taken as
/// it is.
pub fn auth_config(secret: &Secret, images: &[String]) -> Result<Value, String> {
    let raw = secret
        .data
        .as_ref()
        .and_then(|d| d.get(DOCKER_CONFIG_KEY))
        .ok_or_else(|| format!("it has no {DOCKER_CONFIG_KEY} key"))?;
    let doc: Value = serde_json::from_slice(&raw.0)
        .map_err(|e| format!("its {DOCKER_CONFIG_KEY} is not JSON: {e}"))?;
    let Some(auths) = doc.get("auths") else {
        return match doc {
            Value::Object(_) => Ok(doc),
            _ => Err(format!("its {DOCKER_CONFIG_KEY} is not a JSON object")),
        };
    };
    let auths = auths
        .as_object()
        .ok_or_else(|| format!("its {DOCKER_CONFIG_KEY} has an \"auths\" that is not an object"))?;
    let wanted = images.first().map(|i| registry(i)).unwrap_or("docker.io");
    let entry = auths
        .iter()
        .find(|(k, _)| host_of(k) == wanted)
        .or_else(|| (auths.len() == 1).then(|| auths.iter().next()).flatten())
        .ok_or_else(|| format!("it has no credentials for the registry {wanted}"))?;
    let (_, creds) = entry;
    let field = |name: &str| creds.get(name).and_then(Value::as_str).unwrap_or_default();
    let mut out = Map::new();
    for (from, to) in [
        ("username", "username"),
        ("password", "password"),
        ("auth", "auth"),
        ("identitytoken", "identity_token"),
        ("registrytoken", "registry_token"),
    ] {
        if !field(from).is_empty() {
            out.insert(to.into(), field(from).into());
        }
    }
    // No `server_address`: containerd reads it as a URL and refuses a bare `host:port`,
    // and for Docker Hub it never equals the host pulled from (`registry-1.docker.io`).
    Ok(Value::Object(out))
}

/// The Secret the edge stores under [`edge_name`] in `namespace`: `.dockerconfigjson` holds
/// the `AuthConfig`, nothing else of the original is sent.
pub fn edge_secret(namespace: &str, job: &str, auth: &Value) -> Value {
    let bytes = serde_json::to_vec(auth).unwrap_or_default();
    let data: BTreeMap<&str, String> = BTreeMap::from([(
        DOCKER_CONFIG_KEY,
        base64::engine::general_purpose::STANDARD.encode(bytes),
    )]);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": edge_name(job), "namespace": namespace},
        "type": "kubernetes.io/dockerconfigjson",
        "data": data,
    })
}

/// A Secret holding `text` under `.dockerconfigjson` (tests and tools).
pub fn docker_config_secret(name: &str, namespace: &str, text: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(namespace.into());
    s.type_ = Some("kubernetes.io/dockerconfigjson".into());
    s.data = Some(
        [(
            DOCKER_CONFIG_KEY.to_string(),
            ByteString(text.as_bytes().to_vec()),
        )]
        .into(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_are_read_as_runtimes_read_them() {
        assert_eq!(registry("nginx:1.27"), "docker.io");
        assert_eq!(registry("library/nginx"), "docker.io");
        assert_eq!(registry("127.0.0.1:5000/busybox:1"), "127.0.0.1:5000");
        assert_eq!(registry("localhost/x"), "localhost");
        assert_eq!(registry("quay.io/a/b"), "quay.io");
    }

    #[test]
    fn a_standard_docker_config_becomes_the_auth_config_of_the_images_registry() {
        let s = docker_config_secret(
            "regcred",
            "default",
            r#"{"auths":{"https://index.docker.io/v1/":{"auth":"eDp5"},
                "127.0.0.1:5000":{"username":"u","password":"p","auth":"dTpw"}}}"#,
        );
        let a = auth_config(&s, &["127.0.0.1:5000/app:1".into()]).unwrap();
        assert_eq!(a, json!({"username":"u","password":"p","auth":"dTpw"}));
        let hub = auth_config(&s, &["nginx".into()]).unwrap();
        assert_eq!(hub, json!({"auth":"eDp5"}));
        assert!(
            auth_config(&s, &["quay.io/x".into()])
                .unwrap_err()
                .contains("quay.io")
        );
        let flat = docker_config_secret("f", "d", r#"{"username":"u","password":"p"}"#);
        assert_eq!(auth_config(&flat, &[]).unwrap()["username"], "u");
        let mut none = flat.clone();
        none.data = None;
        assert!(
            auth_config(&none, &[])
                .unwrap_err()
                .contains(".dockerconfigjson")
        );
    }

    #[test]
    fn the_edge_copy_has_an_upper_case_name_and_only_the_auth_config() {
        let v = edge_secret("default", "p1", &json!({"username": "u"}));
        assert_eq!(v["metadata"]["name"], "ImagePrePullJob.p1");
        let data = v["data"][DOCKER_CONFIG_KEY].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        assert_eq!(decoded, br#"{"username":"u"}"#);
        assert!(!kubeedge_api::validation::is_dns1123_subdomain(&edge_name(
            "p1"
        )));
    }
}
