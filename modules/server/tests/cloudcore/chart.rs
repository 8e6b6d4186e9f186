//! The Helm chart (`manifests/charts/cloudcore`): `helm lint` passes, its defaults render the
//! kustomize manifests' objects (the bundle, which `manifests.rs` holds equal to the kustomize
//! output), KubeEdge's chart values reach the objects they name, settings this cloudcore lacks
//! are refused by name, and the real API server accepts what it renders.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cloudcore_server::config::CloudCoreConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use serde_json::Value;

/// The repository: this crate is `modules/server`.
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn chart() -> PathBuf {
    root().join("manifests/charts/cloudcore")
}

fn helm_command(args: &[&str]) -> Command {
    let helm = test_tiers::helm().expect("the helm tier was checked");
    let mut cmd = Command::new(helm);
    cmd.args(args).current_dir(root());
    cmd
}

/// Runs helm with `args`; panics with its output when it fails.
fn helm(args: &[&str]) -> Output {
    let mut cmd = helm_command(args);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `helm template` of the chart, as `helm install cloudcore -n kubeedge` would apply it, with
/// `extra` arguments (`--set ...`).
fn template_args(extra: &[&str]) -> Vec<String> {
    let chart = chart();
    let mut args: Vec<String> = [
        "template",
        "cloudcore",
        chart.to_str().unwrap(),
        "--namespace",
        "kubeedge",
        "--include-crds",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args
}

fn render_text(extra: &[&str]) -> String {
    let args = template_args(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    String::from_utf8(helm(&args).stdout).expect("helm prints UTF-8")
}

fn render(extra: &[&str]) -> Vec<Value> {
    serde_saphyr::from_multiple(&render_text(extra)).expect("helm renders YAML documents")
}

/// Objects by kind and name.
fn by_key(objects: Vec<Value>) -> BTreeMap<(String, String), Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        let key = (
            o["kind"].as_str().unwrap_or_default().to_owned(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        assert!(map.insert(key.clone(), o).is_none(), "{key:?} twice");
    }
    map
}

fn typed<K: serde::de::DeserializeOwned>(
    objects: &BTreeMap<(String, String), Value>,
    kind: &str,
    name: &str,
) -> K {
    let o = objects
        .get(&(kind.to_owned(), name.to_owned()))
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"));
    serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
}

/// The configuration in a rendered ConfigMap, through the strict loader.
fn config_of(objects: &BTreeMap<(String, String), Value>) -> CloudCoreConfig {
    let cm: ConfigMap = typed(objects, "ConfigMap", "cloudcore");
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("cloudcore.yaml"))
        .expect("ConfigMap cloudcore has KubeEdge's key cloudcore.yaml");
    CloudCoreConfig::from_yaml(text).unwrap_or_else(|e| {
        panic!("the strict loader refuses the chart's configuration: {e}\n{text}")
    })
}

/// What the chart adds beyond the kustomize objects on purpose: the configuration's checksum
/// on the pod template (a changed configuration rolls the pods). The configuration text is
/// compared as configuration, not as text (comments and key order differ).
fn comparable(mut o: Value) -> Value {
    if o["kind"] == "Deployment" {
        let meta = &mut o["spec"]["template"]["metadata"];
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove("checksum/config");
            if annotations.is_empty() {
                meta.as_object_mut().unwrap().remove("annotations");
            }
        }
    }
    if o["kind"] == "ConfigMap" && o["metadata"]["name"] == "cloudcore" {
        o["data"]["cloudcore.yaml"] = Value::Null;
    }
    o
}

#[test]
fn the_chart_lints_and_its_defaults_render_the_kustomize_objects() {
    test_tiers::require!(Helm);
    let chart = chart();
    helm(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "--namespace",
        "kubeedge",
    ]);

    let rendered = by_key(render(&[]));
    let bundle_text = std::fs::read_to_string(root().join("manifests/cloudcore.yaml"))
        .expect("manifests/cloudcore.yaml");
    let bundle: Vec<Value> = serde_saphyr::from_multiple(&bundle_text).expect("bundle YAML");
    // The release's namespace is created by `helm install --create-namespace`, as with
    // KubeEdge's chart.
    let bundle = by_key(
        bundle
            .into_iter()
            .filter(|o| o["kind"] != "Namespace")
            .collect(),
    );
    let rendered_keys: Vec<_> = rendered.keys().collect();
    let bundle_keys: Vec<_> = bundle.keys().collect();
    assert_eq!(
        rendered_keys, bundle_keys,
        "the chart renders the bundle's objects (Namespace aside)"
    );
    for (key, b) in &bundle {
        assert_eq!(
            comparable(rendered[key].clone()),
            comparable(b.clone()),
            "{key:?}: the chart's default differs from manifests/ (edit the template or \
             values.yaml to match)"
        );
    }
    let bundle_config = {
        let cm: ConfigMap = typed(&bundle, "ConfigMap", "cloudcore");
        CloudCoreConfig::from_yaml(&cm.data.unwrap()["cloudcore.yaml"]).unwrap()
    };
    assert_eq!(
        config_of(&rendered),
        bundle_config,
        "the chart's cloudcore.yaml is the kustomize one"
    );
}

/// Values with KubeEdge's chart's paths reach the objects they name; the chart's own ones too.
#[test]
fn kubeedge_chart_values_reach_the_objects() {
    test_tiers::require!(Helm);
    let defaults = by_key(render(&[]));
    let set = by_key(render(&[
        "--set",
        "cloudCore.replicaCount=3",
        "--set",
        "cloudCore.hostNetWork=true",
        "--set",
        "cloudCore.image.repository=registry.example/cloudcore",
        "--set",
        "cloudCore.image.tag=v0.1.0",
        "--set",
        "cloudCore.modules.cloudHub.advertiseAddress[0]=192.0.2.10",
        "--set",
        "cloudCore.modules.cloudHub.dnsNames[0]=cloudcore.example.org",
        "--set",
        "cloudCore.modules.cloudHub.nodeLimit=5000",
        "--set",
        "cloudCore.modules.cloudStream.enable=false",
        "--set",
        "cloudCore.modules.dynamicController.enable=false",
        "--set",
        "cloudCore.modules.taskManager.jobController=false",
        "--set",
        "cloudCore.modules.router.enable=true",
        "--set",
        "cloudCore.modules.cloudHub.unixsocket.enable=true",
        "--set",
        "cloudCore.featureGates.requireAuthorization=true",
        "--set",
        "cloudCore.service.type=NodePort",
        "--set",
        "iptablesManager.enable=false",
        "--set",
        "cloudCore.podDisruptionBudget.enable=false",
        "--set",
        "cloudCore.monitor.networkPolicy.enable=false",
        "--set-json",
        r#"cloudCore.config={"modules":{"cloudHub":{"perNodeMetrics":true}}}"#,
    ]));

    let deploy: Deployment = typed(&set, "Deployment", "cloudcore");
    let spec = deploy.spec;
    assert_eq!(spec.replicas, Some(3));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("registry.example/cloudcore:v0.1.0")
    );
    let checksum = |objects: &BTreeMap<(String, String), Value>| {
        objects[&("Deployment".to_owned(), "cloudcore".to_owned())]["spec"]["template"]["metadata"]
            ["annotations"]["checksum/config"]
            .clone()
    };
    assert_ne!(
        checksum(&set),
        checksum(&defaults),
        "a changed configuration changes the pod template, so the pods roll"
    );

    let config = config_of(&set);
    let hub = &config.modules.cloud_hub;
    assert_eq!(hub.advertise_address, ["192.0.2.10"]);
    assert_eq!(hub.dns_names, ["cloudcore.example.org"]);
    assert_eq!(hub.node_limit, 5000);
    assert!(hub.per_node_metrics, "cloudCore.config is merged over");
    assert!(!config.modules.cloud_stream.enable);
    assert!(!config.modules.dynamic_controller.enable);
    assert!(!config.modules.iptables_manager.enable);
    assert!(config.modules.task_manager.enable && !config.modules.task_manager.job_controller);
    assert!(config.modules.router.enable);
    assert!(config.modules.cloud_hub.unixsocket.enable);
    assert_eq!(
        config.feature_gates.get("requireAuthorization"),
        Some(&true)
    );
    let role = (
        "ClusterRole".to_owned(),
        "cloudcore-require-authorization".to_owned(),
    );
    assert!(
        set.contains_key(&role) && !defaults.contains_key(&role),
        "the gate's RBAC (manifests/optional/require-authorization.yaml) comes with the gate"
    );
    let volumes = serde_json::to_value(&pod.volumes).unwrap();
    assert!(
        volumes.to_string().contains("/var/lib/kubeedge"),
        "the socket's host folder is mounted: {volumes}"
    );

    let service: Service = typed(&set, "Service", "cloudcore");
    let service = service.spec.unwrap();
    assert_eq!(service.type_.as_deref(), Some("NodePort"));
    let node_ports: Vec<_> = service
        .ports
        .unwrap()
        .iter()
        .map(|p| (p.port, p.node_port))
        .collect();
    assert_eq!(
        node_ports,
        [
            (10000, Some(30000)),
            (10002, Some(30002)),
            (10004, Some(30004))
        ],
        "KubeEdge's node ports, without the stream server's"
    );

    for (kind, name) in [
        ("DaemonSet", "cloud-iptables-manager"),
        ("PodDisruptionBudget", "cloudcore"),
        ("NetworkPolicy", "cloudcore-monitor"),
    ] {
        let key = (kind.to_owned(), name.to_owned());
        assert!(defaults.contains_key(&key), "{kind} {name} by default");
        assert!(!set.contains_key(&key), "{kind} {name} switched off");
    }
    // The iptables-manager runs the iptables-manager image of cloudcore's tag unless told
    // otherwise.
    let with_image = by_key(render(&["--set", "cloudCore.image.tag=v9"]));
    let ds = &with_image[&("DaemonSet".to_owned(), "cloud-iptables-manager".to_owned())];
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        "cloudcore-iptables-manager:v9"
    );
}

/// Settings of KubeEdge's chart this cloudcore lacks fail the install naming the value, rather
/// than being ignored.
#[test]
fn settings_this_cloudcore_lacks_are_refused_by_name() {
    test_tiers::require!(Helm);
    for (set, named) in [
        (
            "cloudCore.modules.cloudHub.quic.enable=true",
            "cloudCore.modules.cloudHub.quic.enable",
        ),
        ("mosquitto.enable=true", "mosquitto.enable"),
        ("iptablesManager.mode=legacy", "iptablesManager.mode"),
    ] {
        let args = template_args(&["--set", set]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = helm_command(&args).output().expect("run helm");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(named),
            "--set {set}: expected a failure naming {named}, got {} with:\n{stderr}",
            out.status
        );
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// The real API server accepts the rendered chart (server-side dry run: every field is known
/// and valid), with its defaults and with the values switched.
#[test]
fn the_api_server_accepts_the_rendered_chart() {
    test_tiers::require!(Helm, ApiServer);
    let dir = std::env::temp_dir().join(format!("cloudcore-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubectl = |args: &[&str]| {
        let mut cmd = k8s_testenv::env().kubectl();
        cmd.args(args);
        let out = cmd.output().expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // A server-side dry run creates nothing, so objects in the namespace need it to exist.
    let namespace = root().join("manifests/namespace.yaml");
    kubectl(&["apply", "-f", namespace.to_str().unwrap()]);
    let defaults = write(&dir, "defaults.yaml", &render_text(&[]));
    let switched = write(
        &dir,
        "switched.yaml",
        &render_text(&[
            "--set",
            "cloudCore.replicaCount=3",
            "--set",
            "cloudCore.hostNetWork=true",
            "--set",
            "cloudCore.service.type=NodePort",
            "--set",
            "iptablesManager.enable=false",
            "--set",
            "cloudCore.featureGates.requireAuthorization=true",
            "--set-json",
            r#"cloudCore.monitor.networkPolicy.from=[{"podSelector":{"matchLabels":{"app":"prometheus"}}}]"#,
        ]),
    );
    for file in [defaults, switched] {
        kubectl(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
