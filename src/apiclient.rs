//! The Kubernetes API client cloudcore runs on: kube's middleware over one HTTP/2 connection.
//!
//! `kube::Client::try_from(Config)` speaks HTTP/1.1 only, which costs one TLS connection per
//! request in flight: a replica with thousands of edges connecting held 170–270 connections
//! to the API server, each with its own TLS state and buffers. The API server speaks HTTP/2
//! (as client-go uses it), so here the connection is negotiated by ALPN and every watch and
//! request shares it; servers without HTTP/2 get HTTP/1.1 as before.

use std::time::Duration;

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::{BoxError, ServiceBuilder};

/// How often an idle HTTP/2 connection is pinged, and how long an answer may take before the
/// connection is dropped and the next request dials again (client-go's health check: a read
/// idle timeout of 30 s and a ping timeout of 15 s). Watches see the loss as a stream error
/// and restart.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for `config` with the same authentication, extra headers (User-Agent,
/// impersonation), base URI and retries as kube's own, over HTTP/2 when the server offers it.
///
/// Errors: the TLS or authentication settings of `config` are unusable.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let tls = config.rustls_client_config()?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match config.tls_server_name.as_deref() {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_all_versions().wrap_connector(http);
    let http: HttpClient<_, kube::client::Body> = HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, ListParams};

    /// Established TCP connections of this process to `port` (its socket inodes, from
    /// `/proc/self/fd`, matched in `/proc/self/net/tcp{,6}`).
    fn connections_to(port: u16) -> usize {
        let inodes: HashSet<String> = std::fs::read_dir("/proc/self/fd")
            .expect("/proc/self/fd")
            .flatten()
            .filter_map(|e| {
                let target = std::fs::read_link(e.path()).ok()?;
                let t = target.to_string_lossy();
                Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
            })
            .collect();
        let want = format!(":{port:04X}");
        ["tcp", "tcp6"]
            .iter()
            .filter_map(|t| std::fs::read_to_string(format!("/proc/self/net/{t}")).ok())
            .map(|text| {
                text.lines()
                    .skip(1)
                    .filter(|l| {
                        let c: Vec<&str> = l.split_whitespace().collect();
                        c.len() > 9
                            && c[2].ends_with(&want)
                            && c[3] == "01"
                            && inodes.contains(c[9])
                    })
                    .count()
            })
            .sum()
    }

    #[tokio::test]
    async fn requests_in_flight_together_share_one_connection_to_the_api_server() {
        let config = k8s_testenv::config().await;
        let port = config.cluster_url.port_u16().expect("API server port");
        let before = connections_to(port);
        let client = super::client(config).expect("client");
        let namespaces: Api<Namespace> = Api::all(client);
        // A watch holds its stream open while 64 lists run at once.
        let mut watch = namespaces
            .watch(&kube::api::WatchParams::default().timeout(10), "0")
            .await
            .expect("watch")
            .boxed();
        let params = ListParams::default().limit(1);
        let lists = futures::future::join_all((0..64).map(|_| namespaces.list(&params))).await;
        assert!(lists.iter().all(Result::is_ok), "every list answered");
        assert!(watch.next().await.is_some(), "the watch streams");
        let after = connections_to(port);
        // HTTP/1.1 would hold one connection per request in flight: about 65 here.
        assert!(
            after <= before + 1,
            "one HTTP/2 connection for the watch and 64 concurrent lists: {before} before, {after} after"
        );
    }
}
