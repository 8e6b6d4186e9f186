//! Three cloudcore replicas serving the edge together (active-active) behind round-robin TCP
//! balancers, against the real kube-apiserver, with Rust edges (`edge::hub::HubClient`) that
//! bootstrap and connect only through the balancers.
//!
//! * Every Pod, ConfigMap and Secret version made for a node reaches it exactly once, and the
//!   node's ObjectSync records are written only by the replica holding it: the one its Node's
//!   `cloudcore` annotation names (checked through `metadata.managedFields[].manager`, which
//!   the API server takes from each replica's User-Agent `cloudcore@<address>/…`).
//! * A replica killed with SIGKILL while objects change loses nothing: its edges reconnect
//!   through the balancer to the others, every version made during and after the kill reaches
//!   its node, the moved nodes' annotations name their new holder, and only live holders write
//!   their records. Restarted, the killed replica takes no node back and re-sends nothing.
//! * `kubectl logs` and `kubectl exec` reach a node on every replica: with iptablesManager off,
//!   the replica holding a node's tunnel makes the Node report its own stream port, so the API
//!   server dials that replica (Rust edges with `edge::stream`'s agent and a FakeKubelet).
//! * A real edgecore behind the balancers follows its node to another replica when its
//!   replica is killed: what changed meanwhile reaches its store and `kubectl logs` works
//!   through its new tunnel (serialized machine-wide with the other edgecore tests).
//!
//! The replicas listen on 127.0.0.1 with ports of their own (cloudstream binds every address,
//! so addresses alone could not keep them apart) and name themselves `127.0.<n>.11/12/13`
//! (`replicas.address`), with `n` drawn per cluster so that tests and concurrent runs of this
//! binary never share a replica name. They share one CA: the first replica loads or creates
//! it, the others get its files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use beehive::{Backoff, Message};
use cloudstream::TlsMaterial;
use edge::hub::{EdgeCerts, HubClient, HubClientConfig, HubEvent};
use edge::stream::{AgentHandle, AgentOptions, EdgeStreamConfig, StreamAgent};
use edgecore_interop::kubelet::{EXIT_CODE, log_body};
use edgecore_interop::{
    Balancer, CloudSpec, Cloudcore, EDGE_LABEL, EdgeConfig, EdgeHome, EdgeStore, Edgecore,
    FakeKubelet, Serial, Stored, eventually, kubectl, kubectl_ok, store_key,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubeedge_api::reliablesyncs::{ObjectSync, object_sync_name};
use kubeedge_api::replicas::CLOUDCORE_ANNOTATION;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivateSec1KeyDer};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How long a test waits for something that should happen (generous: the suite shares two
/// cores with everything else).
const WAIT: Duration = Duration::from_secs(90);
/// Edges per replica.
const EDGES_PER_REPLICA: usize = 2;

// ---------------------------------------------------------------------------------------------
// The replicas
// ---------------------------------------------------------------------------------------------

/// Three cloudcore replicas and the balancers edges dial.
struct Replicas {
    specs: Vec<CloudSpec>,
    cores: Vec<Option<Cloudcore>>,
    websocket: Balancer,
    https: Balancer,
    tunnel: Balancer,
    token: String,
    dir: PathBuf,
}

impl Replicas {
    /// Starts the first replica (it loads or creates the CA), gives the others its certificate
    /// files, starts them, and puts a balancer in front of each edge-facing port.
    async fn start(name: &str) -> Replicas {
        k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
        let dir = std::env::temp_dir().join(format!(
            "cloudcore-replicas-{name}-{}-{}",
            std::process::id(),
            short_id()
        ));
        let net = 1 + rand_u8() % 250;
        let mut specs = Vec::new();
        let mut cores = Vec::new();
        for i in 0..3 {
            let mut spec = CloudSpec::for_testenv(&dir.join(format!("r{i}"))).expect("spec");
            spec.replica_address = Some(format!("127.0.{net}.{}", 11 + i));
            if i > 0 {
                share_certificates(&specs[0], &spec);
            }
            cores.push(Some(Cloudcore::start(&spec).await.unwrap_or_else(|e| {
                panic!("replica {i} did not start: {e}");
            })));
            specs.push(spec);
        }
        let backends =
            |port: fn(&CloudSpec) -> std::net::SocketAddr| specs.iter().map(port).collect();
        let websocket = Balancer::start(
            "127.0.0.1:0".parse().unwrap(),
            backends(|s| s.ports.websocket_addr()),
        )
        .await
        .expect("websocket balancer");
        let https = Balancer::start(
            "127.0.0.1:0".parse().unwrap(),
            backends(|s| s.ports.https_addr()),
        )
        .await
        .expect("https balancer");
        let tunnel = Balancer::start(
            "127.0.0.1:0".parse().unwrap(),
            backends(|s| s.ports.tunnel_addr()),
        )
        .await
        .expect("tunnel balancer");
        let tokens: Vec<String> = cores
            .iter()
            .map(|c| c.as_ref().unwrap().token().expect("token"))
            .collect();
        let cas: BTreeSet<&str> = tokens
            .iter()
            .map(|t| t.split('.').next().unwrap())
            .collect();
        assert_eq!(cas.len(), 1, "the replicas share one CA: {tokens:?}");
        eprintln!(
            "replicas {:?} behind wss://{} and https://{} ({})",
            specs
                .iter()
                .map(|s| s.replica_address.clone().unwrap())
                .collect::<Vec<_>>(),
            websocket.addr(),
            https.addr(),
            dir.display()
        );
        Replicas {
            specs,
            cores,
            websocket,
            https,
            tunnel,
            token: tokens[0].clone(),
            dir,
        }
    }

    /// The address replica `i` names itself by.
    fn address(&self, i: usize) -> String {
        self.specs[i].replica_address.clone().unwrap()
    }

    /// The replica named `address`.
    fn index(&self, address: &str) -> usize {
        (0..3)
            .find(|&i| self.address(i) == address)
            .unwrap_or_else(|| panic!("{address} is none of the replicas"))
    }

    /// The field manager of replica `i`'s writes.
    fn manager(&self, i: usize) -> String {
        format!("cloudcore@{}", self.address(i))
    }

    /// SIGKILL to replica `i`, as a crashed pod.
    fn kill(&mut self, i: usize) {
        let mut core = self.cores[i].take().expect("replica running");
        core.process().kill();
    }

    /// Starts replica `i` again with the same configuration, ports and folder.
    async fn restart(&mut self, i: usize) {
        assert!(self.cores[i].is_none(), "replica {i} is running");
        let core = Cloudcore::start(&self.specs[i])
            .await
            .unwrap_or_else(|e| panic!("replica {i} did not restart: {e}"));
        self.cores[i] = Some(core);
    }

    /// The log lines of every replica that mention `what` (for failure messages).
    fn logs_about(&self, what: &str) -> String {
        let mut out = String::new();
        for (i, spec) in self.specs.iter().enumerate() {
            let log = std::fs::read_to_string(spec.log_file()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains(what)).collect();
            out += &format!(
                "--- replica {i} ({}) about {what} ---\n{}\n",
                self.address(i),
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
        out
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("replica folders kept in {}", self.dir.display());
        } else {
            self.cores.clear();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Copies the CA and server certificate files of `from` (when it keeps them in files) into
/// the folder of `to`, so both serve with the same CA whatever the cluster's Secrets say.
fn share_certificates(from: &CloudSpec, to: &CloudSpec) {
    for file in [
        "ca/rootCA.crt",
        "ca/rootCA.key",
        "certs/server.crt",
        "certs/server.key",
    ] {
        let src = from.dir.join(file);
        if src.is_file() {
            let dst = to.dir.join(file);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

fn short_id() -> String {
    beehive::new_id().replace('-', "")[..8].to_owned()
}

fn rand_u8() -> u8 {
    u8::from_str_radix(&beehive::new_id().replace('-', "")[..2], 16).unwrap_or(7)
}

// ---------------------------------------------------------------------------------------------
// The edges
// ---------------------------------------------------------------------------------------------

/// One object version as the edge saw it: kind (`pod`, `configmap`, `secret`), name,
/// resourceVersion.
type Version = (String, String, String);

/// A Rust edge connected through the websocket balancer; it acknowledges what it is sent (as
/// edgecore's metamanager) and counts every Pod, ConfigMap and Secret version it receives.
struct Edge {
    node: String,
    client: HubClient,
    certs: EdgeCerts,
    received: Arc<Mutex<HashMap<Version, usize>>>,
    /// Node tasks (`Check`) received from the taskmanager.
    tasks: Arc<Mutex<Vec<Message>>>,
}

impl Edge {
    /// Bootstraps a certificate through the https balancer and connects through the
    /// websocket balancer; returns once connected.
    async fn connect(replicas: &Replicas, node: &str, ns: &str) -> Edge {
        let certs = edge::hub::bootstrap(
            &format!("https://{}", replicas.https.addr()),
            &replicas.token,
            node,
        )
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {node}: {e}"));
        let tls = Arc::new(certs.client_tls().expect("client TLS"));
        let mut config = HubClientConfig::new(node, replicas.websocket.addr().to_string());
        // edgecore redials every few seconds: the nodes of a killed replica are held by
        // nobody for a second or two (changes made then are what the takeover must find).
        config.backoff = Backoff {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(4),
        };
        let (client, mut events) = HubClient::start(config, tls);
        let received: Arc<Mutex<HashMap<Version, usize>>> = Arc::default();
        let tasks: Arc<Mutex<Vec<Message>>> = Arc::default();
        let (r, t, prefix) = (received.clone(), tasks.clone(), format!("{ns}/"));
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let HubEvent::Message(m) = ev else { continue };
                if m.route.group == "taskmanager" {
                    t.lock().unwrap().push(m);
                } else if let Some(v) = version(&m, &prefix) {
                    *r.lock().unwrap().entry(v).or_default() += 1;
                }
            }
        });
        let edge = Edge {
            node: node.to_owned(),
            client,
            certs,
            received,
            tasks,
        };
        eventually(WAIT, &format!("edge {node} connected"), || async {
            edge.client.is_connected().then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        edge
    }

    /// Starts edgestream's agent for the node at 127.0.0.1 through the tunnel balancer,
    /// relaying to `kubelet`.
    fn stream_agent(&self, replicas: &Replicas, kubelet: &FakeKubelet) -> AgentHandle {
        let mut options = AgentOptions::new(&self.node, "127.0.0.1");
        options.kubelet = kubelet.addr;
        options.redial_base = Duration::from_millis(500);
        options.redial_max = Duration::from_secs(4);
        let material = TlsMaterial {
            cert_chain: vec![CertificateDer::from(self.certs.cert_der.clone())],
            key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(self.certs.key_der.clone())),
            ca: vec![CertificateDer::from(self.certs.ca_der.clone())],
        };
        let tls = edge::stream::client_tls(&material).expect("tunnel TLS");
        let config = EdgeStreamConfig {
            enable: true,
            server: replicas.tunnel.addr().to_string(),
            ..EdgeStreamConfig::default()
        };
        StreamAgent::new(config, options, tls).spawn()
    }

    /// How often each version arrived so far.
    fn received(&self) -> HashMap<Version, usize> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        self.client.stop();
    }
}

/// The version a downstream Pod, ConfigMap or Secret message of namespace `prefix` carries.
fn version(m: &Message, prefix: &str) -> Option<Version> {
    if !m.header.parent_id.is_empty() {
        return None;
    }
    let rest = m.route.resource.strip_prefix(prefix)?;
    let (kind, name) = rest.split_once('/')?;
    matches!(kind, "pod" | "configmap" | "secret").then(|| {
        (
            kind.to_owned(),
            name.to_owned(),
            m.header.resource_version.to_string(),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// The cluster side
// ---------------------------------------------------------------------------------------------

/// One node with its edge, the objects made for it and every version they went through.
struct Site {
    node: String,
    edge: Edge,
    configmap: String,
    secret: String,
    pods: Vec<String>,
    /// Every version written for this node, in order.
    versions: Vec<Version>,
    /// The uid of each object (its record is `<node>.<uid>`), by (kind, name).
    uids: BTreeMap<(String, String), String>,
}

/// The admin client and the test namespace.
struct Cluster {
    client: kube::Client,
    ns: String,
}

impl Cluster {
    async fn new(prefix: &str) -> Cluster {
        Cluster {
            client: k8s_testenv::client().await,
            ns: k8s_testenv::namespace(prefix).await,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Creates edge Node `node`; with `loopback`, its InternalIP is 127.0.0.1 (where the
    /// API server dials its kubelet port for `kubectl logs/exec`).
    async fn edge_node(&self, node: &str, loopback: bool) {
        let created: Node = from(json!({"metadata": {"name": node, "labels": {EDGE_LABEL: ""}}}));
        self.nodes()
            .create(&PostParams::default(), &created)
            .await
            .expect("create node");
        if loopback {
            let address =
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}});
            self.nodes()
                .patch_status(node, &PatchParams::default(), &Patch::Merge(&address))
                .await
                .expect("node address");
        }
    }

    /// Creates an edge Node, connects its edge, gives it a pod using a ConfigMap and a Secret
    /// (created once the pod has reached the edge, so they are sent to it).
    async fn site(&self, replicas: &Replicas, i: usize) -> Site {
        let node = format!("{}-{i}", self.ns);
        self.edge_node(&node, false).await;
        let edge = Edge::connect(replicas, &node, &self.ns).await;
        let mut site = Site {
            configmap: format!("cm-{i}"),
            secret: format!("secret-{i}"),
            node,
            edge,
            pods: Vec::new(),
            versions: Vec::new(),
            uids: BTreeMap::new(),
        };
        self.holder(&site).await;
        self.add_pod(&mut site).await;
        eventually(WAIT, "the first pod at its edge", || async {
            site.edge
                .received()
                .contains_key(&site.versions[0])
                .then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs_about(&site.node)));
        let cm: ConfigMap = from(json!({"metadata": {"name": site.configmap}, "data": {"v": "0"}}));
        let cm = self
            .api()
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        site.note("configmap", &cm);
        let secret: Secret = from(
            json!({"metadata": {"name": site.secret}, "stringData": {"v": "0"}, "type": "Opaque"}),
        );
        let secret = self
            .api()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        site.note("secret", &secret);
        site.all_arrived(replicas).await;
        site
    }

    /// Creates one more pod bound to the site's node, using its ConfigMap and Secret.
    async fn add_pod(&self, site: &mut Site) {
        let name = format!("pod{}-{}", site.pods.len(), site.node);
        let pod: Pod = from(json!({
            "metadata": {"name": name, "labels": {"round": "0"}},
            "spec": {
                "nodeName": site.node,
                "containers": [{"name": "c", "image": "nginx"}],
                "volumes": [
                    {"name": "cm", "configMap": {"name": site.configmap}},
                    {"name": "s", "secret": {"secretName": site.secret}},
                ],
            },
        }));
        let pod = self
            .api()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        site.pods.push(name);
        site.note("pod", &pod);
    }

    /// A new version of every object of the site (a pod label, ConfigMap and Secret data).
    async fn change_all(&self, site: &mut Site, round: u32) {
        let label = json!({"metadata": {"labels": {"round": round.to_string()}}});
        for name in site.pods.clone() {
            let pod: Pod = patch(&self.api(), &name, &label).await;
            site.note("pod", &pod);
        }
        let data = json!({"data": {"v": round.to_string()}});
        let cm: ConfigMap = patch(&self.api(), &site.configmap, &data).await;
        site.note("configmap", &cm);
        let data = json!({"stringData": {"v": round.to_string()}});
        let secret: Secret = patch(&self.api(), &site.secret, &data).await;
        site.note("secret", &secret);
    }

    /// The replica the Node's `cloudcore` annotation names, once it names one.
    async fn holder(&self, site: &Site) -> String {
        let nodes = self.nodes();
        eventually(WAIT, &format!("{} annotated", site.node), || async {
            nodes
                .get(&site.node)
                .await
                .ok()?
                .annotations()
                .get(CLOUDCORE_ANNOTATION)
                .cloned()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The annotation of the site's Node right now.
    async fn annotation(&self, site: &Site) -> Option<String> {
        self.nodes()
            .get(&site.node)
            .await
            .expect("node")
            .annotations()
            .get(CLOUDCORE_ANNOTATION)
            .cloned()
    }

    /// The site's ObjectSync records, by (kind, name) of their object.
    async fn records(&self, site: &Site) -> BTreeMap<(String, String), ObjectSync> {
        let api: Api<ObjectSync> = self.api();
        let mut out = BTreeMap::new();
        for (key, uid) in &site.uids {
            if let Some(r) = api
                .get_opt(&object_sync_name(&site.node, uid))
                .await
                .expect("read record")
            {
                out.insert(key.clone(), r);
            }
        }
        out
    }

    /// Waits until every object of the site has a record of its latest version (the edge
    /// acknowledged it and a replica wrote that down).
    async fn records_current(
        &self,
        site: &Site,
        replicas: &Replicas,
    ) -> BTreeMap<(String, String), ObjectSync> {
        let latest = site.latest();
        eventually(
            WAIT,
            &format!("records of {} current", site.node),
            || async {
                let records = self.records(site).await;
                let current = latest.iter().all(|(key, rv)| {
                    records.get(key).is_some_and(|r| {
                        r.status
                            .as_ref()
                            .map(|s| s.object_resource_version.as_str())
                            == Some(rv.as_str())
                    })
                });
                current.then_some(records)
            },
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}: wanted {latest:?}\n{}",
                replicas.logs_about(&site.node)
            )
        })
    }
}

impl Site {
    /// Records a version written to `obj` (of `kind`).
    fn note<K: Resource>(&mut self, kind: &str, obj: &K) {
        let meta = obj.meta();
        let name = meta.name.clone().unwrap();
        self.uids
            .insert((kind.to_owned(), name.clone()), meta.uid.clone().unwrap());
        self.versions.push((
            kind.to_owned(),
            name,
            meta.resource_version.clone().unwrap(),
        ));
    }

    /// The latest resourceVersion of each object.
    fn latest(&self) -> BTreeMap<(String, String), String> {
        self.versions
            .iter()
            .map(|(k, n, rv)| ((k.clone(), n.clone()), rv.clone()))
            .collect()
    }

    /// Waits until the edge has received every version written for it.
    async fn all_arrived(&self, replicas: &Replicas) {
        eventually(WAIT, &format!("every version at {}", self.node), || async {
            let got = self.edge.received();
            self.versions
                .iter()
                .all(|v| got.contains_key(v))
                .then_some(())
        })
        .await
        .unwrap_or_else(|e| {
            let got = self.edge.received();
            let missing: Vec<&Version> = self
                .versions
                .iter()
                .filter(|v| !got.contains_key(v))
                .collect();
            panic!(
                "{e}: missing {missing:?}, got {got:?}\n{}",
                replicas.logs_about(&self.node)
            )
        });
    }

    /// Asserts that each version in `versions` arrived exactly once. cloudhub re-sends a
    /// message the edge has not acknowledged within 5 s (at-least-once), so on a machine
    /// loaded enough for that to happen, as many extra copies as the holder counted re-sends
    /// of this node are allowed, and reported.
    async fn exactly_once(&self, versions: &[Version], replicas: &Replicas) {
        let got = self.edge.received();
        let wrong: Vec<(&Version, usize)> = versions
            .iter()
            .map(|v| (v, got.get(v).copied().unwrap_or(0)))
            .filter(|(_, n)| *n != 1)
            .collect();
        if wrong.is_empty() {
            return;
        }
        let mut resent = 0.0;
        for core in replicas.cores.iter().flatten() {
            if let Ok(m) = core.metrics().await {
                resent += m.node_counter("retried", &self.node);
            }
        }
        let extra: usize = wrong.iter().map(|(_, n)| n.saturating_sub(1)).sum();
        assert!(
            wrong.iter().all(|(_, n)| *n > 0) && extra as f64 <= resent,
            "{}: versions not delivered exactly once: {wrong:?} ({resent} re-sends counted)",
            self.node
        );
        eprintln!(
            "{}: {extra} extra copies after {resent} re-sends of unacknowledged messages",
            self.node
        );
    }
}

/// The field managers of a record.
fn managers(record: &ObjectSync) -> BTreeSet<String> {
    record
        .managed_fields()
        .iter()
        .filter_map(|f| f.manager.clone())
        .collect()
}

/// The managers that wrote a record at or after `since` (managedFields times are whole
/// seconds, so `since` is rounded down).
fn managers_since(record: &ObjectSync, since: SystemTime) -> BTreeSet<String> {
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    record
        .managed_fields()
        .iter()
        .filter(|f| f.time.as_ref().is_some_and(|t| t.0.as_second() >= since))
        .filter_map(|f| f.manager.clone())
        .collect()
}

fn from<K: DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).expect("object from JSON")
}

async fn patch<K>(api: &Api<K>, name: &str, body: &Value) -> K
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"))
}

/// Nodes on each of the three replicas: `EDGES_PER_REPLICA * 3` sites, connected one after
/// the other (the balancer deals connections in turn, so every replica gets some).
async fn sites(cluster: &Cluster, replicas: &Replicas) -> Vec<Site> {
    let mut sites = Vec::new();
    for i in 0..3 * EDGES_PER_REPLICA {
        sites.push(cluster.site(replicas, i).await);
    }
    sites
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn each_node_gets_every_version_once_and_only_its_holder_records_it() {
    test_tiers::require!(ApiServer);
    let replicas = Replicas::start("once").await;
    let cluster = Cluster::new("replicas-once").await;
    let mut sites = sites(&cluster, &replicas).await;
    for site in &mut sites {
        cluster.change_all(site, 1).await;
    }

    let mut held = [0usize; 3];
    for site in &sites {
        site.all_arrived(&replicas).await;
        let holder = cluster.holder(site).await;
        let i = replicas.index(&holder);
        held[i] += 1;
        let records = cluster.records_current(site, &replicas).await;
        assert_eq!(records.len(), site.uids.len(), "a record per object");
        for ((kind, name), record) in &records {
            assert_eq!(
                managers(record),
                BTreeSet::from([replicas.manager(i)]),
                "{} is held by {holder}: only it writes the record of {kind} {name}",
                site.node
            );
        }
    }
    eprintln!("nodes per replica: {held:?}");
    assert!(
        held.iter().all(|&n| n > 0),
        "the balancer spread the nodes over every replica: {held:?}"
    );
    eventually(WAIT, "one relayed session per edge", || async {
        (replicas.websocket.active().iter().sum::<usize>() == sites.len()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", replicas.websocket.active()));
    // Deliveries still in flight would show now as a second copy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for site in &sites {
        site.exactly_once(&site.versions, &replicas).await;
    }
}

#[tokio::test]
async fn a_killed_replicas_nodes_move_to_the_others_and_nothing_is_lost_or_repeated() {
    test_tiers::require!(ApiServer);
    let mut replicas = Replicas::start("failover").await;
    let cluster = Cluster::new("replicas-failover").await;
    let mut sites = sites(&cluster, &replicas).await;
    for site in &sites {
        site.all_arrived(&replicas).await;
        cluster.records_current(site, &replicas).await;
    }
    let before: Vec<String> =
        futures::future::join_all(sites.iter().map(|s| cluster.holder(s))).await;
    let victim = replicas.index(&before[0]);
    let moved: Vec<usize> = (0..sites.len())
        .filter(|&s| replicas.index(&before[s]) == victim)
        .collect();
    eprintln!(
        "killing replica {} holding {} of {} nodes",
        replicas.address(victim),
        moved.len(),
        sites.len()
    );

    // Kill it and change everything at once: the moved nodes are held by nobody until they
    // reconnect; a new pod is made for every node too. Each round waits for the previous one
    // to be delivered: the cloud sends the latest version of an object, so a version
    // superseded before it was sent is legitimately never seen.
    let killed_at = Instant::now();
    replicas.kill(victim);
    // The moved nodes' objects first, while those nodes are surely away.
    let order: Vec<usize> = moved
        .iter()
        .copied()
        .chain((0..sites.len()).filter(|s| !moved.contains(s)))
        .collect();
    for &s in &order {
        cluster.change_all(&mut sites[s], 1).await;
        cluster.add_pod(&mut sites[s]).await;
    }
    eprintln!(
        "changes made during the kill within {:?}",
        killed_at.elapsed()
    );
    // Every moved node is held by a live replica again.
    let dead = replicas.address(victim);
    for &s in &moved {
        eventually(WAIT, &format!("{} moved", sites[s].node), || async {
            let now = cluster.annotation(&sites[s]).await?;
            (now != dead && sites[s].edge.client.is_connected()).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs_about(&sites[s].node)));
    }
    eprintln!(
        "failover: {} nodes held again {:?} after the kill",
        moved.len(),
        killed_at.elapsed()
    );
    // What was made while the moved nodes were held by nobody reaches them (each object is
    // changed once per round: a version superseded before it is sent need not be).
    for site in &sites {
        site.all_arrived(&replicas).await;
    }
    eprintln!(
        "failover: every version made during the kill delivered {:?} after the kill",
        killed_at.elapsed()
    );
    // And after the move.
    for site in &mut sites {
        cluster.change_all(site, 2).await;
        cluster.add_pod(site).await;
    }
    let mut after = Vec::new();
    for (s, site) in sites.iter().enumerate() {
        site.all_arrived(&replicas).await;
        let holder = cluster.holder(site).await;
        let i = replicas.index(&holder);
        assert!(i != victim, "{} is held by a live replica", site.node);
        if !moved.contains(&s) {
            assert_eq!(holder, before[s], "{} stayed where it was", site.node);
            // Its holder never stopped: nothing was sent twice.
            site.exactly_once(&site.versions, &replicas).await;
        }
        let records = cluster.records_current(site, &replicas).await;
        let allowed = BTreeSet::from([replicas.manager(victim), replicas.manager(i)]);
        for ((kind, name), record) in &records {
            let writers = managers(record);
            if moved.contains(&s) {
                assert!(
                    writers.is_subset(&allowed) && writers.contains(&replicas.manager(i)),
                    "{} moved to {holder}: the record of {kind} {name} is written by it \
                     (and earlier by the killed one) only: {writers:?}",
                    site.node
                );
            } else {
                assert_eq!(
                    writers,
                    BTreeSet::from([replicas.manager(i)]),
                    "{kind} {name} of {}",
                    site.node
                );
            }
        }
        after.push(holder);
    }
    let dup: usize = moved
        .iter()
        .map(|&s| {
            sites[s]
                .edge
                .received()
                .values()
                .filter(|&&n| n > 1)
                .count()
        })
        .sum();
    eprintln!("versions a moved node received more than once: {dup}");

    // The killed replica comes back: it takes nothing back and re-sends nothing.
    let seen: Vec<HashMap<Version, usize>> = sites.iter().map(|s| s.edge.received()).collect();
    let restarted_at = SystemTime::now();
    replicas.restart(victim).await;
    // Time for it to list everything (and do whatever it would do).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut newer = Vec::new();
    for site in &mut sites {
        let from = site.versions.len();
        cluster.change_all(site, 3).await;
        cluster.add_pod(site).await;
        newer.push(site.versions[from..].to_vec());
    }
    for (s, site) in sites.iter().enumerate() {
        site.all_arrived(&replicas).await;
        site.exactly_once(&newer[s], &replicas).await;
        let got = site.edge.received();
        for (v, n) in &seen[s] {
            assert_eq!(
                got.get(v),
                Some(n),
                "{}: {v:?} was delivered again after the restart",
                site.node
            );
        }
        assert_eq!(
            cluster.annotation(site).await.as_deref(),
            Some(after[s].as_str()),
            "{} stays with its holder after the restart",
            site.node
        );
        let records = cluster.records_current(site, &replicas).await;
        for ((kind, name), record) in &records {
            assert!(
                !managers_since(record, restarted_at).contains(&replicas.manager(victim)),
                "the restarted replica wrote the record of {kind} {name} of {}, held by {}",
                site.node,
                after[s]
            );
        }
    }
    assert_eq!(
        replicas.websocket.active()[victim],
        0,
        "no edge went back to the restarted replica"
    );
}

#[tokio::test]
async fn kubectl_logs_and_exec_reach_nodes_on_every_replica() {
    test_tiers::require!(ApiServer);
    let replicas = Replicas::start("stream").await;
    let cluster = Cluster::new("replicas-stream").await;
    // One node per replica: the API server dials a node's InternalIP (127.0.0.1, the only
    // address the test stream certificate names) at the port its Node reports, and a stream
    // server tells its tunnels apart by that IP, so each replica carries one tunnel. A tunnel
    // dealt to a replica that already has one is refused and redials to the next.
    let mut nodes = Vec::new();
    for i in 0..3 {
        let node = format!("{}-{i}", cluster.ns);
        cluster.edge_node(&node, true).await;
        let edge = Edge::connect(&replicas, &node, &cluster.ns).await;
        let kubelet = FakeKubelet::start().await;
        let agent = edge.stream_agent(&replicas, &kubelet);
        let pod = format!("web-{i}");
        let body: Pod = from(json!({
            "metadata": {"name": pod},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}]},
        }));
        cluster
            .api::<Pod>()
            .create(&PostParams::default(), &body)
            .await
            .expect("create pod");
        nodes.push((node, pod, edge, kubelet, agent));
    }
    // Each Node reports the stream port of the replica holding its tunnel: all three differ.
    let streams: BTreeMap<i32, usize> = (0..3)
        .map(|i| (i32::from(replicas.specs[i].ports.stream), i))
        .collect();
    let mut on = BTreeSet::new();
    for (node, _, _, _, agent) in &nodes {
        let port = eventually(WAIT, &format!("{node} reports a stream port"), || async {
            agent.is_connected().then_some(())?;
            let n = cluster.nodes().get(node).await.ok()?;
            let port = n.status?.daemon_endpoints?.kubelet_endpoint?.port;
            streams.contains_key(&port).then_some(port)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs_about(node)));
        on.insert(streams[&port]);
    }
    assert_eq!(on.len(), 3, "a tunnel on every replica: {on:?}");

    for (node, pod, _, kubelet, _) in &nodes {
        let out = kubectl_ok(&["-n", &cluster.ns, "logs", pod, "-c", "app"], None)
            .await
            .unwrap_or_else(|e| panic!("kubectl logs {pod} on {node}: {e}"));
        assert!(out == log_body(), "logs of {pod}: {} bytes", out.len());
        assert!(
            kubelet
                .requests()
                .iter()
                .any(|r| r.path() == format!("/containerLogs/{}/{pod}/app", cluster.ns)),
            "{node}'s own kubelet served the logs of {pod}"
        );
        let input: &[u8] = b"hello \x00\xff exec\n";
        let out = kubectl(
            &[
                "-n",
                &cluster.ns,
                "exec",
                "-i",
                pod,
                "-c",
                "app",
                "--",
                "cat",
            ],
            Some(input),
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("kubectl exec {pod}: {e}"));
        assert_eq!(
            out.stdout,
            input,
            "exec stdout of {pod}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(EXIT_CODE as i32), "exit code");
    }
}

/// The object `key` (`<ns>/<kind>/<name>`) in the real edgecore's store, once `check` holds.
async fn stored(store: &EdgeStore, key: &str, check: impl Fn(&Stored) -> bool) -> Stored {
    eventually(WAIT, &format!("{key} in the edge store"), || async {
        store.get(key).ok().flatten().filter(|s| check(s))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; last seen: {:?}", store.get(key)))
}

/// `kubectl logs` of `pod`, retried until it answers (the tunnel may be redialing).
async fn logs(ns: &str, pod: &str) -> Vec<u8> {
    eventually(WAIT, &format!("kubectl logs {pod}"), || async {
        let out = kubectl(&["-n", ns, "logs", pod, "-c", "app"], None, WAIT)
            .await
            .ok()?;
        out.status.success().then_some(out.stdout)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_real_edgecore_moves_with_its_node_when_its_replica_is_killed() {
    test_tiers::require!(ApiServer, Edgecore);
    // This binary's edgecore scenarios take turns; the kubelet stand-in's port is fixed.
    let _serial = Serial::acquire().expect("this binary's edgecore turn");
    let kubelet = FakeKubelet::start_on_kubelet_port()
        .await
        .expect("kubelet stand-in");
    let mut replicas = Replicas::start("edgecore").await;
    let cluster = Cluster::new("replicas-edgecore").await;
    let ns = cluster.ns.clone();
    let node = format!("{ns}-real");
    cluster.edge_node(&node, true).await;
    let home = EdgeHome::new(&node).expect("edge home");
    let mut config = EdgeConfig::new(
        &node,
        &replicas.token,
        replicas.https.addr(),
        replicas.websocket.addr(),
    );
    config.tunnel_server = Some(replicas.tunnel.addr());
    // edgecore redials 2 × heartbeat after losing the cloud (30 s with the template's 15).
    config.heartbeat = 5;
    home.write_config(&config).expect("edge config");
    let mut edgecore = Edgecore::start(&home).expect("edgecore");
    let store = EdgeStore::new(&home.database());
    let annotated = |other_than: Option<String>| {
        let nodes = cluster.nodes();
        let node = node.clone();
        async move {
            eventually(WAIT, &format!("{node} annotated"), || async {
                let n = nodes.get(&node).await.ok()?;
                let holder = n.annotations().get(CLOUDCORE_ANNOTATION).cloned()?;
                (Some(&holder) != other_than.as_ref()).then_some(holder)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let holder = annotated(None).await;

    // A pod using a ConfigMap, then the ConfigMap: both are sent (edged is off in this
    // edgecore, so nothing at the edge asks for the ConfigMap).
    let pod = |name: &str| -> Pod {
        from(json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "nginx"}],
                "volumes": [{"name": "cm", "configMap": {"name": "cm"}}],
            },
        }))
    };
    cluster
        .api::<Pod>()
        .create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    stored(&store, &store_key(&ns, "pod", "web"), |_| true).await;
    let cm: ConfigMap = from(json!({"metadata": {"name": "cm"}, "data": {"v": "0"}}));
    cluster
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    stored(&store, &store_key(&ns, "configmap", "cm"), |_| true).await;
    assert!(logs(&ns, "web").await == log_body(), "logs of web");

    // Its replica dies; the ConfigMap changes and a pod is added meanwhile.
    let killed_at = Instant::now();
    replicas.kill(replicas.index(&holder));
    let cm: ConfigMap = patch(&cluster.api(), "cm", &json!({"data": {"v": "1"}})).await;
    let rv = cm.resource_version().unwrap();
    cluster
        .api::<Pod>()
        .create(&PostParams::default(), &pod("web2"))
        .await
        .unwrap();
    let now = annotated(Some(holder.clone())).await;
    stored(&store, &store_key(&ns, "pod", "web2"), |_| true).await;
    stored(&store, &store_key(&ns, "configmap", "cm"), |s| {
        s.resource_version() == Some(rv.as_str())
    })
    .await;
    eprintln!(
        "edgecore moved from {holder} to {now} and has everything {:?} after the kill",
        killed_at.elapsed()
    );
    assert!(logs(&ns, "web2").await == log_body(), "logs of web2");
    assert!(
        kubelet
            .requests()
            .iter()
            .any(|r| r.path() == format!("/containerLogs/{ns}/web2/app")),
        "the edge kubelet served web2's logs"
    );
    assert!(edgecore.try_wait().is_none(), "edgecore kept running");
}

// ---------------------------------------------------------------------------------------------
// Node jobs
// ---------------------------------------------------------------------------------------------

impl Edge {
    /// The node tasks received so far.
    fn tasks(&self) -> Vec<Message> {
        self.tasks.lock().unwrap().clone()
    }

    /// Reports `action` of its one task as edgecore's taskManager does.
    async fn report_task(&self, action: &str) {
        let task = self.tasks().first().cloned().expect("a task to report on");
        let body = json!({"action": action, "succ": true,
            "finishTime": "2026-08-06T07:00:00Z", "reason": "", "extend": ""});
        let msg = Message::new()
            .with_route(
                "websocket",
                "hub",
                task.route.resource.as_str(),
                "UpdateNodeActionStatus",
            )
            .with_content(beehive::Content::json(&body).unwrap());
        self.client.send(msg).await.expect("report sent");
    }
}

/// The ImagePrePullJob `job` as the API server has it.
async fn prepull_job(
    cluster: &Cluster,
    job: &str,
) -> kubeedge_api::operations::v1alpha2::ImagePrePullJob {
    Api::all(cluster.client.clone())
        .get(job)
        .await
        .expect("the job")
}

/// `(phase, actions reported)` of every node's task of `job`.
async fn task_phases(cluster: &Cluster, job: &str) -> BTreeMap<String, (String, usize)> {
    prepull_job(cluster, job)
        .await
        .status
        .map(|s| s.node_status)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.node_name, (t.phase, t.action_flow.len())))
        .collect()
}

#[tokio::test]
async fn node_jobs_are_sent_by_each_nodes_holder_once_and_survive_a_killed_replica() {
    test_tiers::require!(ApiServer);
    let mut replicas = Replicas::start("jobs").await;
    let cluster = Cluster::new("jobs").await;
    let mut edges = Vec::new();
    for i in 0..6 {
        let node = format!("{}-{i}", cluster.ns);
        cluster.edge_node(&node, false).await;
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "reason": "KubeletReady", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        cluster
            .nodes()
            .patch_status(&node, &PatchParams::default(), &Patch::Merge(&ready))
            .await
            .expect("node Ready");
        edges.push(Edge::connect(&replicas, &node, &cluster.ns).await);
    }
    let mut holders = BTreeMap::new();
    for e in &edges {
        let nodes = cluster.nodes();
        let holder = eventually(WAIT, &format!("{} annotated", e.node), || async {
            nodes
                .get(&e.node)
                .await
                .ok()?
                .annotations()
                .get(CLOUDCORE_ANNOTATION)
                .cloned()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        holders.insert(e.node.clone(), replicas.index(&holder));
    }
    let per_replica: BTreeSet<usize> = holders.values().copied().collect();
    assert_eq!(
        per_replica.len(),
        3,
        "round robin spreads the nodes: {holders:?}"
    );
    let job = format!("jobs-{}", short_id());
    let names: Vec<String> = edges.iter().map(|e| e.node.clone()).collect();
    let obj: kubeedge_api::operations::v1alpha2::ImagePrePullJob = from(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": job},
        "spec": {"imagePrePullTemplate": {"images": ["a/b:1"], "nodeNames": names,
            "concurrency": 1, "timeoutSeconds": 120}}}));
    Api::all(cluster.client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("job created");
    // concurrency is per replica: one node of each replica gets its task, sent by the
    // replica holding it (the only one with its session).
    let first: Vec<&Edge> = eventually(WAIT, "one task per replica", || async {
        let sent: Vec<&Edge> = edges.iter().filter(|e| !e.tasks().is_empty()).collect();
        let by: BTreeSet<usize> = sent.iter().map(|e| holders[&e.node]).collect();
        (sent.len() == 3 && by.len() == 3).then_some(sent)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs_about(&job)));
    for e in &first {
        e.report_task("Check").await;
    }
    eventually(WAIT, "three Checks recorded", || async {
        let p = task_phases(&cluster, &job).await;
        (p.values().filter(|(_, n)| *n == 1).count() == 3).then_some(())
    })
    .await
    .unwrap();
    // The replica holding one of them dies; that node keeps running its task, moves to
    // another replica and reports there.
    let moved = first
        .iter()
        .find(|e| holders[&e.node] == 0)
        .expect("a node of replica 0 in flight");
    let dead = replicas.address(0);
    replicas.kill(0);
    let nodes = cluster.nodes();
    eventually(WAIT, "the moved node held by another replica", || async {
        let n = nodes.get(&moved.node).await.ok()?;
        let a = n.annotations().get(CLOUDCORE_ANNOTATION)?;
        (*a != dead).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs_about(&moved.node)));
    moved.report_task("Pull").await;
    // Every node finishes its task whenever it gets one; replica 0's waiting node is sent by
    // its new holder.
    let deadline = Instant::now() + WAIT * 2;
    loop {
        let phases = task_phases(&cluster, &job).await;
        if phases.values().all(|(p, _)| p == "Successful") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all Successful: {phases:?}\n{}",
            replicas.logs_about(&job)
        );
        for e in &edges {
            let reported = phases.get(&e.node).map_or(0, |(_, n)| *n);
            if !e.tasks().is_empty() && reported < 2 && phases[&e.node].0 == "InProgress" {
                if reported == 0 {
                    e.report_task("Check").await;
                }
                e.report_task("Pull").await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let j = prepull_job(&cluster, &job).await;
    let st = j.status.expect("status");
    assert_eq!(st.phase, "Completed");
    for t in &st.node_status {
        assert_eq!(t.action_flow.len(), 2, "no report lost: {t:?}");
    }
    for e in &edges {
        assert_eq!(
            e.tasks().len(),
            1,
            "{}: its task once, whatever replica",
            e.node
        );
    }
}
