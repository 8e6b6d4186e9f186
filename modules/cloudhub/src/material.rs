//! Key material at start (docs/hub-protocol.md): local files, else Secrets `kubeedge/casecret` and
//! `kubeedge/cloudcoresecret`, else generated once and stored (files without Kubernetes,
//! Secrets with it; create-only, so concurrent replicas converge on one CA). Plus the
//! token: Secret `kubeedge/tokensecret` and the `tokendata` file.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use pki::{CertAndKey, CertificateAuthority};
use tracing::{info, warn};

use crate::config::CloudHubConfig;
use crate::error::{Error, Result};

/// Namespace of upstream's secrets.
pub const NAMESPACE: &str = "kubeedge";
/// Secret of the CA (`cadata`, `cakeydata`).
pub const CA_SECRET: &str = "casecret";
/// Secret of the server certificate (`cloudcoredata`, `cloudcorekeydata`).
pub const CLOUDCORE_SECRET: &str = "cloudcoresecret";
/// Secret of the token (`tokendata`).
pub const TOKEN_SECRET: &str = "tokensecret";
/// Annotation of [`TOKEN_SECRET`] holding the token generation: any new value (an operator
/// sets it) invalidates every bootstrap token issued before; cloudhub then issues a new one.
pub const TOKEN_GENERATION_ANNOTATION: &str = "kubeedge.io/token-generation";

/// The CA and the server certificate the listeners use.
#[derive(Debug, Clone)]
pub struct Material {
    /// The KubeEdge CA.
    pub ca: CertificateAuthority,
    /// The cloudcore server certificate and key (DER).
    pub server: CertAndKey,
}

pub(crate) fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

async fn read_secret(
    client: &kube::Client,
    name: &str,
    cert_key: &str,
    key_key: &str,
) -> Result<Option<CertAndKey>> {
    let Some(secret) = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_opt(name)
        .await?
    else {
        return Ok(None);
    };
    let data = secret.data.unwrap_or_default();
    match (data.get(cert_key), data.get(key_key)) {
        (Some(c), Some(k)) if !c.0.is_empty() && !k.0.is_empty() => Ok(Some(CertAndKey {
            cert_der: c.0.clone(),
            key_der: k.0.clone(),
        })),
        _ => Err(Error::Secret(
            format!("{NAMESPACE}/{name}"),
            format!("needs {cert_key} and {key_key}"),
        )),
    }
}

pub(crate) async fn ensure_namespace(client: &kube::Client) -> Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn secret(name: &str, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Creates the secret unless it exists; returns what is stored afterwards (ours, or the one a
/// concurrent replica wrote first).
async fn create_once(
    client: &kube::Client,
    name: &str,
    cert_key: &str,
    key_key: &str,
    pair: CertAndKey,
) -> Result<CertAndKey> {
    ensure_namespace(client).await?;
    let data = BTreeMap::from([
        (cert_key.to_owned(), ByteString(pair.cert_der.clone())),
        (key_key.to_owned(), ByteString(pair.key_der.clone())),
    ]);
    let api = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    match api
        .create(&PostParams::default(), &secret(name, data))
        .await
    {
        Ok(_) => Ok(pair),
        Err(e) if is_status(&e, 409) => read_secret(client, name, cert_key, key_key)
            .await?
            .ok_or_else(|| {
                Error::Secret(
                    format!("{NAMESPACE}/{name}"),
                    "vanished after a conflict".into(),
                )
            }),
        Err(e) => Err(e.into()),
    }
}

async fn load_pair(
    files: (&Path, &Path),
    kube: Option<(&kube::Client, &str, &str, &str)>,
    generate: impl FnOnce() -> Result<CertAndKey>,
) -> Result<CertAndKey> {
    if let Some(pair) = pki::read_pem_pair(files.0, files.1)? {
        info!(cert = %files.0.display(), "using certificate files");
        return Ok(pair);
    }
    if let Some((client, name, ck, kk)) = kube {
        if let Some(pair) = read_secret(client, name, ck, kk).await? {
            info!(secret = name, "using certificate from secret");
            return Ok(pair);
        }
        let pair = generate()?;
        info!(
            secret = name,
            "generated certificate, storing it in a secret"
        );
        return create_once(client, name, ck, kk, pair).await;
    }
    let pair = generate()?;
    pki::write_pem_pair(files.0, files.1, &pair)?;
    info!(cert = %files.0.display(), "generated certificate, stored in files");
    Ok(pair)
}

/// Loads or creates the CA, then the server certificate.
pub async fn prepare(config: &CloudHubConfig, kube: Option<&kube::Client>) -> Result<Material> {
    let ca_pair = load_pair(
        (&config.tls_ca_file, &config.tls_ca_key_file),
        kube.map(|c| (c, CA_SECRET, "cadata", "cakeydata")),
        || {
            let ca = CertificateAuthority::generate()?;
            Ok(CertAndKey {
                cert_der: ca.cert_der().to_vec(),
                key_der: ca.key_der().to_vec(),
            })
        },
    )
    .await?;
    let ca = CertificateAuthority::from_der(ca_pair.cert_der, ca_pair.key_der)?;
    let server = load_pair(
        (&config.tls_cert_file, &config.tls_private_key_file),
        kube.map(|c| (c, CLOUDCORE_SECRET, "cloudcoredata", "cloudcorekeydata")),
        || Ok(ca.issue_server_cert(&config.advertise_address, &config.dns_names)?),
    )
    .await?;
    Ok(Material { ca, server })
}

/// Stores the current token: the `tokendata` file and, with Kubernetes, Secret
/// `kubeedge/tokensecret` (created or replaced). Each is attempted whatever happened to the
/// other: in a pod the file's directory is often a read-only Secret mount, and `keadm
/// gettoken` reads only the Secret. Each failure is logged. With Kubernetes the result is the
/// Secret's (what edges are told to fetch the token from), else the file's.
pub async fn store_token(
    config: &CloudHubConfig,
    kube: Option<&kube::Client>,
    token: &str,
) -> Result<()> {
    let path = config.token_file();
    let file = pki::write_file(&path, token, true).map_err(Error::from);
    if let Err(e) = &file {
        warn!(path = %path.display(), error = %e, "cannot write the token file");
    }
    let Some(client) = kube else {
        return file;
    };
    let secret = store_token_secret(client, token).await;
    if let Err(e) = &secret {
        warn!(secret = %format!("{NAMESPACE}/{TOKEN_SECRET}"), error = %e, "cannot write the token secret");
    }
    secret
}

async fn store_token_secret(client: &kube::Client, token: &str) -> Result<()> {
    ensure_namespace(client).await?;
    let data = BTreeMap::from([(
        "tokendata".to_owned(),
        ByteString(token.as_bytes().to_vec()),
    )]);
    let api = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    let pp = PatchParams::apply("cloudhub").force();
    let mut s = secret(TOKEN_SECRET, data);
    s.type_ = Some("Opaque".into());
    let mut value =
        serde_json::to_value(&s).map_err(|e| Error::Secret(TOKEN_SECRET.into(), e.to_string()))?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    api.patch(TOKEN_SECRET, &pp, &Patch::Apply(value)).await?;
    Ok(())
}

/// The token generation: annotation [`TOKEN_GENERATION_ANNOTATION`] of Secret
/// `kubeedge/tokensecret` (empty when either is missing).
pub(crate) async fn token_generation(client: &kube::Client) -> Result<String> {
    Ok(Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get_metadata_opt(TOKEN_SECRET)
        .await?
        .and_then(|s| s.metadata.annotations?.remove(TOKEN_GENERATION_ANNOTATION))
        .unwrap_or_default())
}
