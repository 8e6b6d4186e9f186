//! The cloudcore configuration file: KubeEdge's `CloudCore` (`cloudcore.config.kubeedge.io`)
//! with the same keys and defaults, loaded strictly.
//!
//! Every module crate owns its `modules.<name>` section; this file composes them. Loading
//! rejects unknown keys and invalid values with the path of the offending field, e.g.
//! `modules.cloudHub.websocket.port: invalid u16 at line 3, column 13`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The API versions accepted in `apiVersion` (KubeEdge writes `v1alpha2`; `v1alpha1` files are
/// still common).
pub const API_VERSIONS: [&str; 2] = [
    "cloudcore.config.kubeedge.io/v1alpha2",
    "cloudcore.config.kubeedge.io/v1alpha1",
];

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Keys that cloudcore does not know (listed by path).
    #[error("unknown field{}: {}", if .0.len() == 1 { "" } else { "s" }, .0.join(", "))]
    UnknownFields(Vec<String>),
    /// A value of the wrong type or shape, or one that fails validation.
    #[error("{field}: {message}")]
    Invalid {
        /// Path of the field (`modules.cloudHub.nodeLimit`), or empty for the whole file.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// `kubeAPIConfig`: how to reach the Kubernetes API server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KubeApiConfig {
    /// API server URL; overrides the kubeconfig's server when set.
    pub master: String,
    /// Content type of requests (KubeEdge default protobuf; this client always speaks JSON).
    pub content_type: String,
    /// Client QPS (KubeEdge forces 5 × `nodeLimit` at start).
    pub qps: f32,
    /// Client burst (KubeEdge forces 10 × `nodeLimit` at start).
    pub burst: i32,
    /// Path of the kubeconfig; empty = in-cluster configuration or `$KUBECONFIG`.
    pub kube_config: String,
}

impl Default for KubeApiConfig {
    fn default() -> Self {
        KubeApiConfig {
            master: String::new(),
            content_type: "application/vnd.kubernetes.protobuf".into(),
            qps: 100.0,
            burst: 200,
            kube_config: "/root/.kube/config".into(),
        }
    }
}

/// `commonConfig.monitorServer`: where `/healthz`, `/readyz`, `/metrics` and `/debug` are
/// served, and who may read the last two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MonitorServer {
    /// `host:port` (default `127.0.0.1:9091`). `/debug` answers only callers on loopback,
    /// whatever the address.
    pub bind_address: String,
    /// Accepted for compatibility; no profiler is served.
    pub enable_profiling: bool,
    /// Rust addition: who may read `/metrics` and `/debug`.
    pub authorization: MonitorAuthorization,
}

impl Default for MonitorServer {
    fn default() -> Self {
        MonitorServer {
            bind_address: "127.0.0.1:9091".into(),
            enable_profiling: false,
            authorization: MonitorAuthorization::default(),
        }
    }
}

/// `commonConfig.monitorServer.authorization` (a Rust addition): how callers of `/metrics`
/// and `/debug` are authorized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MonitorAuthorization {
    /// `Webhook` or `AlwaysAllow`. Unset: `Webhook` when cloudcore has a Kubernetes client,
    /// else `AlwaysAllow` (there is no API server to ask; keep the bind address on loopback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<MonitorAuthorizationMode>,
    /// How long an allowed answer is reused, in seconds (default 300).
    #[serde(rename = "cacheAuthorizedTTLSeconds")]
    pub cache_authorized_ttl_seconds: u64,
    /// How long a denied answer is reused, in seconds (default 30).
    #[serde(rename = "cacheUnauthorizedTTLSeconds")]
    pub cache_unauthorized_ttl_seconds: u64,
}

impl Default for MonitorAuthorization {
    fn default() -> Self {
        MonitorAuthorization {
            mode: None,
            cache_authorized_ttl_seconds: 300,
            cache_unauthorized_ttl_seconds: 30,
        }
    }
}

/// The authorization modes of [`MonitorAuthorization`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MonitorAuthorizationMode {
    /// TokenReview, then SubjectAccessReview on the path.
    Webhook,
    /// Anyone who reaches the port may read everything (what KubeEdge's monitor server does).
    AlwaysAllow,
}

/// `commonConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CommonConfig {
    /// The kubelet port advertised for edge nodes (cloudstream's negotiated port replaces it).
    pub tunnel_port: u32,
    /// The operations server.
    pub monitor_server: MonitorServer,
}

impl Default for CommonConfig {
    fn default() -> Self {
        CommonConfig {
            tunnel_port: 10350,
            monitor_server: MonitorServer::default(),
        }
    }
}

/// Leader election through a `coordination.k8s.io/v1` Lease (Rust addition: two replicas can
/// run with one active). Field names follow Kubernetes' `LeaderElectionConfiguration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Run only while holding the Lease (default false: always active).
    pub leader_elect: bool,
    /// Seconds a Lease is valid after its last renewal (default 15).
    pub lease_duration: u32,
    /// Seconds within which the holder must renew, or it steps down (default 10).
    pub renew_deadline: u32,
    /// Seconds between attempts (default 2).
    pub retry_period: u32,
    /// Lease name (default `cloudcore`).
    pub resource_name: String,
    /// Lease namespace (default `kubeedge`).
    pub resource_namespace: String,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            leader_elect: false,
            lease_duration: 15,
            renew_deadline: 10,
            retry_period: 2,
            resource_name: "cloudcore".into(),
            resource_namespace: "kubeedge".into(),
        }
    }
}

/// `replicas` (Rust addition): how this replica tells itself apart when several replicas serve
/// the edge together behind one load balancer (see docs/operations.md, "Running several replicas").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ReplicasConfig {
    /// This replica's own IP address: the value of the `cloudcore` annotation on the nodes it
    /// holds, the key of its port in the `tunnelport` record, and where every replica's
    /// iptables rules send `kubectl logs/exec` traffic for its nodes (its stream server must
    /// be reachable there). Empty: `$POD_IP` when set (the Deployment sets it from the pod's
    /// IP), else `modules.cloudHub.advertiseAddress[0]`.
    pub address: String,
}

/// KubeEdge's feature gate for authorization on the edge (`featureGates.requireAuthorization`):
/// the edge metaServer serves HTTPS with a certificate the CSR approver approves, and decides
/// requests with the ServiceAccountAccesses the policycontroller sends.
pub const REQUIRE_AUTHORIZATION: &str = "requireAuthorization";

/// The environment variable naming this replica's address when `replicas.address` is empty.
pub const POD_IP_ENV: &str = "POD_IP";

/// A KubeEdge module this cloudcore does not implement. Its section is accepted with any keys
/// so existing files load, but enabling it is an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UnsupportedModule {
    /// Must stay `false`.
    pub enable: bool,
    /// The module's other keys, kept as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

// Read key by key rather than through `#[serde(flatten)]`: the YAML parser mis-reads an
// anchored mapping that Serde buffers for a flattened field, and a visitor of our own keeps
// `enable` errors at their path (`modules.router.enable`).
impl<'de> Deserialize<'de> for UnsupportedModule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = UnsupportedModule;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a module section")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<UnsupportedModule, A::Error> {
                let mut module = UnsupportedModule::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "enable" {
                        module.enable = map.next_value()?;
                    } else {
                        module.other.insert(key, map.next_value()?);
                    }
                }
                Ok(module)
            }
        }
        d.deserialize_map(Keys)
    }
}

/// `modules`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Modules {
    /// The hub edge nodes connect to.
    pub cloud_hub: cloudhub::CloudHubConfig,
    /// Pods, nodes, configmaps, secrets.
    pub edge_controller: edgecontroller::EdgeControllerConfig,
    /// Devices.
    pub device_controller: devicecontroller::DeviceControllerConfig,
    /// ObjectSync reconciliation.
    pub sync_controller: synccontroller::SyncControllerConfig,
    /// `kubectl logs/exec/attach` tunnel.
    pub cloud_stream: cloudstream::CloudStreamConfig,
    /// DNAT of the kubelet port to the stream server.
    pub iptables_manager: cloudstream::IptablesManagerConfig,
    /// Rules connecting cloud REST calls with edge MQTT topics and HTTP services.
    pub router: router::RouterConfig,
    /// The edge metaServer's list, get, write and watch requests.
    pub dynamic_controller: dynamiccontroller::DynamicControllerConfig,
    /// Node jobs: NodeUpgradeJob, ImagePrePullJob, ConfigUpdateJob (and their controller).
    pub task_manager: taskmanager::TaskManagerConfig,
    /// Not implemented.
    pub node_upgrade_job_controller: UnsupportedModule,
    /// KubeEdge has no such section: its policycontroller runs with
    /// `featureGates.requireAuthorization`, as here. Accepted; enabling it is an error.
    pub policy_controller: UnsupportedModule,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CloudCoreConfig {
    /// `cloudcore.config.kubeedge.io/v1alpha2` (or `v1alpha1`).
    pub api_version: String,
    /// `CloudCore`.
    pub kind: String,
    /// The Kubernetes API server.
    #[serde(rename = "kubeAPIConfig")]
    pub kube_api_config: KubeApiConfig,
    /// Settings shared by modules.
    pub common_config: CommonConfig,
    /// Feature gates: [`REQUIRE_AUTHORIZATION`] starts the CSR approver; others are accepted
    /// and change nothing.
    pub feature_gates: BTreeMap<String, bool>,
    /// Leader election (Rust addition).
    pub leader_election: LeaderElectionConfig,
    /// This replica among several (Rust addition).
    pub replicas: ReplicasConfig,
    /// One section per module.
    pub modules: Modules,
}

impl Default for CloudCoreConfig {
    fn default() -> Self {
        let mut modules = Modules::default();
        modules.cloud_hub.advertise_address = vec![default_advertise_address()];
        CloudCoreConfig {
            api_version: API_VERSIONS[0].into(),
            kind: "CloudCore".into(),
            kube_api_config: KubeApiConfig::default(),
            common_config: CommonConfig::default(),
            feature_gates: BTreeMap::new(),
            leader_election: LeaderElectionConfig::default(),
            replicas: ReplicasConfig::default(),
            modules,
        }
    }
}

/// The host's address as KubeEdge picks `advertiseAddress`: the first non-loopback IPv4 the
/// hostname resolves to, else `127.0.0.1`.
pub fn default_advertise_address() -> String {
    use std::net::ToSocketAddrs;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    (host.trim(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.find(|a| a.is_ipv4() && !a.ip().is_loopback()))
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// Largest configuration file [`CloudCoreConfig::load`] reads: the parser holds every event of
/// the document (hundreds of bytes per input byte at worst), and a real file is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

impl CloudCoreConfig {
    /// Reads and validates a file of at most [`MAX_CONFIG_BYTES`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        use std::io::Read;
        let read_error = |source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read_error)?
            .take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_error)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(invalid(
                "",
                format!("the file is larger than {MAX_CONFIG_BYTES} bytes"),
            ));
        }
        Self::from_yaml(&text)
    }

    /// Parses and validates YAML; rejects unknown keys and invalid values by path.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let options = serde_saphyr::options! {
            // Messages name the field by path; a source snippet would only repeat the file.
            with_snippet: false,
            // `key:` into a string is the empty string, as KubeEdge and serde_yaml read it.
            null_as_string: true,
            alias_limits: serde_saphyr::alias_limits! {
                max_total_replayed_events: node_budget(text.len()),
            },
            // What the parser keeps to replay anchors, likewise.
            budget: serde_saphyr::budget! {
                max_recorded_anchor_events: node_budget(text.len()),
            },
        };
        // Expansion is refused before anything is built: a first pass keeps nothing. Its other
        // errors are left to the typed parse, which names their field.
        let walked =
            serde_saphyr::from_str_with_options::<serde::de::IgnoredAny>(text, options.clone());
        if walked.as_ref().is_err_and(replay_limit_exceeded) {
            return Err(expands_too_far(text.len()));
        }
        let mut unknown = Vec::new();
        let mut field = String::new();
        let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
            let mut track = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
            let tracked = serde_ignored::Deserializer::new(de, &mut track);
            serde_path_to_error::deserialize(tracked).map_err(|e| {
                field = e.path().to_string();
                e.into_inner()
            })
        });
        let config: CloudCoreConfig = parsed.map_err(|e| {
            if replay_limit_exceeded(&e) {
                return expands_too_far(text.len());
            }
            // `.` is the whole file, `?` a key that could not be named (a duplicate).
            let field = if field == "." || field == "?" {
                String::new()
            } else {
                field
            };
            invalid(&field, e.to_string())
        })?;
        if !unknown.is_empty() {
            return Err(ConfigError::UnknownFields(unknown));
        }
        config.validate()?;
        Ok(config)
    }

    /// True when `featureGates.requireAuthorization` is set (KubeEdge's default: off).
    pub fn require_authorization(&self) -> bool {
        self.feature_gates
            .get(REQUIRE_AUTHORIZATION)
            .copied()
            .unwrap_or(false)
    }

    /// This replica's address: `replicas.address`, else `$POD_IP`, else
    /// `modules.cloudHub.advertiseAddress[0]` (empty when none is set).
    pub fn replica_address(&self) -> String {
        let env = std::env::var(POD_IP_ENV).unwrap_or_default();
        [self.replicas.address.trim(), env.trim()]
            .into_iter()
            .find(|a| !a.is_empty())
            .map(str::to_owned)
            .or_else(|| self.modules.cloud_hub.advertise_address.first().cloned())
            .unwrap_or_default()
    }

    /// The values KubeEdge refuses, and the ones this cloudcore cannot honour.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let address = self.replicas.address.trim();
        if !address.is_empty() && address.parse::<std::net::IpAddr>().is_err() {
            return Err(invalid(
                "replicas.address",
                format!("{address:?} is not an IP address"),
            ));
        }
        if !self.api_version.is_empty() && !API_VERSIONS.contains(&self.api_version.as_str()) {
            return Err(invalid(
                "apiVersion",
                format!("must be one of {API_VERSIONS:?}"),
            ));
        }
        if !self.kind.is_empty() && self.kind != "CloudCore" {
            return Err(invalid("kind", "must be CloudCore"));
        }
        let m = &self.modules;
        if m.cloud_hub.enable {
            m.cloud_hub
                .validate()
                .map_err(|e| invalid("modules.cloudHub", e))?;
        }
        if m.cloud_hub.node_limit == 0 {
            return Err(invalid("modules.cloudHub.nodeLimit", "must be > 0"));
        }
        for (field, port) in [
            (
                "modules.cloudHub.websocket.port",
                u64::from(m.cloud_hub.websocket.port),
            ),
            (
                "modules.cloudHub.https.port",
                u64::from(m.cloud_hub.https.port),
            ),
            (
                "modules.cloudStream.tunnelPort",
                u64::from(m.cloud_stream.tunnel_port),
            ),
            (
                "modules.cloudStream.streamPort",
                u64::from(m.cloud_stream.stream_port),
            ),
        ] {
            if port > u64::from(u16::MAX) {
                return Err(invalid(field, format!("{port} is not a TCP port")));
            }
        }
        if m.cloud_stream.enable && m.cloud_stream.tunnel_port == m.cloud_stream.stream_port {
            return Err(invalid(
                "modules.cloudStream.streamPort",
                "must differ from tunnelPort",
            ));
        }
        if self
            .common_config
            .monitor_server
            .bind_address
            .parse::<std::net::SocketAddr>()
            .is_err()
        {
            return Err(invalid(
                "commonConfig.monitorServer.bindAddress",
                format!(
                    "{:?} is not host:port",
                    self.common_config.monitor_server.bind_address
                ),
            ));
        }
        if self.kube_api_config.qps <= 0.0 {
            return Err(invalid("kubeAPIConfig.qps", "must be > 0"));
        }
        let le = &self.leader_election;
        if le.leader_elect
            && !(le.retry_period < le.renew_deadline && le.renew_deadline < le.lease_duration)
        {
            return Err(invalid(
                "leaderElection",
                "needs retryPeriod < renewDeadline < leaseDuration",
            ));
        }
        if m.router.enable {
            m.router
                .validate()
                .map_err(|e| invalid("modules.router", e))?;
            if !m.edge_controller.enable {
                return Err(invalid(
                    "modules.router.enable",
                    "the router learns its rules from modules.edgeController, which is disabled",
                ));
            }
        }
        for (field, module) in [(
            "modules.nodeUpgradeJobController.enable",
            &m.node_upgrade_job_controller,
        )] {
            if module.enable {
                return Err(invalid(
                    field,
                    "this module is not available in this cloudcore",
                ));
            }
        }
        if m.policy_controller.enable {
            return Err(invalid(
                "modules.policyController.enable",
                "the policycontroller runs with featureGates.requireAuthorization (KubeEdge has no modules.policyController)",
            ));
        }
        Ok(())
    }

    /// Settings that load but change nothing here, by path, each listed only when it differs
    /// from its default. Logged once at startup so an operator is not misled.
    pub fn ignored_settings(&self) -> Vec<&'static str> {
        let d = CloudCoreConfig::default();
        let (m, dm) = (&self.modules, &d.modules);
        let (hub, dhub) = (&m.cloud_hub, &dm.cloud_hub);
        let (ec, dec) = (&m.edge_controller.buffer, &dm.edge_controller.buffer);
        let (dc, ddc) = (&m.device_controller.buffer, &dm.device_controller.buffer);
        let (tm, dtm) = (&m.task_manager, &dm.task_manager);
        let k = &self.kube_api_config;
        let checks: [(&'static str, bool); 18] = [
            (
                "featureGates",
                self.feature_gates
                    .keys()
                    .any(|g| g != REQUIRE_AUTHORIZATION),
            ),
            (
                "kubeAPIConfig.contentType",
                k.content_type != d.kube_api_config.content_type,
            ),
            ("kubeAPIConfig.qps", k.qps != d.kube_api_config.qps),
            ("kubeAPIConfig.burst", k.burst != d.kube_api_config.burst),
            (
                "commonConfig.tunnelPort",
                self.common_config.tunnel_port != d.common_config.tunnel_port,
            ),
            (
                "commonConfig.monitorServer.enableProfiling",
                self.common_config.monitor_server.enable_profiling,
            ),
            ("modules.cloudHub.quic", hub.quic != dhub.quic),
            (
                "modules.cloudHub.authorization.modes",
                hub.authorization.modes != dhub.authorization.modes,
            ),
            (
                "modules.edgeController.buffer.podEvent",
                ec.pod_event != dec.pod_event,
            ),
            (
                "modules.edgeController.buffer.configMapEvent",
                ec.config_map_event != dec.config_map_event,
            ),
            (
                "modules.edgeController.buffer.secretEvent",
                ec.secret_event != dec.secret_event,
            ),
            (
                "modules.edgeController.buffer.rulesEvent",
                ec.rules_event != dec.rules_event,
            ),
            (
                "modules.edgeController.buffer.ruleEndpointsEvent",
                ec.rule_endpoints_event != dec.rule_endpoints_event,
            ),
            (
                "modules.deviceController.buffer.deviceEvent",
                dc.device_event != ddc.device_event,
            ),
            (
                "modules.deviceController.buffer.deviceModelEvent",
                dc.device_model_event != ddc.device_model_event,
            ),
            (
                "modules.deviceController.buffer.deviceStatusEvent",
                dc.device_status_event != ddc.device_status_event,
            ),
            (
                "modules.taskManager.buffer.taskEvent",
                tm.buffer.task_event != dtm.buffer.task_event,
            ),
            (
                "modules.taskManager.load.taskWorkers",
                tm.load.task_workers != dtm.load.task_workers,
            ),
        ];
        checks
            .into_iter()
            .filter_map(|(field, set)| set.then_some(field))
            .collect()
    }

    /// Refuses a certificate file given without its key file, or the reverse, naming the
    /// settings; called at startup, since whether a file is "given" is whether it exists.
    /// Pairs where neither exists fall back (generated material, or cloudhub's for the
    /// tunnel).
    pub fn check_tls_pairs(&self) -> Result<(), ConfigError> {
        let m = &self.modules;
        let exists = |p: &Path| !p.as_os_str().is_empty() && p.exists();
        let mut pairs: Vec<(&str, &Path, &str, &Path)> = Vec::new();
        if m.cloud_hub.enable {
            let h = &m.cloud_hub;
            pairs.push((
                "modules.cloudHub.tlsCAFile",
                &h.tls_ca_file,
                "modules.cloudHub.tlsCAKeyFile",
                &h.tls_ca_key_file,
            ));
            pairs.push((
                "modules.cloudHub.tlsCertFile",
                &h.tls_cert_file,
                "modules.cloudHub.tlsPrivateKeyFile",
                &h.tls_private_key_file,
            ));
        }
        if m.cloud_stream.enable {
            let s = &m.cloud_stream;
            pairs.push((
                "modules.cloudStream.tlsTunnelCertFile",
                Path::new(&s.tls_tunnel_cert_file),
                "modules.cloudStream.tlsTunnelPrivateKeyFile",
                Path::new(&s.tls_tunnel_private_key_file),
            ));
            pairs.push((
                "modules.cloudStream.tlsStreamCertFile",
                Path::new(&s.tls_stream_cert_file),
                "modules.cloudStream.tlsStreamPrivateKeyFile",
                Path::new(&s.tls_stream_private_key_file),
            ));
        }
        for (cert_field, cert, key_field, key) in pairs {
            match (exists(cert), exists(key)) {
                (true, false) => {
                    return Err(invalid(
                        key_field,
                        format!(
                            "{} does not exist but {cert_field} {} does: give both or neither",
                            key.display(),
                            cert.display()
                        ),
                    ));
                }
                (false, true) => {
                    return Err(invalid(
                        cert_field,
                        format!(
                            "{} does not exist but {key_field} {} does: give both or neither",
                            cert.display(),
                            key.display()
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// True when a module that needs Kubernetes is enabled.
    pub fn needs_kubernetes(&self) -> bool {
        let m = &self.modules;
        m.edge_controller.enable
            || m.device_controller.enable
            || m.sync_controller.enable
            || m.dynamic_controller.enable
            || m.task_manager.enable
            || m.router.enable
            || self.require_authorization()
    }

    /// The enabled modules by their configuration names (`cloudHub`, `edgeController`, …), in
    /// the order they start.
    pub fn enabled_modules(&self) -> Vec<&'static str> {
        let m = &self.modules;
        [
            ("cloudHub", m.cloud_hub.enable),
            ("edgeController", m.edge_controller.enable),
            ("deviceController", m.device_controller.enable),
            ("syncController", m.sync_controller.enable),
            ("dynamicController", m.dynamic_controller.enable),
            ("cloudStream", m.cloud_stream.enable),
            (
                "iptablesManager",
                m.cloud_stream.enable && m.iptables_manager.enable,
            ),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }

    /// The full default configuration as YAML (`--defaultconfig`).
    pub fn default_yaml() -> String {
        serde_saphyr::to_string(&CloudCoreConfig::default()).unwrap_or_default()
    }

    /// A minimal configuration as YAML (`--minconfig`): what an operator usually sets.
    pub fn min_yaml() -> String {
        format!(
            "apiVersion: {}\nkind: CloudCore\nkubeAPIConfig:\n  kubeConfig: /root/.kube/config\nmodules:\n  cloudHub:\n    advertiseAddress:\n    - {}\n    nodeLimit: 1000\n  cloudStream:\n    enable: false\n",
            API_VERSIONS[0],
            default_advertise_address()
        )
    }
}

/// Most nodes a file of `len` bytes may expand to. Without aliases every node takes at least
/// one byte; aliases repeat the node they name, so a file of a few kilobytes could expand to
/// millions of nodes (memory grows with the square of the file). Legitimate anchors repeat a
/// few settings, far below this. The parser enforces it on the events it replays for aliases
/// and on those it keeps to replay them.
fn node_budget(len: usize) -> usize {
    len.saturating_mul(4).saturating_add(1024)
}

fn expands_too_far(len: usize) -> ConfigError {
    invalid(
        "",
        format!(
            "the document expands to more than {} nodes (YAML aliases repeat what they name)",
            node_budget(len)
        ),
    )
}

/// True when parsing stopped at the alias replay limit or the limit on events kept for
/// anchors (the error may be wrapped in the location of the alias that hit it).
fn replay_limit_exceeded(mut e: &serde_saphyr::Error) -> bool {
    use serde_saphyr::budget::BudgetBreach;
    loop {
        match e {
            serde_saphyr::Error::AliasReplayLimitExceeded { .. }
            | serde_saphyr::Error::Budget {
                breach: BudgetBreach::RecordedAnchorEvents { .. },
                ..
            } => return true,
            serde_saphyr::Error::AliasError { error, .. }
            | serde_saphyr::Error::WithSnippet { error, .. } => e = error,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `k` scalars under an anchor and `k` aliases of it: about `k * k` nodes.
    fn alias_square(k: usize) -> String {
        format!(
            "modules:\n  nodeUpgradeJobController:\n    a: &a [{}]\n    b: [{}]\n",
            "x,".repeat(k),
            "*a,".repeat(k)
        )
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_without_parsing() {
        let dir = std::env::temp_dir().join(format!("cloudcore-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.yaml");
        let mut text = "# padding\n".repeat((MAX_CONFIG_BYTES / 10) as usize + 1);
        std::fs::write(&path, &text).unwrap();
        let err = CloudCoreConfig::load(&path).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
        text.truncate(MAX_CONFIG_BYTES as usize - 100);
        std::fs::write(&path, &text).unwrap();
        assert!(
            CloudCoreConfig::load(&path).is_ok(),
            "a comment-only file at the limit loads"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn alias_expansion_is_refused_before_anything_is_built() {
        // 15 KB that would expand to 9 million nodes (over a gigabyte before this check).
        let err = CloudCoreConfig::from_yaml(&alias_square(3000)).unwrap_err();
        assert!(err.to_string().contains("expands to more than"), "{err}");
        // Anchors that repeat a few settings still load.
        let text = format!(
            "{}\n  nodeUpgradeJobController:\n    a: &a {{x: 1, y: [1, 2]}}\n    b: *a\n    c: [*a, *a]\n",
            CloudCoreConfig::min_yaml().trim_end()
        );
        assert!(text.contains("modules:"), "{text}");
        let config = CloudCoreConfig::from_yaml(&text).unwrap();
        assert_eq!(config.modules.node_upgrade_job_controller.other.len(), 3);
        // Other errors keep naming their field.
        let err = CloudCoreConfig::from_yaml("modules:\n  cloudHub:\n    nodeLimit: x\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("modules.cloudHub.nodeLimit"), "{err}");
    }

    #[test]
    fn the_default_config_round_trips_and_validates() {
        let text = CloudCoreConfig::default_yaml();
        let parsed = CloudCoreConfig::from_yaml(&text).unwrap();
        assert_eq!(parsed, CloudCoreConfig::default());
        assert!(text.contains("kubeAPIConfig:"));
        for key in [
            "cloudHub:",
            "edgeController:",
            "cloudStream:",
            "syncController:",
            "deviceController:",
        ] {
            assert!(text.contains(key), "{key} missing from the default config");
        }
    }

    #[test]
    fn the_min_config_loads() {
        let c = CloudCoreConfig::from_yaml(&CloudCoreConfig::min_yaml()).unwrap();
        assert_eq!(c.modules.cloud_hub.node_limit, 1000);
        assert_eq!(
            c.modules.cloud_hub.keepalive_interval, 30,
            "defaults fill the rest"
        );
    }

    #[test]
    fn a_blank_string_value_is_the_empty_string() {
        let c = CloudCoreConfig::from_yaml(
            "kubeAPIConfig:\n  master:\n  kubeConfig:\nmodules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n",
        )
        .unwrap();
        assert_eq!(c.kube_api_config.master, "");
        assert_eq!(c.kube_api_config.kube_config, "");
    }

    #[test]
    fn defaults_equal_kubeedge_defaults() {
        let c = CloudCoreConfig::default();
        assert_eq!(c.modules.cloud_hub.websocket.port, 10000);
        assert_eq!(c.modules.cloud_hub.https.port, 10002);
        assert_eq!(c.modules.cloud_hub.node_limit, 500);
        assert_eq!(c.modules.cloud_stream.tunnel_port, 10004);
        assert_eq!(c.modules.cloud_stream.stream_port, 10003);
        assert!(!c.modules.cloud_stream.enable);
        assert!(c.modules.edge_controller.enable && c.modules.sync_controller.enable);
        assert_eq!(
            c.common_config.monitor_server.bind_address,
            "127.0.0.1:9091"
        );
        assert_eq!(c.common_config.tunnel_port, 10350);
    }

    #[test]
    fn unknown_fields_are_rejected_by_path() {
        let err = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub:\n    advertiseAddress: [1.2.3.4]\n    nodeLimt: 3\n",
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "unknown field: modules.cloudHub.nodeLimt");
        let err = CloudCoreConfig::from_yaml(
            "colour: blue\nmodules: {cloudHub: {advertiseAddress: [1.2.3.4]}}\n",
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "unknown field: colour");
    }

    #[test]
    fn invalid_values_name_the_field() {
        let err =
            CloudCoreConfig::from_yaml("modules:\n  cloudHub:\n    websocket:\n      port: many\n")
                .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("modules.cloudHub.websocket.port: "),
            "{err}"
        );
        let err = CloudCoreConfig::from_yaml("modules:\n  cloudHub:\n    advertiseAddress: []\n")
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("modules.cloudHub: advertiseAddress"),
            "{err}"
        );
        let err = CloudCoreConfig::from_yaml("modules:\n  cloudHub:\n    advertiseAddress: [1.2.3.4]\n    websocket: {port: 70000}\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("modules.cloudHub.websocket.port: invalid u16 at line 4"),
            "{err}"
        );
        let err = CloudCoreConfig::from_yaml("modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  cloudStream: {tunnelPort: 70000}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "modules.cloudStream.tunnelPort: 70000 is not a TCP port"
        );
        let err = CloudCoreConfig::from_yaml("apiVersion: v1\n").unwrap_err();
        assert!(err.to_string().starts_with("apiVersion: "), "{err}");
    }

    #[test]
    fn ignored_settings_are_listed_only_when_set() {
        let c = CloudCoreConfig::default();
        assert!(
            c.ignored_settings().is_empty(),
            "{:?}",
            c.ignored_settings()
        );
        let c = CloudCoreConfig::from_yaml(
            "featureGates: {requireAuthorization: true, moduleRestart: true}\nkubeAPIConfig: {qps: 50, burst: 100, contentType: application/json}\nmodules:\n  cloudHub:\n    advertiseAddress: [1.2.3.4]\n    quic: {enable: true}\n    unixsocket: {enable: true}\n    authorization: {modes: []}\n  edgeController: {buffer: {podEvent: 5}}\n  deviceController: {buffer: {deviceStatusEvent: 5}}\n",
        )
        .unwrap();
        assert_eq!(
            c.ignored_settings(),
            vec![
                "featureGates",
                "kubeAPIConfig.contentType",
                "kubeAPIConfig.qps",
                "kubeAPIConfig.burst",
                "modules.cloudHub.quic",
                "modules.cloudHub.authorization.modes",
                "modules.edgeController.buffer.podEvent",
                "modules.deviceController.buffer.deviceStatusEvent",
            ]
        );
    }

    #[test]
    fn require_authorization_is_a_gate_that_counts() {
        let c = CloudCoreConfig::from_yaml(
            "featureGates: {requireAuthorization: true}\nmodules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n",
        )
        .unwrap();
        assert!(c.require_authorization());
        assert!(c.ignored_settings().iter().all(|s| *s != "featureGates"));
        assert!(!CloudCoreConfig::default().require_authorization());
    }

    #[test]
    fn a_certificate_without_its_key_is_refused_naming_the_setting() {
        let dir = std::env::temp_dir().join(format!("cloudcore-pairs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key, none) = (dir.join("c.crt"), dir.join("c.key"), dir.join("none"));
        std::fs::write(&cert, "x").unwrap();
        std::fs::write(&key, "x").unwrap();
        let base = || {
            let mut c = CloudCoreConfig::default();
            let h = &mut c.modules.cloud_hub;
            h.tls_ca_file = none.clone();
            h.tls_ca_key_file = none.clone();
            h.tls_cert_file = none.clone();
            h.tls_private_key_file = none.clone();
            let s = &mut c.modules.cloud_stream;
            s.enable = true;
            s.tls_tunnel_cert_file = String::new();
            s.tls_tunnel_private_key_file = String::new();
            s.tls_stream_cert_file = cert.display().to_string();
            s.tls_stream_private_key_file = key.display().to_string();
            c
        };
        assert!(base().check_tls_pairs().is_ok());
        let mut c = base();
        c.modules.cloud_stream.tls_tunnel_cert_file = cert.display().to_string();
        let err = c.check_tls_pairs().unwrap_err().to_string();
        assert!(
            err.starts_with("modules.cloudStream.tlsTunnelPrivateKeyFile: "),
            "{err}"
        );
        let mut c = base();
        c.modules.cloud_stream.tls_stream_cert_file = none.display().to_string();
        let err = c.check_tls_pairs().unwrap_err().to_string();
        assert!(
            err.starts_with("modules.cloudStream.tlsStreamCertFile: "),
            "{err}"
        );
        let mut c = base();
        c.modules.cloud_hub.tls_cert_file = cert.clone();
        let err = c.check_tls_pairs().unwrap_err().to_string();
        assert!(
            err.starts_with("modules.cloudHub.tlsPrivateKeyFile: "),
            "{err}"
        );
        let mut c = base();
        c.modules.cloud_hub.tls_ca_key_file = key.clone();
        let err = c.check_tls_pairs().unwrap_err().to_string();
        assert!(err.starts_with("modules.cloudHub.tlsCAFile: "), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unsupported_modules_load_disabled_but_cannot_be_enabled() {
        let ok = "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  nodeUpgradeJobController: {enable: false, buffer: 1}\n";
        assert!(CloudCoreConfig::from_yaml(ok).is_ok());
        let err = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  nodeUpgradeJobController: {enable: true}\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "modules.nodeUpgradeJobController.enable: this module is not available in this cloudcore"
        );
        let err =
            CloudCoreConfig::from_yaml("modules:\n  nodeUpgradeJobController: {enable: maybe}\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.starts_with("modules.nodeUpgradeJobController.enable: "),
            "{err}"
        );
    }

    #[test]
    fn the_router_reads_kubeedge_keys_and_needs_the_edgecontroller() {
        let c = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  router: {enable: true, address: 127.0.0.1, port: 9444, restTimeout: 5}\n",
        )
        .unwrap();
        assert_eq!(c.modules.router.listen_address(), "127.0.0.1:9444");
        assert!(c.needs_kubernetes());
        let err = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  edgeController: {enable: false}\n  router: {enable: true}\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("modules.router.enable: "),
            "{err}"
        );
        let err = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  router: {enable: true, port: 70000}\n",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("modules.router: port"), "{err}");
        let err = CloudCoreConfig::from_yaml("modules:\n  router: {enable: true, colour: red}\n")
            .unwrap_err();
        assert_eq!(err.to_string(), "unknown field: modules.router.colour");
    }

    #[test]
    fn the_task_manager_loads_kubeedges_keys_and_names_the_unused_ones() {
        let c = CloudCoreConfig::from_yaml(
            "modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n  taskManager:\n    enable: true\n    buffer: {taskStatus: 64, taskEvent: 2}\n    load: {taskWorkers: 4}\n    jobController: false\n",
        )
        .unwrap();
        let tm = &c.modules.task_manager;
        assert!(tm.enable && !tm.job_controller);
        assert_eq!(tm.buffer.task_status, 64);
        assert!(c.needs_kubernetes());
        let ignored = c.ignored_settings();
        assert!(ignored.contains(&"modules.taskManager.buffer.taskEvent"));
        assert!(ignored.contains(&"modules.taskManager.load.taskWorkers"));
        let err = CloudCoreConfig::from_yaml("modules:\n  taskManager: {enable: true, bogus: 1}\n")
            .unwrap_err();
        assert_eq!(err.to_string(), "unknown field: modules.taskManager.bogus");
    }

    #[test]
    fn a_replica_is_named_by_its_own_address_else_the_advertised_one() {
        let c = CloudCoreConfig::from_yaml(
            "replicas: {address: 10.1.2.3}\nmodules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n",
        )
        .unwrap();
        assert_eq!(c.replica_address(), "10.1.2.3");
        let c = CloudCoreConfig::from_yaml("modules:\n  cloudHub: {advertiseAddress: [1.2.3.4]}\n")
            .unwrap();
        if std::env::var(POD_IP_ENV).is_err() {
            assert_eq!(c.replica_address(), "1.2.3.4");
        }
        let err = CloudCoreConfig::from_yaml("replicas: {address: lb.example}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "replicas.address: \"lb.example\" is not an IP address"
        );
        let err = CloudCoreConfig::from_yaml("replicas: {mode: x}\n").unwrap_err();
        assert_eq!(err.to_string(), "unknown field: replicas.mode");
    }
}
