//! The edge's key material and its bootstrap through the certificate server, exactly as
//! edgecore does it (docs/hub-protocol.md, "What edgecore does at first start").

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::error::HubError;
use super::https;
use crate::ServerVerification;

/// The edge's CA, certificate and key (all DER; the key SEC1 or PKCS#8).
#[derive(Clone, PartialEq, Eq)]
pub struct EdgeCerts {
    /// The KubeEdge CA the server certificate must chain to.
    pub ca_der: Vec<u8>,
    /// This node's client certificate (`CN=system:node:<node>`).
    pub cert_der: Vec<u8>,
    /// Its private key.
    pub key_der: Vec<u8>,
}

impl std::fmt::Debug for EdgeCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeCerts")
            .field("cert_der", &format_args!("{} bytes", self.cert_der.len()))
            .finish_non_exhaustive()
    }
}

/// Where edgecore keeps its files (`edgeHub.tlsCaFile`, `tlsCertFile`, `tlsPrivateKeyFile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    /// CA certificate PEM (default `/etc/kubeedge/ca/rootCA.crt`).
    pub ca: PathBuf,
    /// Client certificate PEM (default `/etc/kubeedge/certs/server.crt`).
    pub cert: PathBuf,
    /// Client key PEM (default `/etc/kubeedge/certs/server.key`).
    pub key: PathBuf,
}

impl Default for CertPaths {
    fn default() -> Self {
        CertPaths::under(Path::new("/etc/kubeedge"))
    }
}

impl CertPaths {
    /// The edgecore layout under `dir`: `ca/rootCA.crt`, `certs/server.crt`, `certs/server.key`.
    pub fn under(dir: &Path) -> Self {
        CertPaths {
            ca: dir.join("ca/rootCA.crt"),
            cert: dir.join("certs/server.crt"),
            key: dir.join("certs/server.key"),
        }
    }
}

fn read(path: &Path) -> Result<String, HubError> {
    std::fs::read_to_string(path).map_err(|source| HubError::Io {
        path: path.to_owned(),
        source,
    })
}

impl EdgeCerts {
    /// Loads the files if all three exist and the certificate is for `node` (as edgecore
    /// requires); `Ok(None)` when any is missing.
    pub fn load(paths: &CertPaths, node: &str) -> Result<Option<Self>, HubError> {
        if !(paths.ca.exists() && paths.cert.exists() && paths.key.exists()) {
            return Ok(None);
        }
        let certs = EdgeCerts {
            ca_der: pki::first_pem_der(&read(&paths.ca)?)?,
            cert_der: pki::first_pem_der(&read(&paths.cert)?)?,
            key_der: pki::first_pem_der(&read(&paths.key)?)?,
        };
        if !pki::parse_identity(&certs.cert_der)?.is_node(node) {
            return Ok(None);
        }
        Ok(Some(certs))
    }

    /// Writes the three PEM files (the key with mode 0600).
    pub fn store(&self, paths: &CertPaths) -> Result<(), HubError> {
        pki::write_file(&paths.ca, &pki::to_pem("CERTIFICATE", &self.ca_der), false)?;
        pki::write_pem_pair(
            &paths.cert,
            &paths.key,
            &pki::CertAndKey {
                cert_der: self.cert_der.clone(),
                key_der: self.key_der.clone(),
            },
        )?;
        Ok(())
    }

    /// The client TLS configuration: presents the certificate and verifies the server
    /// against the CA (chain and the host dialed), as edgecore does.
    pub fn client_tls(&self) -> Result<rustls::ClientConfig, HubError> {
        self.client_tls_with(ServerVerification::VerifyWithCa)
    }

    /// [`EdgeCerts::client_tls`] with an explicit [`ServerVerification`];
    /// `InsecureSkipVerify` accepts any server certificate (see its warning).
    pub fn client_tls_with(
        &self,
        verification: ServerVerification,
    ) -> Result<rustls::ClientConfig, HubError> {
        let client = Some((self.cert_der.as_slice(), self.key_der.as_slice()));
        Ok(match verification {
            ServerVerification::VerifyWithCa => pki::tls::client_config(&self.ca_der, client)?,
            ServerVerification::InsecureSkipVerify => {
                tracing::warn!(
                    "hub client TLS: server certificate verification is OFF (InsecureSkipVerify)"
                );
                pki::tls::insecure_client_config_with(client)?
            }
        })
    }
}

const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

async fn fetch_ca(http_server: &str, local: Option<IpAddr>) -> Result<Vec<u8>, HubError> {
    // Like edgecore: the server is not verified and the status is not checked; the hash of
    // the body is, against the token, so a forged CA is refused before anything is sent.
    let tls = Arc::new(pki::tls::insecure_client_config());
    let resp = https::request(
        http_server,
        local,
        "GET",
        "/ca.crt",
        &[],
        &[],
        tls,
        HTTP_TIMEOUT,
    )
    .await?;
    Ok(resp.body)
}

async fn sign(
    http_server: &str,
    local: Option<IpAddr>,
    ca_der: &[u8],
    node: &str,
    auth: Option<&str>,
    client: Option<&EdgeCerts>,
) -> Result<EdgeCerts, HubError> {
    let csr = pki::EdgeCsr::generate(node)?;
    let tls = match client {
        Some(c) => pki::tls::client_config(ca_der, Some((&c.cert_der, &c.key_der)))?,
        None => pki::tls::client_config(ca_der, None)?,
    };
    let mut headers = vec![("NodeName", node.to_owned())];
    if let Some(jwt) = auth {
        headers.push(("Authorization", format!("Bearer {jwt}")));
    }
    let resp = https::request(
        http_server,
        local,
        "GET",
        "/edge.crt",
        &headers,
        &csr.csr_der,
        Arc::new(tls),
        HTTP_TIMEOUT,
    )
    .await?;
    if resp.status != 200 {
        return Err(HubError::Http {
            status: resp.status,
            body: String::from_utf8_lossy(&resp.body).into_owned(),
        });
    }
    Ok(EdgeCerts {
        ca_der: ca_der.to_vec(),
        cert_der: resp.body,
        key_der: csr.key_der,
    })
}

/// First-start bootstrap: download the CA without verifying the
/// server, check its SHA-256 against the token's first part, generate a P-256 key and a CSR
/// (`C=CN, ST=Zhejiang, L=Hangzhou, O=system:nodes, CN=system:node:<node>`), and get it
/// signed by `GET /edge.crt` with `Authorization: Bearer <jwt>` and `NodeName`, verifying the
/// server against the downloaded CA this time. `http_server` is `https://host:port`.
pub async fn bootstrap(http_server: &str, token: &str, node: &str) -> Result<EdgeCerts, HubError> {
    bootstrap_from(http_server, token, node, None).await
}

/// [`bootstrap`] dialing from the source address `local` (the OS picks when `None`): load
/// tools give each simulated edge an address of its own, as real edges have, so the
/// certificate server's per-source limits see them apart.
pub async fn bootstrap_from(
    http_server: &str,
    token: &str,
    node: &str,
    local: Option<IpAddr>,
) -> Result<EdgeCerts, HubError> {
    let (hash, jwt) = pki::split_token(token).ok_or(HubError::BadToken)?;
    let ca_der = fetch_ca(http_server, local).await?;
    let got = pki::sha256_hex(&ca_der);
    if !got.eq_ignore_ascii_case(hash) {
        return Err(HubError::CaMismatch {
            want: hash.to_owned(),
            got,
        });
    }
    sign(http_server, local, &ca_der, node, Some(jwt), None).await
}

/// Certificate rotation: a new key and certificate, authenticated by the current one.
pub async fn rotate(
    http_server: &str,
    current: &EdgeCerts,
    node: &str,
) -> Result<EdgeCerts, HubError> {
    sign(
        http_server,
        None,
        &current.ca_der,
        node,
        None,
        Some(current),
    )
    .await
}
