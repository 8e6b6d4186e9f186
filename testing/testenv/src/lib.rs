//! Test-only: a real Kubernetes API server (kube-apiserver + etcd on 127.0.0.1), started once
//! per test binary by `scripts/k8s-testenv` and stopped when the binary exits.
//!
//! ```text
//! test ─ kube::Client ─► kube-apiserver (127.0.0.1:random) ─► etcd (127.0.0.1:random)
//! ```
//!
//! Start with [`client`] and [`namespace`]. When the environment cannot be started the call
//! panics with the reason (missing Go toolchain, failed build, server log tail). A test that
//! uses it names the `apiserver` tier first (`test_tiers::require!(ApiServer)`), which skips it
//! on a machine that cannot run `scripts/k8s-testenv` at all, and fails it there in CI.
//!
//! ```no_run
//! # async fn demo() {
//! let client = k8s_testenv::client().await;
//! let ns = k8s_testenv::namespace("demo").await;
//! # let _ = (client, ns);
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running environment: where its kubeconfig and certificates are.
#[derive(Debug)]
pub struct TestEnv {
    dir: PathBuf,
}

impl TestEnv {
    /// The state folder (`pki/`, `logs/`, `kubeconfig`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's audit log: one JSON event per line for each discovery request
    /// (`/api`, `/apis/...`, `/version`, `/openapi/...`) once answered, at level `Metadata`.
    /// Nothing else is audited.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs/audit.log")
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The folder with `ca.crt` (signs everything), `stream.crt/.key` (a serving certificate
    /// for 127.0.0.1 the API server trusts as a kubelet) and `kubelet-client.crt/.key` (what
    /// the API server presents to kubelets).
    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// `kubectl` (the one on PATH, else the one `scripts/k8s-testenv build` made) with this
    /// environment's kubeconfig.
    pub fn kubectl(&self) -> Command {
        let path = Command::new(script())
            .arg("kubectl-path")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "kubectl".to_owned());
        let mut cmd = Command::new(path);
        cmd.env("KUBECONFIG", self.kubeconfig());
        cmd
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-testenv")
}

/// The environment of this test binary, started on first use.
///
/// # Panics
/// When it cannot be started; the message says why.
pub fn env() -> &'static TestEnv {
    static ENV: OnceLock<TestEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cloudcore-testenv-{}", std::process::id()));
        let out = Command::new(script())
            .args(["up", "--owner-pid", &std::process::id().to_string()])
            .env("TESTENV_DIR", &dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script().display()));
        if !out.status.success() {
            panic!(
                "the Kubernetes test environment did not start (scripts/k8s-testenv up):\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        TestEnv { dir }
    })
}

/// The client configuration for the environment's API server, as cluster admin (for tests
/// that build their own client, e.g. with extra layers).
pub async fn config() -> Config {
    let kubeconfig = Kubeconfig::read_from(env().kubeconfig()).expect("readable kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig")
}

/// A new client for the environment's API server, as cluster admin. Each call makes its own
/// client, so it belongs to the calling test's runtime.
pub async fn client() -> Client {
    Client::try_from(config().await).expect("client")
}

/// Creates a namespace of its own for one test: `<prefix>-<random>`. Returns its name.
pub async fn namespace(prefix: &str) -> String {
    let name = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client().await)
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Applies CRDs (server-side apply) and waits until each is established.
pub async fn install_crds(crds: &[CustomResourceDefinition]) {
    let api = Api::<CustomResourceDefinition>::all(client().await);
    for crd in crds {
        let name = crd.metadata.name.clone().expect("named CRD");
        api.patch(
            &name,
            &PatchParams::apply("k8s-testenv").force(),
            &Patch::Apply(crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
    }
    for crd in crds {
        let name = crd.metadata.name.clone().expect("named CRD");
        let established = kube::runtime::conditions::is_crd_established();
        let wait = kube::runtime::wait::await_condition(api.clone(), &name, established);
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("CRD {name} not established in 30 s"))
            .unwrap_or_else(|e| panic!("waiting for CRD {name}: {e}"));
    }
}

/// Reads every CRD manifest in `dir` (`*.yaml`, one CRD each).
pub fn crds_from_dir(dir: &Path) -> Vec<CustomResourceDefinition> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", p.display()))
        })
        .collect()
}

/// The project's CRD manifests (`manifests/crds`).
pub fn project_crds() -> Vec<CustomResourceDefinition> {
    crds_from_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds"))
}
