//! The deployment manifests (`manifests/`): the one-file bundle is the kustomize output, the
//! ConfigMap loads with the strict configuration loader and agrees with the Deployment, every
//! RBAC rule is one a module's code uses, and the real API server accepts the manifests
//! (server-side dry run, then a real apply whose roles grant exactly the table below).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use cloudcore_server::config::CloudCoreConfig;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use serde::de::DeserializeOwned;

/// The repository: this crate is `modules/server`.
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn manifests() -> PathBuf {
    root().join("manifests")
}

/// The generated bundle's regeneration command, for failure messages.
const REGENERATE: &str = "regenerate it with the command in manifests/kustomization.yaml";

/// Every YAML document of `text`, in order (empty documents skipped).
fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple(text).expect("valid YAML documents")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The bundle's objects.
fn bundle() -> Vec<serde_json::Value> {
    documents(&read(&manifests().join("cloudcore.yaml")))
}

/// The one object of `kind` named `name` in the bundle, typed.
fn object<K: DeserializeOwned>(kind: &str, name: &str) -> K {
    let found: Vec<_> = bundle()
        .into_iter()
        .filter(|d| {
            d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} {name} in the bundle");
    serde_json::from_value(found.into_iter().next().unwrap())
        .unwrap_or_else(|e| panic!("{kind} {name}: {e}"))
}

fn run(mut cmd: std::process::Command) -> Output {
    let what = format!("{cmd:?}");
    let out = cmd
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn kubectl(args: &[&str]) -> Output {
    let mut cmd = k8s_testenv::env().kubectl();
    cmd.args(args);
    run(cmd)
}

#[test]
fn the_bundle_is_the_kustomize_output() {
    test_tiers::require!(ApiServer);
    let out = kubectl(&["kustomize", "manifests"]);
    let rendered = documents(&String::from_utf8_lossy(&out.stdout));
    let bundle = bundle();
    assert_eq!(
        rendered.len(),
        bundle.len(),
        "manifests/cloudcore.yaml has {} objects, kustomize renders {}: {REGENERATE}",
        bundle.len(),
        rendered.len()
    );
    for (i, (r, b)) in rendered.iter().zip(&bundle).enumerate() {
        assert_eq!(
            r,
            b,
            "object {i} ({} {}) differs from the kustomize output: {REGENERATE}",
            r["kind"].as_str().unwrap_or("?"),
            r["metadata"]["name"].as_str().unwrap_or("?")
        );
    }
    // Every CRD the project defines is installed by the bundle.
    let crds: BTreeSet<String> = bundle
        .iter()
        .filter(|d| d["kind"].as_str() == Some("CustomResourceDefinition"))
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(manifests().join("crds"))
        .expect("manifests/crds")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".yaml").map(str::to_owned))
        .collect();
    assert_eq!(
        crds, files,
        "the bundle installs every CRD of manifests/crds"
    );
}

fn container<'a>(containers: &'a [Container], name: &str) -> &'a Container {
    containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("container {name}"))
}

/// The port a probe or Service names, resolved against the container's named ports.
fn port_number(
    c: &Container,
    port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
) -> i32 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("container {} has no port named {name}", c.name))
                .container_port
        }
    }
}

#[test]
fn the_configmap_loads_strictly_and_agrees_with_the_deployment() {
    let cm: ConfigMap = object("ConfigMap", "cloudcore");
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("cloudcore.yaml"))
        .expect("ConfigMap cloudcore has KubeEdge's key cloudcore.yaml");
    let config = CloudCoreConfig::from_yaml(text).expect("the strict loader accepts the ConfigMap");
    assert_eq!(
        config.kube_api_config.kube_config, "",
        "in-cluster configuration"
    );
    assert_eq!(
        config.common_config.monitor_server.bind_address,
        "0.0.0.0:9091"
    );
    assert_eq!(
        config.modules.iptables_manager.mode,
        cloudstream::IptablesMode::External,
        "the DaemonSet keeps the DNAT rules"
    );
    assert!(config.needs_kubernetes() && config.modules.cloud_stream.enable);

    let deploy: Deployment = object("Deployment", "cloudcore");
    let spec = &deploy.spec;
    let pod = spec.template.spec.as_ref().unwrap();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let (key, value) = cloudstream::negotiate::CLOUDCORE_POD_SELECTOR
        .split_once('=')
        .unwrap();
    assert_eq!(
        labels.get(key).map(String::as_str),
        Some(value),
        "cloudstream finds its own pods by {}",
        cloudstream::negotiate::CLOUDCORE_POD_SELECTOR
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("cloudcore"));
    assert!(pod.termination_grace_period_seconds.unwrap_or_default() >= 10);
    let c = container(&pod.containers, "cloudcore");

    // The ports the configuration opens are the container's.
    let ports: BTreeSet<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
    let m = &config.modules;
    let monitor: std::net::SocketAddr = config
        .common_config
        .monitor_server
        .bind_address
        .parse()
        .unwrap();
    for port in [
        i32::from(m.cloud_hub.websocket.port),
        i32::from(m.cloud_hub.https.port),
        m.cloud_stream.stream_port as i32,
        m.cloud_stream.tunnel_port as i32,
        i32::from(monitor.port()),
    ] {
        assert!(
            ports.contains(&port),
            "container port {port} missing: {ports:?}"
        );
    }
    // Probes on the monitor server.
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(port_number(c, &get.port), i32::from(monitor.port()));
    }
    assert!(
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some()
    );

    // Least privilege in the pod: non-root, nothing writable but the token file's folder.
    let pod_sc = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    let volumes = pod.volumes.clone().unwrap_or_default();
    let mount = |dir: &Path| {
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| Path::new(&m.mount_path) == dir)
            .unwrap_or_else(|| panic!("nothing mounted at {}", dir.display()));
        volumes
            .iter()
            .find(|v| v.name == m.name)
            .unwrap_or_else(|| panic!("volume {}", m.name))
            .clone()
    };
    let config_volume = mount(Path::new("/etc/kubeedge/config"));
    assert_eq!(
        config_volume.config_map.map(|c| c.name),
        Some("cloudcore".to_owned()),
        "the binary's default --config is /etc/kubeedge/config/cloudcore.yaml"
    );
    let token_dir = m.cloud_hub.token_file().parent().unwrap().to_owned();
    assert!(
        mount(&token_dir).empty_dir.is_some(),
        "{} (the tokendata file) must be a writable emptyDir",
        token_dir.display()
    );
    let stream_dir = Path::new(&m.cloud_stream.tls_stream_cert_file)
        .parent()
        .unwrap();
    for file in [
        &m.cloud_stream.tls_stream_ca_file,
        &m.cloud_stream.tls_stream_private_key_file,
    ] {
        assert_eq!(Path::new(file).parent().unwrap(), stream_dir);
    }
    let stream = mount(stream_dir)
        .secret
        .expect("stream certificates from a Secret");
    assert_eq!(
        stream.secret_name.as_deref(),
        Some("cloudcore"),
        "KubeEdge's Secret name"
    );
    let items: BTreeSet<String> = stream.items.unwrap().into_iter().map(|i| i.path).collect();
    for file in [
        &m.cloud_stream.tls_stream_cert_file,
        &m.cloud_stream.tls_stream_ca_file,
        &m.cloud_stream.tls_stream_private_key_file,
    ] {
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            items.contains(&name),
            "{file} is not in the stream Secret's items"
        );
    }
    let env: Vec<_> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(env.contains(&cloudstream::negotiate::NAMESPACE_ENV));

    // The stream server is called only by the API server, through the DNAT rules to the pod
    // IP: it is not published on the LoadBalancer.
    let public: Service = object("Service", "cloudcore");
    let published: Vec<i32> = public
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| p.port)
        .collect();
    assert!(
        !published.contains(&(m.cloud_stream.stream_port as i32)),
        "{published:?}"
    );
    // Services route to ports the container has, and select the Deployment's pods.
    for name in ["cloudcore", "cloudcore-monitor"] {
        let svc: Service = object("Service", name);
        let s = svc.spec.unwrap();
        for (k, v) in s.selector.unwrap() {
            assert_eq!(labels.get(&k), Some(&v), "Service {name} selects the pods");
        }
        for p in s.ports.unwrap() {
            let target = port_number(c, p.target_port.as_ref().expect("targetPort"));
            assert!(ports.contains(&target), "Service {name} port {}", p.port);
        }
    }

    // The iptables-manager runs the same image in the host's network namespace and forwards to
    // the stream port the configuration opens.
    let ds: DaemonSet = object("DaemonSet", "cloud-iptables-manager");
    let ds_pod = ds.spec.template.spec.unwrap();
    assert_eq!(ds_pod.host_network, Some(true));
    let ipt = container(&ds_pod.containers, "iptables-manager");
    // Two targets of one Dockerfile: only the iptables-manager's image has iptables.
    assert_eq!(c.image.as_deref(), Some("cloudcore:latest"));
    assert_eq!(
        ipt.image.as_deref(),
        Some("cloudcore-iptables-manager:latest")
    );
    let dockerfile = read(&root().join("Dockerfile"));
    for target in ["AS iptables-manager", "AS cloudcore"] {
        assert!(dockerfile.contains(target), "Dockerfile target {target}");
    }
    let cloudcore_stage = &dockerfile[dockerfile.find("AS cloudcore").unwrap()..];
    assert!(
        !cloudcore_stage.contains("iptables"),
        "cloudcore's image installs nothing more"
    );
    let args = ipt.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("iptables-manager"));
    let forward = args
        .iter()
        .position(|a| a == "--forward-port")
        .and_then(|i| args.get(i + 1))
        .expect("--forward-port");
    assert_eq!(
        forward,
        &m.cloud_stream.stream_port.to_string(),
        "the DNAT rules forward to cloudcore's stream port"
    );
    let ds_env: Vec<_> = ipt.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(ds_env.contains(&cloudstream::negotiate::NAMESPACE_ENV));
    let caps = ipt
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.clone())
        .unwrap_or_default();
    assert!(caps.contains(&"NET_ADMIN".to_owned()), "{caps:?}");
}

#[test]
fn the_monitor_port_is_guarded_by_rbac_and_a_network_policy() {
    // The roles name exactly the paths the monitor server protects, and the pod's own
    // ServiceAccount may diagnose (cloudcore diagnose in the pod sends its token).
    let reader: ClusterRole = object("ClusterRole", "cloudcore-metrics-reader");
    let debug: ClusterRole = object("ClusterRole", "cloudcore-debug");
    for (role, path) in [(&reader, "/metrics"), (&debug, "/debug/nodes/*")] {
        let rules = role.rules.clone().unwrap_or_default();
        assert_eq!(rules.len(), 1, "{path}");
        assert_eq!(rules[0].non_resource_urls, Some(vec![path.to_owned()]));
        assert_eq!(rules[0].verbs, ["get"]);
    }
    let binding: ClusterRoleBinding = object("ClusterRoleBinding", "cloudcore-debug");
    assert_eq!(binding.role_ref.name, "cloudcore-debug");
    let subjects = binding.subjects.unwrap_or_default();
    assert!(
        subjects.iter().any(|s| s.kind == "ServiceAccount"
            && s.name == "cloudcore"
            && s.namespace.as_deref() == KUBEEDGE),
        "{subjects:?}"
    );

    // The NetworkPolicy selects the pods, leaves every port the Service publishes open to all,
    // and lets only a namespace it names reach the monitor port.
    let deploy: Deployment = object("Deployment", "cloudcore");
    let pod_labels = deploy.spec.template.metadata.unwrap().labels.unwrap();
    let policy: NetworkPolicy = object("NetworkPolicy", "cloudcore-monitor");
    let spec = policy.spec.unwrap();
    for (k, v) in spec.pod_selector.unwrap().match_labels.unwrap() {
        assert_eq!(pod_labels.get(&k), Some(&v));
    }
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    let rules = spec.ingress.unwrap_or_default();
    let port_of = |p: &k8s_openapi::api::networking::v1::NetworkPolicyPort| match &p.port {
        Some(IntOrString::Int(n)) => *n,
        other => panic!("numeric port expected, got {other:?}"),
    };
    let open: BTreeSet<i32> = rules
        .iter()
        .filter(|r| r.from.is_none())
        .flat_map(|r| r.ports.iter().flatten().map(port_of))
        .collect();
    let svc: Service = object("Service", "cloudcore");
    let published: BTreeSet<i32> = svc
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    // The stream server is not published, but the API server reaches it at the pod IP.
    let mut reachable = published;
    reachable.insert(10003);
    assert_eq!(open, reachable, "the edge-facing ports stay open to all");
    let cm: ConfigMap = object("ConfigMap", "cloudcore");
    let config = CloudCoreConfig::from_yaml(&cm.data.unwrap()["cloudcore.yaml"]).unwrap();
    let monitor: std::net::SocketAddr = config
        .common_config
        .monitor_server
        .bind_address
        .parse()
        .unwrap();
    assert!(!open.contains(&i32::from(monitor.port())));
    let guarded: Vec<_> = rules
        .iter()
        .filter(|r| {
            r.ports
                .iter()
                .flatten()
                .any(|p| port_of(p) == i32::from(monitor.port()))
        })
        .collect();
    assert_eq!(guarded.len(), 1);
    let from = guarded[0].from.clone().unwrap_or_default();
    assert!(
        !from.is_empty() && from.iter().all(|f| f.namespace_selector.is_some()),
        "{from:?}"
    );
    // With a cluster the monitor server reviews tokens (no mode set: Webhook).
    assert_eq!(config.common_config.monitor_server.authorization.mode, None);
}

/// One RBAC rule the code needs: where (`None` = the ClusterRole, else the Role in that
/// namespace), what, and the places in the code that make the calls (`"file: text it
/// contains"`, files under `modules/` unless they start with `src/`). Derived by reading every
/// `Api<K>` and request builder in `modules/*/src` and `src`.
struct Need {
    namespace: Option<&'static str>,
    group: &'static str,
    resources: &'static [&'static str],
    names: &'static [&'static str],
    verbs: &'static [&'static str],
    used_at: &'static [&'static str],
}

const CLUSTER: Option<&str> = None;
const KUBEEDGE: Option<&str> = Some("kubeedge");

const NEEDS: &[Need] = &[
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["nodes"],
        names: &[],
        verbs: &["get", "list", "watch", "patch"],
        used_at: &[
            "edgecontroller/src/upstream/nodes.rs: api::<Node>(None).patch(",
            "edgecontroller/src/upstream/nodes.rs: api::<Node>(None).get(",
            "edgecontroller/src/downstream/mod.rs: let mut nodes: Option<Events<Node>>",
            "cloudhub/src/certserver.rs: escaped::Api::<Node>::all(client).get_opt(",
            "cloudhub/src/revocation.rs: Api::<PartialObjectMeta<Node>>::all(client.clone())",
            "cloudstream/src/tunnel/addresses.rs: kube::Api::<Node>::all(client)",
            "synccontroller/src/reconciler.rs: Api::<PartialObjectMeta<Node>>::all(",
            "taskmanager/src/select.rs: nodes.get_opt(name)",
            "taskmanager/src/select.rs: .list(&ListParams::default().labels(&selector))",
            "router/src/nodes.rs: let api: Api<PartialObjectMeta<Node>> = Api::all(client);",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["nodes/status"],
        names: &[],
        verbs: &["patch"],
        used_at: &[
            "edgecontroller/src/upstream/nodes.rs: self.patch_status::<Node>(",
            "cloudstream/src/tunnel/node.rs: .patch_status(node,",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["pods"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "edgecontroller/src/upstream/pods.rs: api::<Pod>(Some(&r.namespace)).get(",
            "cloudstream/src/negotiate.rs: let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);",
            "edgecontroller/src/downstream/pods.rs: Api::<Pod>::all(self.client.clone()).list(",
            "cloudstream/src/stream/locate.rs: let api: Api<Pod> = Api::all(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["configmaps", "secrets"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "edgecontroller/src/downstream/mod.rs: let mut configmaps: Option<Events<ConfigMap>>",
            "edgecontroller/src/downstream/mod.rs: let mut secrets: Option<Events<Secret>>",
            "edgecontroller/src/upstream/queries.rs: self.cached(&self.secrets",
            "cloudhub/src/material.rs: Api::<Secret>::namespaced(client.clone(), NAMESPACE)",
            "cloudstream/src/negotiate.rs: api.get_opt(TUNNEL_PORT_CONFIGMAP)",
            "taskmanager/src/engine.rs: let api: Api<Secret> = Api::namespaced(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["persistentvolumes", "persistentvolumeclaims"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "edgecontroller/src/upstream/queries.rs: api::<PersistentVolume>(None).get(",
            "edgecontroller/src/upstream/queries.rs: api::<PersistentVolumeClaim>(ns).get(",
            "synccontroller/src/reconciler.rs: Api::<DynamicObject>::all_with(self.client.clone(), &resource)",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "storage.k8s.io",
        resources: &["volumeattachments"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "edgecontroller/src/upstream/queries.rs: api::<VolumeAttachment>(None).get(",
            "synccontroller/src/reconciler.rs: Api::<DynamicObject>::all_with(self.client.clone(), &resource)",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "coordination.k8s.io",
        resources: &["leases"],
        names: &[],
        verbs: &["get", "create", "update"],
        used_at: &[
            "edgecontroller/src/upstream/leases.rs: leases.create(",
            "edgecontroller/src/upstream/leases.rs: leases.replace(",
            "edgecontroller/src/upstream/leases.rs: api::<Lease>(Some(&r.namespace)).get(",
            "server/src/leader.rs: self.api.get_opt(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["services", "endpoints"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "dynamiccontroller/src/requests.rs: key.collection_path(info.namespaced)",
            "dynamiccontroller/src/informer.rs: Api::all_with(client, &self.info.resource)",
            "dynamiccontroller/src/shared.rs: core_type(\"Service\", \"services\", true)",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "discovery.k8s.io",
        resources: &["endpointslices"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "dynamiccontroller/src/requests.rs: key.collection_path(info.namespaced)",
            "dynamiccontroller/src/informer.rs: Api::all_with(client, &self.info.resource)",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "authorization.k8s.io",
        resources: &["subjectaccessreviews"],
        names: &[],
        verbs: &["create"],
        used_at: &[
            "cloudstream/src/stream/authz.rs: AccessReviewer::new(",
            "dynamiccontroller/src/shared.rs: AccessReviewer::new(",
            "api/src/access.rs: api: Api<SubjectAccessReview>",
            "server/src/ops/auth.rs: Api::<SubjectAccessReview>::all(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "authentication.k8s.io",
        resources: &["tokenreviews"],
        names: &[],
        verbs: &["create"],
        used_at: &["server/src/ops/auth.rs: Api::<TokenReview>::all("],
    },
    Need {
        namespace: CLUSTER,
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        names: &[
            "objectsyncs.reliablesyncs.kubeedge.io",
            "clusterobjectsyncs.reliablesyncs.kubeedge.io",
            "devices.devices.kubeedge.io",
            "devicemodels.devices.kubeedge.io",
            "devicestatuses.devices.kubeedge.io",
            "nodeupgradejobs.operations.kubeedge.io",
            "imageprepulljobs.operations.kubeedge.io",
            "configupdatejobs.operations.kubeedge.io",
        ],
        verbs: &["get"],
        used_at: &[
            "server/src/app.rs: let api: Api<CustomResourceDefinition> = Api::all(",
            "server/src/app.rs: \"devicestatuses.devices.kubeedge.io\"",
            "server/src/app.rs: \"configupdatejobs.operations.kubeedge.io\"",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["namespaces"],
        names: &[],
        verbs: &["create"],
        used_at: &["cloudhub/src/material.rs: Api::<Namespace>::all(client.clone())"],
    },
    Need {
        namespace: CLUSTER,
        group: "reliablesyncs.kubeedge.io",
        resources: &["objectsyncs", "clusterobjectsyncs"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "delete"],
        used_at: &[
            "cloudhub/src/store.rs: Api::<ObjectSync>::namespaced(client, &key.namespace)",
            "cloudhub/src/store.rs: .delete(&name, &dp)",
            "synccontroller/src/reconciler.rs: Api::<ClusterObjectSync>::all(self.client.clone())",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "reliablesyncs.kubeedge.io",
        resources: &["objectsyncs/status", "clusterobjectsyncs/status"],
        names: &[],
        verbs: &["patch"],
        used_at: &["cloudhub/src/store.rs: .patch_status(&name, &pp, &patch)"],
    },
    Need {
        namespace: CLUSTER,
        group: "devices.kubeedge.io",
        resources: &["devices"],
        names: &[],
        verbs: &["get", "list", "watch"],
        used_at: &[
            "devicecontroller/src/upstream.rs: Request::new(Device::url_path(",
            "devicecontroller/src/downstream.rs: Option<Events<Device>>",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "devices.kubeedge.io",
        resources: &["devicemodels"],
        names: &[],
        verbs: &["list", "watch"],
        used_at: &["devicecontroller/src/downstream.rs: Option<Events<DeviceModel>>"],
    },
    Need {
        namespace: CLUSTER,
        group: "devices.kubeedge.io",
        resources: &["devicestatuses"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch"],
        used_at: &[
            "devicecontroller/src/downstream.rs: Option<Events<DeviceStatus>>",
            "devicecontroller/src/shared.rs: api().create(",
            "devicecontroller/src/upstream.rs: Request::new(DeviceStatus::url_path(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "rules.kubeedge.io",
        resources: &["rules"],
        names: &[],
        verbs: &["get", "list", "watch", "patch"],
        used_at: &[
            "edgecontroller/src/upstream/rules.rs: api::<Rule>(Some(&r.namespace)).patch(",
            "edgecontroller/src/upstream/rules.rs: api::<Rule>(Some(&r.namespace)).get(",
            "edgecontroller/src/downstream/mod.rs: let mut rules: Option<Events<Rule>>",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "rules.kubeedge.io",
        resources: &["ruleendpoints"],
        names: &[],
        verbs: &["list", "watch"],
        used_at: &[
            "edgecontroller/src/downstream/mod.rs: let mut endpoints: Option<Events<RuleEndpoint>>",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "operations.kubeedge.io",
        resources: &["nodeupgradejobs", "imageprepulljobs", "configupdatejobs"],
        names: &[],
        verbs: &["get", "list", "watch", "patch"],
        used_at: &[
            "taskmanager/src/engine.rs: kubeedge_api::watch::events(self.api.clone(), config)",
            "taskmanager/src/engine.rs: self.api.get_opt(name)",
            "taskmanager/src/engine.rs: .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "operations.kubeedge.io",
        resources: &[
            "nodeupgradejobs/status",
            "imageprepulljobs/status",
            "configupdatejobs/status",
        ],
        names: &[],
        verbs: &["update"],
        used_at: &[
            "taskmanager/src/engine.rs: .replace_status(name, &PostParams::default(), &job)",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["secrets"],
        names: &[],
        verbs: &["create"],
        used_at: &[
            "cloudhub/src/material.rs: .create(&PostParams::default(), &secret(name, data))",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["secrets"],
        names: &["tokensecret"],
        verbs: &["patch"],
        used_at: &["cloudhub/src/material.rs: api.patch(TOKEN_SECRET, &pp, &Patch::Apply(value))"],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["configmaps"],
        names: &[],
        verbs: &["create"],
        used_at: &[
            "cloudhub/src/kv.rs: cms.create(&PostParams::default(), &cm)",
            "cloudstream/src/negotiate.rs: api.create(&PostParams::default(), &cm)",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["configmaps"],
        names: &["revokedcerts"],
        verbs: &["update"],
        used_at: &[
            "cloudhub/src/revocation.rs: .replace(REVOKED_CERTS, &PostParams::default(), &cm)",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["configmaps"],
        names: &[],
        verbs: &["patch", "delete"],
        used_at: &[
            "cloudhub/src/kv.rs: &Patch::Merge(&patch)",
            "dynamiccontroller/src/persist.rs: .patch(&name, &params, &Patch::Apply(cm_value))",
            "dynamiccontroller/src/persist.rs: self.api.delete(&name, &DeleteParams::default())",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["configmaps"],
        names: &["tunnelport"],
        verbs: &["update"],
        used_at: &[
            "cloudstream/src/negotiate.rs: api.replace(TUNNEL_PORT_CONFIGMAP, &PostParams::default(), &cm)",
        ],
    },
];

/// What `cloudcore-edge-requests` (manifests/rbac-edge-requests.yaml) must grant: the requests
/// cloudcore makes on behalf of an edge with its own identity, and nothing of its own.
const EDGE_NEEDS: &[Need] = &[
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["nodes"],
        names: &[],
        verbs: &["create"],
        used_at: &["edgecontroller/src/upstream/nodes.rs: api::<Node>(None).create("],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["nodes/status"],
        names: &[],
        verbs: &["update"],
        used_at: &["edgecontroller/src/upstream/nodes.rs: api::<Node>(None).replace_subresource("],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["pods"],
        names: &[],
        verbs: &["create", "delete"],
        used_at: &[
            "edgecontroller/src/upstream/pods.rs: api::<Pod>(Some(&r.namespace)).create(",
            "edgecontroller/src/upstream/pods.rs: api::<Pod>(Some(&r.namespace)).delete(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["pods/status"],
        names: &[],
        verbs: &["update", "patch"],
        used_at: &[
            "edgecontroller/src/upstream/pods.rs: api::<Pod>(Some(&r.namespace)).replace_subresource(",
            "edgecontroller/src/upstream/pods.rs: self.patch_status::<Pod>(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["serviceaccounts/token"],
        names: &[],
        verbs: &["create"],
        used_at: &[
            "edgecontroller/src/upstream/queries.rs: api::<ServiceAccount>(Some(&r.namespace)).create_subresource(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["events"],
        names: &[],
        verbs: &["create", "update", "patch"],
        used_at: &[
            "edgecontroller/src/upstream/events.rs: api::<Event>(Some(&ns)).create(",
            "edgecontroller/src/upstream/events.rs: api::<Event>(Some(&ns)).replace(",
            "edgecontroller/src/upstream/events.rs: api::<Event>(Some(&namespace(&p.event))).patch(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "certificates.k8s.io",
        resources: &["certificatesigningrequests"],
        names: &[],
        verbs: &["get", "create"],
        used_at: &[
            "edgecontroller/src/upstream/csr.rs: api::<CertificateSigningRequest>(None).create(",
            "edgecontroller/src/upstream/queries.rs: api::<CertificateSigningRequest>(None)",
        ],
    },
];

/// What `cloudcore iptables-manager` calls: it follows the record and releases the entries of
/// deleted cloudcore pods in its namespace.
const IPTABLES_MANAGER_NEEDS: &[Need] = &[
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["configmaps"],
        names: &["tunnelport"],
        verbs: &["get", "list", "watch", "update"],
        used_at: &[
            "cloudstream/src/iptables/external.rs: negotiate::watch_record(",
            "cloudstream/src/iptables/external.rs: negotiate::release_deleted_cloudcores(",
            "cloudstream/src/negotiate.rs: fields(&format!(\"metadata.name={TUNNEL_PORT_CONFIGMAP}\"))",
            "cloudstream/src/negotiate.rs: api.replace(TUNNEL_PORT_CONFIGMAP, &PostParams::default(), &cm)",
        ],
    },
    Need {
        namespace: KUBEEDGE,
        group: "",
        resources: &["pods"],
        names: &[],
        verbs: &["list", "watch"],
        used_at: &[
            "cloudstream/src/negotiate.rs: let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["nodes"],
        names: &[],
        verbs: &["get"],
        used_at: &["cloudstream/src/negotiate.rs: nodes.get_opt(name)"],
    },
];

/// What `featureGates.requireAuthorization` adds (`manifests/optional/require-authorization.yaml`,
/// one ClusterRole): the CSR approver's watch and approval, the policycontroller's accesses and
/// watches.
const REQUIRE_AUTHORIZATION_NEEDS: &[Need] = &[
    Need {
        namespace: CLUSTER,
        group: "certificates.k8s.io",
        resources: &["certificatesigningrequests"],
        names: &[],
        // get: the start-up check asks it for the approver (the main role no longer grants it:
        // the edge's CSR reads are in rbac-edge-requests.yaml, which impersonation replaces).
        verbs: &["get", "list", "watch"],
        used_at: &[
            "csrapprover/src/approver.rs: let api: Api<CertificateSigningRequest> = Api::all(client);",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "certificates.k8s.io",
        resources: &["certificatesigningrequests/approval"],
        names: &[],
        verbs: &["update"],
        used_at: &["csrapprover/src/approver.rs: .replace_subresource(\"approval\""],
    },
    Need {
        namespace: CLUSTER,
        group: "certificates.k8s.io",
        resources: &["signers"],
        names: &["kubernetes.io/kubelet-serving"],
        verbs: &["approve"],
        used_at: &["csrapprover/src/rules.rs: pub const KUBELET_SERVING_SIGNER"],
    },
    Need {
        namespace: CLUSTER,
        group: "policy.kubeedge.io",
        resources: &["serviceaccountaccesses"],
        names: &[],
        verbs: &["get", "list", "watch", "create", "update", "delete"],
        used_at: &[
            "policycontroller/src/watches.rs: let mut accesses = all::<ServiceAccountAccess>(",
            "synccontroller/src/reconciler.rs: Some(ns) => Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &s.resource),",
            "policycontroller/src/reconcile.rs: api.create(&PostParams::default(), &saa)",
            "policycontroller/src/reconcile.rs: api.replace(name, &PostParams::default(), &current)",
            "policycontroller/src/reconcile.rs: api.delete(name, &DeleteParams::default())",
            "synccontroller/src/kinds.rs: group == policy::GROUP",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "policy.kubeedge.io",
        resources: &["serviceaccountaccesses/status"],
        names: &[],
        verbs: &["update"],
        used_at: &[
            "policycontroller/src/reconcile.rs: .replace_status(name, &PostParams::default(),",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "",
        resources: &["serviceaccounts"],
        names: &[],
        verbs: &["list", "watch"],
        used_at: &["policycontroller/src/watches.rs: let mut accounts = all::<ServiceAccount>("],
    },
    Need {
        namespace: CLUSTER,
        group: "rbac.authorization.k8s.io",
        resources: &[
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ],
        names: &[],
        verbs: &["list", "watch"],
        used_at: &[
            "policycontroller/src/watches.rs: let mut roles = all::<Role>(",
            "policycontroller/src/watches.rs: let mut cluster_roles = all::<ClusterRole>(",
            "policycontroller/src/watches.rs: let mut bindings = all::<RoleBinding>(",
            "policycontroller/src/watches.rs: let mut cluster_bindings = all::<ClusterRoleBinding>(",
        ],
    },
    Need {
        namespace: CLUSTER,
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        names: &["serviceaccountaccesses.policy.kubeedge.io"],
        verbs: &["get"],
        used_at: &["server/src/app.rs: crds.push(\"serviceaccountaccesses.policy.kubeedge.io\")"],
    },
];

/// One permission: (namespace of the role or empty, group, resource, resource names, verb).
type Grant = (String, String, String, Vec<String>, String);

fn grants_of(namespace: &str, rules: &[PolicyRule]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for r in rules {
        let mut names = r.resource_names.clone().unwrap_or_default();
        names.sort();
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((
                        namespace.into(),
                        g.clone(),
                        res.clone(),
                        names.clone(),
                        v.clone(),
                    ));
                }
            }
        }
    }
    out
}

fn needed_grants(needs: &[Need]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for n in needs {
        let mut names: Vec<String> = n.names.iter().map(|s| (*s).to_owned()).collect();
        names.sort();
        for res in n.resources {
            for v in n.verbs {
                let ns = n.namespace.unwrap_or_default();
                out.insert((
                    ns.into(),
                    n.group.into(),
                    (*res).into(),
                    names.clone(),
                    (*v).into(),
                ));
            }
        }
    }
    out
}

/// Compares what the ClusterRole and the Role named `name` grant (no Role when `with_role` is
/// false) with `needs`, both ways, and checks that every call the table cites is still in the
/// code.
fn assert_roles_are(name: &str, with_role: bool, needs: &[Need]) {
    let cluster: ClusterRole = object("ClusterRole", name);
    let mut granted = grants_of("", cluster.rules.as_deref().unwrap_or_default());
    if with_role {
        let role: Role = object("Role", name);
        assert_eq!(role.metadata.namespace.as_deref(), KUBEEDGE);
        granted.extend(grants_of(
            "kubeedge",
            role.rules.as_deref().unwrap_or_default(),
        ));
    }
    let needed = needed_grants(needs);
    let unused: Vec<_> = granted.difference(&needed).collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        unused.is_empty(),
        "{name}: granted but not used: {unused:#?}"
    );
    assert!(
        missing.is_empty(),
        "{name}: used but not granted: {missing:#?}"
    );
    // The calls are still where the table says: a table that no longer matches the code is
    // re-derived rather than trusted.
    for n in needs {
        for place in n.used_at {
            let (file, text) = place.split_once(": ").expect("\"file: text\"");
            // Sources are named from `modules/` (the composition is `server/`).
            let path = root().join("modules").join(file);
            let source = read(&path);
            assert!(
                source.contains(text),
                "{}/{:?}: {file} no longer contains {text:?}; re-derive the rule from the code",
                n.group,
                n.resources
            );
        }
    }
}

#[test]
fn every_cloudcore_rule_is_one_a_module_uses() {
    assert_roles_are("cloudcore", true, NEEDS);
    assert_roles_are("cloudcore-edge-requests", false, EDGE_NEEDS);
}

#[test]
fn every_iptables_manager_rule_is_one_it_uses() {
    assert_roles_are("iptables-manager", true, IPTABLES_MANAGER_NEEDS);
}

/// The ClusterRole of `manifests/optional/<file>`, and that its binding names cloudcore.
fn optional_cluster_role(file: &str) -> ClusterRole {
    let docs = documents(&read(&manifests().join("optional").join(file)));
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .expect("a ClusterRoleBinding")
        .clone();
    assert_eq!(binding["subjects"][0]["name"], "cloudcore", "{file}");
    let role = docs
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    assert_eq!(
        binding["roleRef"]["name"], role["metadata"]["name"],
        "{file}"
    );
    serde_json::from_value(role).expect("ClusterRole")
}

#[test]
fn every_require_authorization_rule_is_one_its_modules_use() {
    let role = optional_cluster_role("require-authorization.yaml");
    let granted = grants_of("", role.rules.as_deref().unwrap_or_default());
    let needed = needed_grants(REQUIRE_AUTHORIZATION_NEEDS);
    assert_eq!(
        granted.difference(&needed).collect::<Vec<_>>(),
        Vec::<&Grant>::new(),
        "granted but not used"
    );
    assert_eq!(
        needed.difference(&granted).collect::<Vec<_>>(),
        Vec::<&Grant>::new(),
        "used but not granted"
    );
    for n in REQUIRE_AUTHORIZATION_NEEDS {
        for place in n.used_at {
            let (file, text) = place.split_once(": ").expect("\"file: text\"");
            assert!(
                read(&root().join("modules").join(file)).contains(text),
                "{file} no longer contains {text:?}; re-derive the rule from the code"
            );
        }
    }
}

/// Whether `grants` allow `p` (a resource name in a grant limits it to that object).
fn covers(grants: &BTreeSet<Grant>, p: &cloudcore_server::permissions::Permission) -> bool {
    grants.iter().any(|(ns, group, resource, names, verb)| {
        (ns.is_empty() || ns == p.namespace)
            && group == p.group
            && resource == p.resource
            && verb == p.verb
            && (names.is_empty() || names.iter().any(|n| n == p.name))
    })
}

#[test]
fn the_main_and_optional_roles_grant_what_the_start_up_check_asks_with_the_gate_on() {
    let mut config = CloudCoreConfig::default();
    config
        .feature_gates
        .insert(cloudcore_server::config::REQUIRE_AUTHORIZATION.into(), true);
    let cluster: ClusterRole = object("ClusterRole", "cloudcore");
    let role: Role = object("Role", "cloudcore");
    let mut granted = grants_of("", cluster.rules.as_deref().unwrap_or_default());
    granted.extend(grants_of(
        "kubeedge",
        role.rules.as_deref().unwrap_or_default(),
    ));
    let optional = optional_cluster_role("require-authorization.yaml");
    granted.extend(grants_of("", optional.rules.as_deref().unwrap_or_default()));
    let missing: Vec<String> = cloudcore_server::permissions::required(&config)
        .iter()
        .filter(|p| !covers(&granted, p))
        .map(|p| p.to_string())
        .collect();
    assert!(missing.is_empty(), "not granted: {missing:#?}");
}

/// Asks the API server whether `user` may do `verb` on the resource (`resource/sub` for a
/// subresource) named `name` in `namespace`.
async fn allowed(
    client: &kube::Client,
    user: &str,
    namespace: &str,
    group: &str,
    resource: &str,
    name: &str,
    verb: &str,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let sa_namespace = user.split(':').nth(2).unwrap_or_default();
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                name: (!name.is_empty()).then(|| name.into()),
                verb: Some(verb.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// Asserts that `user` may do everything `needs` lists, by name where it names objects.
async fn assert_allowed(client: &kube::Client, user: &str, needs: &[Need]) {
    for n in needs {
        let namespaces: &[&str] = match n.namespace {
            Some(ns) => &[ns],
            // Cluster-wide: in kubeedge and elsewhere (cluster-scoped kinds ignore it).
            None => &["kubeedge", "default"],
        };
        let names: Vec<&str> = if n.names.is_empty() {
            vec![""]
        } else {
            n.names.to_vec()
        };
        for ns in namespaces {
            for res in n.resources {
                for name in &names {
                    for verb in n.verbs {
                        assert!(
                            allowed(client, user, ns, n.group, res, name, verb).await,
                            "{user} may not {verb} {}/{res} {name:?} in {ns:?}",
                            n.group
                        );
                    }
                }
            }
        }
    }
}

const CLOUDCORE_SA: &str = "system:serviceaccount:kubeedge:cloudcore";
const IPTABLES_SA: &str = "system:serviceaccount:kubeedge:iptables-manager";

#[tokio::test]
async fn the_api_server_accepts_the_manifests_and_grants_exactly_what_is_needed() {
    test_tiers::require!(ApiServer);
    // A server-side dry run creates nothing, so objects in the namespace need it to exist.
    let namespace_file = manifests().join("namespace.yaml");
    kubectl(&["apply", "-f", namespace_file.to_str().unwrap()]);
    let dir = manifests();
    kubectl(&["apply", "--dry-run=server", "-k", dir.to_str().unwrap()]);
    let file = manifests().join("cloudcore.yaml");
    kubectl(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
    for file in ["impersonation.yaml", "require-authorization.yaml"] {
        let optional = manifests().join("optional").join(file);
        kubectl(&[
            "apply",
            "--dry-run=server",
            "-f",
            optional.to_str().unwrap(),
        ]);
    }

    // Installed for real (no controllers run here, so nothing starts), the roles grant what
    // the table lists, by name where it names objects, and nothing around it.
    kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let client = k8s_testenv::client().await;
    // The RBAC authorizer learns of new roles and bindings from its informers: wait until it
    // has seen both kinds for both accounts before asking questions whose answer is "no".
    for (user, namespace, resource, name, verb) in [
        (CLOUDCORE_SA, "", "nodes", "", "watch"),
        (CLOUDCORE_SA, "kubeedge", "secrets", "tokensecret", "patch"),
        (IPTABLES_SA, "", "nodes", "n1", "get"),
        (IPTABLES_SA, "kubeedge", "configmaps", "tunnelport", "get"),
    ] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !allowed(&client, user, namespace, "", resource, name, verb).await {
            assert!(
                Instant::now() < deadline,
                "{user} still may not {verb} {resource} {name:?} 30 s after the apply"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_allowed(&client, CLOUDCORE_SA, NEEDS).await;
    assert_allowed(&client, CLOUDCORE_SA, EDGE_NEEDS).await;
    // What RBAC cannot name, the admission policy does: cloudcore writes only the ConfigMaps
    // and Secrets it owns in kubeedge (the policy's CEL is compiled by the API server, so
    // wait for it to take effect).
    let as_cloudcore = |args: &[&str]| {
        let mut cmd = k8s_testenv::env().kubectl();
        cmd.args(["--as", CLOUDCORE_SA, "-n", "kubeedge"])
            .args(args);
        cmd.current_dir(root()).output().expect("run kubectl")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = as_cloudcore(&["create", "configmap", "cloudcore-pwned"]);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("cloudcore may write only its own configmaps"),
                "{err}"
            );
            break;
        }
        kubectl(&["-n", "kubeedge", "delete", "configmap", "cloudcore-pwned"]);
        assert!(
            Instant::now() < deadline,
            "the admission policy did not take effect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for args in [
        &[
            "patch",
            "configmap",
            "cloudcore",
            "--type=merge",
            "-p",
            r#"{"data":{"x":"y"}}"#,
        ][..],
        &["delete", "configmap", "cloudcore"],
        &["create", "secret", "generic", "pwned"],
    ] {
        let out = as_cloudcore(args);
        assert!(!out.status.success(), "{args:?} as cloudcore was admitted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cloudcore may write only its own"),
            "{args:?}: {err}"
        );
    }
    let name = format!("dynamiccontroller.policy-{}", std::process::id());
    let out = as_cloudcore(&["create", "configmap", &name]);
    assert!(
        out.status.success(),
        "a per-node record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_cloudcore(&["delete", "configmap", &name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (ns, group, resource, name, verb) in [
        ("default", "", "secrets", "", "create"),
        ("kubeedge", "", "secrets", "casecret", "patch"),
        ("kubeedge", "", "secrets", "casecret", "update"),
        ("kubeedge", "", "secrets", "tokensecret", "delete"),
        ("kubeedge", "", "secrets", "tokensecret", "update"),
        ("default", "", "configmaps", "", "create"),
        ("kubeedge", "", "configmaps", "cloudcore", "update"),
        ("kubeedge", "", "configmaps", "", "deletecollection"),
        ("", "", "nodes", "n1", "delete"),
        ("", "", "nodes", "n1", "update"),
        ("", "", "namespaces", "kubeedge", "delete"),
        ("default", "", "pods", "p", "update"),
        ("default", "", "services", "", "create"),
        ("default", "", "endpoints", "", "update"),
        (
            "kube-node-lease",
            "coordination.k8s.io",
            "leases",
            "",
            "list",
        ),
        (
            "kube-node-lease",
            "coordination.k8s.io",
            "leases",
            "n1",
            "delete",
        ),
        (
            "",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "x.example.com",
            "get",
        ),
        (
            "",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "create",
        ),
        ("", "", "users", "system:node:n1", "impersonate"),
        (
            "",
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            "escalate",
        ),
        ("default", "devices.kubeedge.io", "devices", "d", "update"),
    ] {
        assert!(
            !allowed(&client, CLOUDCORE_SA, ns, group, resource, name, verb).await,
            "cloudcore may {verb} {group}/{resource} {name:?} in {ns:?}, which no module does"
        );
    }
    // The iptables-manager: its table, and nothing around it.
    assert_allowed(&client, IPTABLES_SA, IPTABLES_MANAGER_NEEDS).await;
    for (ns, resource, name, verb) in [
        ("kubeedge", "configmaps", "cloudcore", "get"),
        ("kubeedge", "configmaps", "tunnelport", "delete"),
        ("kubeedge", "configmaps", "", "list"),
        ("kubeedge", "secrets", "", "list"),
        ("default", "pods", "", "list"),
        ("", "nodes", "", "list"),
        ("", "nodes", "n1", "patch"),
    ] {
        assert!(
            !allowed(&client, IPTABLES_SA, ns, "", resource, name, verb).await,
            "iptables-manager may {verb} {resource} {name:?} in {ns:?}"
        );
    }
}

/// Replicas are active-active, so upgrades roll with a new pod serving before an old one stops,
/// and a node drain evicts one cloudcore pod at a time without a single replica blocking it.
#[test]
fn upgrades_roll_and_drains_take_one_pod_at_a_time() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let deploy: Deployment = object("Deployment", "cloudcore");
    let strategy = deploy.spec.strategy.expect("a strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.expect("rollingUpdate");
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));

    let pdb: PodDisruptionBudget = object("PodDisruptionBudget", "cloudcore");
    let spec = pdb.spec.expect("spec");
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        spec.min_available, None,
        "minAvailable would block draining one replica"
    );
    let pod_labels = deploy.spec.template.metadata.unwrap().labels.unwrap();
    let selector = spec.selector.unwrap().match_labels.unwrap();
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the budget selects the cloudcore pods"
    );
}
