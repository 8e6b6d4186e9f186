//! What the topics share.

use std::path::{Path, PathBuf};

use cloudcore_server::config::CloudCoreConfig;

/// cloudcore's configuration against the test API server: every listener on 127.0.0.1 with
/// a port the OS picks, certificates under `dir`, the test environment's stream certificates,
/// and no DNAT (nodes advertise the stream port itself).
pub(crate) fn testenv_config(dir: &Path) -> CloudCoreConfig {
    let env = k8s_testenv::env();
    let pki = env.pki();
    let mut c = CloudCoreConfig::default();
    c.kube_api_config.kube_config = env.kubeconfig().display().to_string();
    let hub = &mut c.modules.cloud_hub;
    hub.advertise_address = vec!["127.0.0.1".into()];
    hub.websocket.address = "127.0.0.1".into();
    hub.websocket.port = 0;
    hub.https.address = "127.0.0.1".into();
    hub.https.port = 0;
    hub.tls_ca_file = dir.join("ca/rootCA.crt");
    hub.tls_ca_key_file = dir.join("ca/rootCA.key");
    hub.tls_cert_file = dir.join("certs/server.crt");
    hub.tls_private_key_file = dir.join("certs/server.key");
    hub.unixsocket.address = format!("unix://{}", dir.join("kubeedge.sock").display());
    let s = &mut c.modules.cloud_stream;
    s.enable = true;
    s.tunnel_port = 0;
    s.stream_port = 0;
    for f in [
        &mut s.tls_tunnel_ca_file,
        &mut s.tls_tunnel_cert_file,
        &mut s.tls_tunnel_private_key_file,
    ] {
        *f = dir.join("none").display().to_string();
    }
    s.tls_stream_ca_file = pki.join("ca.crt").display().to_string();
    s.tls_stream_cert_file = pki.join("stream.crt").display().to_string();
    s.tls_stream_private_key_file = pki.join("stream.key").display().to_string();
    c.modules.iptables_manager.enable = false;
    c
}

/// Fails, naming the package to install, when `tool` is not on `PATH`: these tests run the
/// real one.
pub(crate) fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    assert!(
        found,
        "`{tool}` is not installed; these tests run the real one (apt-get install {package})"
    );
}

/// The cloudcore binary of this package, which cargo builds before it runs these tests.
pub(crate) fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cloudcore"))
}

/// A `replicas.address` no other cloudcore of this run uses: `127.<p>.<n>.<n>`, `p` from this
/// process's id and `n` counting up (`replicas` uses `127.0.x.y`).
///
/// The topics share one API server, and a cloudcore acts for every Node whose `cloudcore`
/// annotation names its own address: with one address for all, each would also write records
/// for (and send to) the nodes of the others. A name of its own keeps each to its own nodes.
pub(crate) fn replica_address() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let p = 1 + std::process::id() % 250;
    format!("127.{p}.{}.{}", n / 250 % 250, 1 + n % 250)
}

/// Held by a test while it counts requests in the test API server's audit log: the hostile
/// suite runs twice in this binary (once per configuration, each with its own cloudcore)
/// against one API server, so two such tests at once would count each other's requests.
pub(crate) static AUDIT_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
