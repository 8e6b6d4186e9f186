//! cloudcore runs with exactly the permissions of `manifests/rbac.yaml` and
//! `manifests/rbac-edge-requests.yaml` (impersonation off): the real binary, with
//! a token of the manifests' ServiceAccount against a real API server (RBAC on), bootstraps a
//! real edgecore and delivers objects to it with acknowledgements. With any one rule of the
//! ClusterRole or Role taken away it exits non-zero at start naming what it lacks, unless the
//! rule serves only requests made on behalf of edges; those are listed with what needs them.
//! A Rust edge of a real Node then sends each such request (and those of the verbs the start-up
//! check does not ask about, and of the uses it sees only through the dynamiccontroller) through
//! the WebSocket, or the metaServer's Applications, with the rule (or verb) and without it: it
//! succeeds, then the API server refuses cloudcore's identity and shows nothing changed.
//! (`interop_edgecore` runs every real-edgecore scenario with the same ServiceAccount.) With
//! `featureGates.requireAuthorization`, each rule of `manifests/optional/require-authorization.yaml`
//! is shown the same way: without it cloudcore exits at start naming it. With impersonation on,
//! `manifests/rbac.yaml` and `manifests/optional/impersonation.yaml` alone serve every one of
//! those edge requests, now decided as the node.
//!
//! Run: `cargo test -p cloudcore-server --test edgecore least_privilege`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine;
use beehive::{Content, Message};
use cloudcore_server::config::CloudCoreConfig;
use edgecore_interop::rbac::{
    Grants, RBAC_FILES, apply_manifests_rbac, client_of, manifests_dir, may, may_named,
    service_account_kubeconfig, service_account_kubeconfig_for,
};
use edgecore_interop::{CloudSpec, Cloudcore, EDGE_LABEL, Interop, Serial, kubectl_ok, store_key};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kubeedge_api::reliablesyncs::{ObjectSync, object_sync_name};
use serde_json::{Value, json};
use tokio::sync::oneshot;

async fn apply_file(path: &Path) -> Result<()> {
    kubectl_ok(&["apply", "-f", path.to_str().context("utf-8 path")?], None).await?;
    Ok(())
}

async fn apply_yaml(yaml: &str) -> Result<()> {
    kubectl_ok(&["apply", "-f", "-"], Some(yaml.as_bytes())).await?;
    Ok(())
}

/// One rule of a ClusterRole or of the Role (namespace kubeedge) in the RBAC manifests.
#[derive(Debug, Clone)]
struct Rule {
    /// `ClusterRole` or `Role`.
    kind: String,
    /// The role's name (`cloudcore`, `cloudcore-edge-requests`).
    role: String,
    /// Its position in that role's rules.
    index: usize,
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
    verbs: Vec<String>,
}

impl Rule {
    fn namespace(&self) -> &'static str {
        if self.kind == "Role" { "kubeedge" } else { "" }
    }

    /// Whether this rule grants `verb` on `group`/`resource` (object `name`, `""` for any) in
    /// `namespace`.
    fn grants(&self, verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> bool {
        let has = |list: &[String], x: &str| list.iter().any(|v| v == x || v == "*");
        (self.kind == "ClusterRole" || namespace == self.namespace())
            && has(&self.verbs, verb)
            && has(&self.groups, group)
            && has(&self.resources, resource)
            && (self.names.is_empty() || (!name.is_empty() && has(&self.names, name)))
    }

    fn label(&self) -> String {
        let names = match self.names.is_empty() {
            true => String::new(),
            false => format!(" named {}", self.names.join(",")),
        };
        format!(
            "{} {} [{}] {}{} {{{}}}",
            self.kind,
            self.role,
            self.groups
                .iter()
                .map(|g| if g.is_empty() { "core" } else { g })
                .collect::<Vec<_>>()
                .join(","),
            self.resources.join(","),
            names,
            self.verbs.join(",")
        )
    }
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The documents of the RBAC manifests ([`RBAC_FILES`]).
fn rbac_documents() -> Result<Vec<serde_json::Value>> {
    let mut docs = Vec::new();
    for file in RBAC_FILES {
        let text = std::fs::read_to_string(manifests_dir().join(file))?;
        // Empty documents are skipped.
        docs.extend(serde_saphyr::from_multiple::<serde_json::Value>(&text)?);
    }
    Ok(docs)
}

/// Applies the RBAC manifests again, whatever was applied in their place.
async fn apply_rbac() -> Result<()> {
    for file in RBAC_FILES {
        apply_file(&manifests_dir().join(file)).await?;
    }
    Ok(())
}

/// Whether `doc` is the role `rule` belongs to.
fn is_role_of(doc: &serde_json::Value, rule: &Rule) -> bool {
    doc["kind"].as_str() == Some(rule.kind.as_str())
        && doc["metadata"]["name"].as_str() == Some(rule.role.as_str())
}

fn rbac_rules() -> Result<Vec<Rule>> {
    rules_of(rbac_documents()?)
}

/// The documents of `manifests/optional/require-authorization.yaml` (featureGates.requireAuthorization).
fn gate_documents() -> Result<Vec<serde_json::Value>> {
    let text =
        std::fs::read_to_string(manifests_dir().join("optional/require-authorization.yaml"))?;
    Ok(serde_saphyr::from_multiple(&text)?)
}

/// That file without `rule` (a rule of its ClusterRole).
fn gate_without(rule: &Rule) -> Result<String> {
    let mut out = String::new();
    for mut doc in gate_documents()? {
        if doc["kind"] == "ClusterRole" {
            doc["rules"]
                .as_array_mut()
                .context("rules")?
                .remove(rule.index);
        }
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}

fn rules_of(documents: Vec<serde_json::Value>) -> Result<Vec<Rule>> {
    let mut rules = Vec::new();
    for doc in documents {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        for (index, r) in doc["rules"].as_array().context("rules")?.iter().enumerate() {
            rules.push(Rule {
                kind: kind.to_owned(),
                role: doc["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                index,
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                names: strings(&r["resourceNames"]),
                verbs: strings(&r["verbs"]),
            });
        }
    }
    Ok(rules)
}

/// The RBAC manifests without `rule`.
fn rbac_without(rule: &Rule) -> Result<String> {
    let mut out = String::new();
    for mut doc in rbac_documents()? {
        if is_role_of(&doc, rule) {
            let rules = doc["rules"].as_array_mut().context("rules")?;
            ensure!(rule.index < rules.len(), "no rule {}", rule.label());
            rules.remove(rule.index);
        }
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}

/// The RBAC manifests with `verb` taken out of `rule` (the rule itself when it is its only
/// verb).
fn rbac_without_verb(rule: &Rule, verb: &str) -> Result<String> {
    let mut out = String::new();
    for mut doc in rbac_documents()? {
        if is_role_of(&doc, rule) {
            let rules = doc["rules"].as_array_mut().context("rules")?;
            let r = rules.get_mut(rule.index).context("no such rule")?;
            let verbs = r["verbs"].as_array_mut().context("verbs")?;
            verbs.retain(|v| v.as_str() != Some(verb));
            if verbs.is_empty() {
                rules.remove(rule.index);
            }
        }
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc)?);
    }
    Ok(out)
}

/// A request only `rule` grants (no other rule of the manifests does), to see when the API
/// server has taken it away.
fn probe<'a>(rule: &'a Rule, all: &[Rule]) -> Result<(&'a str, &'a str, &'a str, &'a str)> {
    probe_verbs(rule, &rule.verbs, all)
}

/// [`probe`] among `verbs` of `rule` only.
fn probe_verbs<'a>(
    rule: &'a Rule,
    verbs: &'a [String],
    all: &[Rule],
) -> Result<(&'a str, &'a str, &'a str, &'a str)> {
    let name = rule.names.first().map_or("", String::as_str);
    for verb in verbs {
        for group in &rule.groups {
            for resource in &rule.resources {
                let elsewhere = all.iter().any(|o| {
                    (o.kind != rule.kind || o.role != rule.role || o.index != rule.index)
                        && o.grants(verb, group, resource, rule.namespace(), name)
                });
                if !elsewhere {
                    return Ok((verb, group, resource, name));
                }
            }
        }
    }
    bail!(
        "every request of {} is also granted by another rule",
        rule.label()
    )
}

/// An edge request that needs an edge-only rule (see [`EdgeWorld::request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EdgeCase {
    PodStatus,
    LegacyPodStatus,
    LegacyNodeStatus,
    NodeRegistration,
    MirrorPodCreate,
    PodDelete,
    Revocation,
    PersistentVolume,
    VolumeAttachment,
    Token,
    Event,
    Lease,
    Csr,
    /// An edge application lists the Services of a namespace through edgecore's metaServer
    /// (an Application to dynamiccontroller).
    MetaServiceList,
    /// An edge application lists the EndpointSlices of a namespace through the metaServer.
    MetaEndpointSliceList,
    /// Not an edge request: the API server asking the stream server for a pod's logs, which
    /// cloudcore authorizes with a SubjectAccessReview.
    StreamAuthorization,
}

/// How an edge-only rule is shown to be needed.
enum EdgeProof {
    /// By this request, which succeeds with the rule and is refused without it.
    Scenario(EdgeCase, &'static str),
}

/// Rules cloudcore's start-up check does not cover: it uses them only for requests made on
/// behalf of an edge (with `modules.cloudHub.authorization` off, as in these tests, with its
/// own identity) or for an optional feature. Each says what needs it and how a test here shows
/// it (`edge_only_rules_and_verbs_are_each_needed_by_an_edge_request`).
const EDGE_ONLY: &[(&str, EdgeProof)] = &[
    (
        "pods/status",
        EdgeProof::Scenario(
            EdgeCase::PodStatus,
            "an edge patches the status of its own pod",
        ),
    ),
    (
        "persistentvolumes",
        EdgeProof::Scenario(
            EdgeCase::PersistentVolume,
            "an edge queries the PersistentVolume of its pod's claim",
        ),
    ),
    (
        "volumeattachments",
        EdgeProof::Scenario(
            EdgeCase::VolumeAttachment,
            "an edge queries a VolumeAttachment to its node",
        ),
    ),
    (
        "serviceaccounts/token",
        EdgeProof::Scenario(
            EdgeCase::Token,
            "an edge asks for the projected service-account token of its pod",
        ),
    ),
    (
        "events",
        EdgeProof::Scenario(EdgeCase::Event, "an edge reports an event about its node"),
    ),
    (
        "leases",
        EdgeProof::Scenario(EdgeCase::Lease, "an edge creates its node lease"),
    ),
    (
        "certificatesigningrequests",
        EdgeProof::Scenario(
            EdgeCase::Csr,
            "an edge requests a kubelet client certificate",
        ),
    ),
    (
        "services",
        EdgeProof::Scenario(
            EdgeCase::MetaServiceList,
            "an edge application lists the Services of a namespace through the metaServer",
        ),
    ),
    (
        "endpointslices",
        EdgeProof::Scenario(
            EdgeCase::MetaEndpointSliceList,
            "an edge application lists the EndpointSlices of a namespace through the metaServer",
        ),
    ),
];
/// Rules and verbs the start-up check asks about only for the dynamiccontroller
/// (`modules.dynamicController`, enabled by default and here) that another module needs too,
/// for requests made on behalf of edges: with the dynamiccontroller disabled nothing at start
/// checks them, so that use is shown by its request as well (rule or verb taken away while
/// cloudcore runs). (resource, the verb or none for the whole rule, request, what it is)
const ALSO_NEEDED_BY: &[(&str, Option<&str>, EdgeCase, &str)] = &[
    (
        "subjectaccessreviews",
        None,
        EdgeCase::StreamAuthorization,
        "cloudstream: the API server's `kubectl logs` request to the stream server (Webhook \
         authorization)",
    ),
    (
        "configmaps",
        Some("patch"),
        EdgeCase::Revocation,
        "cloudhub: deleting an edge Node records the revocation of its certificates in \
         kubeedge/revokedcerts",
    ),
];
/// Verbs of rules the start-up check covers that it does not ask about itself, because only
/// edge requests (or an edge node's deletion) use them: each is shown needed by taking just
/// that verb away.
const EDGE_VERBS: &[(&str, &str, EdgeCase, &str)] = &[
    (
        "nodes",
        "create",
        EdgeCase::NodeRegistration,
        "an edge registers its own node",
    ),
    (
        "nodes/status",
        "update",
        EdgeCase::LegacyNodeStatus,
        "an edge writes its node's status the legacy way (nodestatus update)",
    ),
    (
        "pods",
        "create",
        EdgeCase::MirrorPodCreate,
        "an edge creates a mirror pod bound to itself",
    ),
    (
        "pods",
        "delete",
        EdgeCase::PodDelete,
        "an edge deletes its own pod",
    ),
    (
        "pods/status",
        "update",
        EdgeCase::LegacyPodStatus,
        "an edge writes its pod's status the legacy way (podstatus update)",
    ),
];

/// The [`ALSO_NEEDED_BY`] entries of `rule`: what else needs it (or one of its verbs).
fn also_needed_by(rule: &Rule) -> Vec<String> {
    ALSO_NEEDED_BY
        .iter()
        .filter(|(r, v, _, _)| {
            rule.resources.iter().any(|x| x == r)
                && v.is_none_or(|v| rule.verbs.iter().any(|x| x == v))
        })
        .map(|(_, v, _, what)| match v {
            Some(v) => format!("{v} also: {what}"),
            None => format!("also: {what}"),
        })
        .collect()
}

/// The [`EDGE_VERBS`] entry proving `verb` of `rule`, if any.
fn edge_verb(rule: &Rule, verb: &str) -> Option<&'static str> {
    EDGE_VERBS
        .iter()
        .find(|(r, v, _, _)| *v == verb && rule.resources.iter().any(|x| x == r))
        .map(|(_, _, _, what)| *what)
}

/// What the edge and ObjectSync must show for `pod` and `cfg` in `ns`.
async fn delivered(it: &mut Interop, client: &kube::Client, ns: &str) -> Result<()> {
    let node = it.node().to_owned();
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("cfg")
        .await?;
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    for (kind, name, meta) in [
        ("configmap", "cfg", &cm.metadata),
        ("pod", "web", &pod.metadata),
    ] {
        let uid = meta.uid.clone().unwrap_or_default();
        let rv = meta.resource_version.clone().unwrap_or_default();
        let key = store_key(ns, kind, name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            it.check_edge_alive()?;
            let stored = it.store().get(&key)?;
            let acked = Api::<ObjectSync>::namespaced(client.clone(), ns)
                .get_opt(&object_sync_name(&node, &uid))
                .await?
                .and_then(|r| r.status)
                .map(|s| s.object_resource_version);
            if stored.as_ref().is_some_and(|s| {
                s.uid() == Some(uid.as_str()) && s.resource_version() == Some(rv.as_str())
            }) && acked.as_deref() == Some(rv.as_str())
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("{key}: edge has {stored:?}, ObjectSync acked {acked:?}, want rv {rv}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn cloudcore_runs_an_edge_through_the_manifests_service_account() -> Result<()> {
    test_tiers::require!(ApiServer, Edgecore);
    let admin = k8s_testenv::client().await;
    // The core scenario through cloudcore with only those permissions: bootstrap, the node
    // connects, a pod and its ConfigMap reach the edge and their acknowledgements advance
    // ObjectSync, also after an update.
    let node = "least-privilege";
    let mut it = Interop::builder(node).service_account().start().await?;
    let sa = client_of(&it.cloud_spec().kubeconfig).await?;
    // Nothing beyond the manifests: the token is not an administrator's.
    ensure!(
        !may(&sa, "delete", "", "nodes", "").await?,
        "cloudcore may delete nodes"
    );
    let ns = k8s_testenv::namespace("least-privilege").await;
    let ns = ns.as_str();
    // The pod first: edgecontroller sends a ConfigMap once a pod on the node uses it.
    apply_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  nodeName: {node}\n  \
         containers:\n  - name: app\n    image: registry.invalid/app:1\n    volumeMounts:\n    - name: c\n      mountPath: /c\n  \
         volumes:\n  - name: c\n    configMap:\n      name: cfg\n"
    ))
    .await?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "create",
            "configmap",
            "cfg",
            "--from-literal=k=v1",
        ],
        None,
    )
    .await?;
    delivered(&mut it, &admin, ns).await?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "patch",
            "configmap",
            "cfg",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"v2"}}"#,
        ],
        None,
    )
    .await?;
    delivered(&mut it, &admin, ns).await?;
    let log = it.cloud().log();
    ensure!(
        !log.to_lowercase().contains("forbidden"),
        "cloudcore was refused something:\n{log}"
    );
    it.finish();
    Ok(())
}

/// How cloudcore fared without one rule.
enum Outcome {
    /// It exited during start-up; the log lines that name what it lacks.
    Refused(String),
    /// It started.
    Started,
}

/// The monitor server's setting as the manifests deploy it: callers' tokens are reviewed
/// (`/metrics` then needs one), so cloudcore checks its review permissions at start.
fn monitor_webhook() -> serde_json::Value {
    json!({"commonConfig": {"monitorServer": {"authorization": {"mode": "Webhook"}}}})
}

async fn run_without(rule: &Rule, all: &[Rule], kubeconfig: &Path, dir: &Path) -> Result<Outcome> {
    apply_yaml(&rbac_without(rule)?).await?;
    let sa = client_of(kubeconfig).await?;
    let (verb, group, resource, name) = probe(rule, all)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while may_named(&sa, verb, group, resource, rule.namespace(), name).await? {
        ensure!(
            Instant::now() < deadline,
            "{verb} {resource} still allowed 30 s after removing {}",
            rule.label()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut spec = CloudSpec::for_testenv(dir)?;
    spec.kubeconfig = kubeconfig.to_path_buf();
    // As the manifests deploy it: the monitor server reviews tokens.
    spec.extra = monitor_webhook();
    match Cloudcore::start(&spec).await {
        Ok(mut core) => {
            core.stop().await;
            Ok(Outcome::Started)
        }
        Err(e) => {
            let err = e.to_string();
            ensure!(
                err.contains("exited during start-up") && !err.contains("exit status: 0"),
                "without {}: {err}",
                rule.label()
            );
            let log = std::fs::read_to_string(spec.log_file())?;
            let named: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("missing permission") || l.contains("checking CRD"))
                .collect();
            Ok(Outcome::Refused(named.join("\n")))
        }
    }
}

/// Whether the start-up message `named` names a request of `rule`.
fn names_rule(named: &str, rule: &Rule) -> bool {
    if rule
        .resources
        .iter()
        .any(|r| r == "customresourcedefinitions")
    {
        return named.contains("checking CRD") && named.contains("forbidden");
    }
    rule.verbs.iter().any(|verb| {
        rule.groups.iter().any(|group| {
            rule.resources.iter().any(|resource| {
                named.contains(&format!(
                    "cannot {verb} resource {resource:?} in API group {group:?}"
                ))
            })
        })
    })
}

#[tokio::test]
async fn without_any_one_rule_cloudcore_names_it_at_start_or_it_is_an_edge_only_rule() -> Result<()>
{
    test_tiers::require!(ApiServer);
    // The interop scenarios hold this lock too: none of them may see the reduced role.
    let _serial = Serial::acquire()?;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = std::env::temp_dir().join(format!("cloudcore-per-rule-{}", std::process::id()));
    let kubeconfig = service_account_kubeconfig(&dir.join("sa")).await?;
    let rules = rbac_rules()?;
    ensure!(
        rules.len() > 20,
        "only {} rules in the RBAC manifests",
        rules.len()
    );
    let mut spec = CloudSpec::for_testenv(&dir.join("c"))?;
    spec.extra = monitor_webhook();
    let config = CloudCoreConfig::from_yaml(&spec.render()?)?;
    let mut checked = cloudcore_server::permissions::required(&config);
    // The monitor server reviews its callers, as the manifests deploy it.
    checked.extend(cloudcore_server::permissions::monitor());

    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let outcome = run_without(rule, &rules, &kubeconfig, &dir.join(format!("rule-{i}"))).await;
        let edge_only = EDGE_ONLY
            .iter()
            .find(|(r, _)| rule.resources.iter().any(|x| x == r));
        // Verbs of this rule that the start-up check asks about.
        let covered: Vec<&str> = rule
            .verbs
            .iter()
            .filter(|v| {
                checked.iter().any(|p| {
                    p.verb == v.as_str()
                        && rule.grants(p.verb, p.group, p.resource, p.namespace, p.name)
                })
            })
            .map(String::as_str)
            .collect();
        let uncovered: Vec<&str> = rule
            .verbs
            .iter()
            .map(String::as_str)
            .filter(|v| !covered.contains(v))
            .collect();
        let how = match (outcome, edge_only) {
            (Err(e), _) => {
                failures.push(format!("{}: {e:#}", rule.label()));
                format!("ERROR {e:#}")
            }
            (Ok(Outcome::Refused(named)), _) if names_rule(&named, rule) => {
                let first = named.lines().next().unwrap_or_default();
                // The clauses naming a permission ("cannot VERB resource ..."), or the CRD error.
                let clauses: Vec<&str> = first
                    .split(['(', ';', ':'])
                    .map(str::trim)
                    .filter(|c| c.starts_with("cannot "))
                    .collect();
                let first = match clauses.first() {
                    Some(c) if clauses.len() > 1 => {
                        format!("missing permission: {c} (+{} more)", clauses.len() - 1)
                    }
                    Some(c) => format!("missing permission: {c}"),
                    None => first
                        .find("checking CRD")
                        .map_or(first, |at| &first[at..])
                        .to_owned(),
                };
                let mut how = format!("exits at start: {first}");
                // The CRD check at start reads them itself, outside the permission list.
                let crds = rule
                    .resources
                    .iter()
                    .any(|r| r == "customresourcedefinitions");
                // An edge-only listing or an edge-verb entry the start-up check now covers is
                // stale: the table would claim a proof by an edge request where the check is one.
                if edge_only.is_some() {
                    failures.push(format!(
                        "{}: listed in EDGE_ONLY, yet cloudcore names it at start",
                        rule.label()
                    ));
                    how.push_str(" [listed in EDGE_ONLY: stale]");
                }
                for verb in &covered {
                    if edge_verb(rule, verb).is_some() {
                        failures.push(format!(
                            "{}: EDGE_VERBS lists {verb}, yet the start-up check asks for it",
                            rule.label()
                        ));
                        how.push_str(&format!(" [{verb} listed in EDGE_VERBS: stale]"));
                    }
                }
                for also in also_needed_by(rule) {
                    how.push_str(&format!(
                        " [{also}; proven by its request (see the edge-rule table)]"
                    ));
                }
                if edge_only.is_none() && !crds {
                    for verb in &uncovered {
                        match edge_verb(rule, verb) {
                            Some(what) => how.push_str(&format!(
                                " [{verb}: not in the start-up check; proven by an edge \
                                 request (see the edge-rule table): {what}]"
                            )),
                            None => how.push_str(&format!(
                                " [{verb}: not in the start-up check: not proven]"
                            )),
                        }
                    }
                }
                how
            }
            (Ok(Outcome::Refused(named)), _) => {
                failures.push(format!(
                    "{}: exits naming something else: {named}",
                    rule.label()
                ));
                format!("exits naming something else: {named}")
            }
            (Ok(Outcome::Started), Some((_, EdgeProof::Scenario(_, what)))) => format!(
                "starts; edge-only, proven by an edge request (see the edge-rule table): {what}"
            ),
            // A rule of edge-only verbs, each proven by its own edge request.
            (Ok(Outcome::Started), None)
                if rule.verbs.iter().all(|v| edge_verb(rule, v).is_some()) =>
            {
                let proofs: Vec<String> = rule
                    .verbs
                    .iter()
                    .map(|v| format!("{v}: {}", edge_verb(rule, v).unwrap_or_default()))
                    .collect();
                format!(
                    "starts; edge-only verbs, each proven by an edge request (see the edge-rule \
                     table): {}",
                    proofs.join("; ")
                )
            }
            (Ok(Outcome::Started), None) => {
                failures.push(format!(
                    "{}: cloudcore starts without it and no edge-only use is listed",
                    rule.label()
                ));
                "starts, and nothing listed needs it".to_owned()
            }
        };
        table.push(format!("{:<90} -> {how}", rule.label()));
    }
    // The manifests again, whatever happened.
    apply_rbac().await?;
    println!("rule of manifests/rbac.yaml removed -> how cloudcore fails without it");
    for row in &table {
        println!("{row}");
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn with_require_authorization_each_rule_of_its_optional_role_is_named_at_start_when_missing()
-> Result<()> {
    let _serial = Serial::acquire()?;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = std::env::temp_dir().join(format!("cloudcore-gate-rules-{}", std::process::id()));
    let kubeconfig = service_account_kubeconfig(&dir.join("sa")).await?;
    let file = manifests_dir().join("optional/require-authorization.yaml");
    apply_file(&file).await?;
    let gate_rules = rules_of(gate_documents()?)?;
    ensure!(gate_rules.len() >= 6, "only {} rules", gate_rules.len());
    let mut all = rbac_rules()?;
    // Indexes of the gate's rules stay their own: kept apart from the main ClusterRole's.
    all.extend(gate_rules.iter().cloned().map(|mut r| {
        r.kind = "GateClusterRole".into();
        r
    }));
    let gated = |dir: &Path| -> Result<CloudSpec> {
        let mut spec = CloudSpec::for_testenv(dir)?;
        spec.kubeconfig = kubeconfig.clone();
        spec.extra = json!({"featureGates": {"requireAuthorization": true}});
        Ok(spec)
    };
    // With the whole role, cloudcore starts.
    let sa = client_of(&kubeconfig).await?;
    let first = &gate_rules[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !may(
        &sa,
        &first.verbs[0],
        &first.groups[0],
        &first.resources[0],
        "",
    )
    .await?
    {
        ensure!(
            Instant::now() < deadline,
            "the gate's role not in effect after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut core = Cloudcore::start(&gated(&dir.join("whole"))?)
        .await
        .context("cloudcore with the whole optional role")?;
    core.stop().await;
    let mut failures = Vec::new();
    for (i, rule) in gate_rules.iter().enumerate() {
        apply_yaml(&gate_without(rule)?).await?;
        let mut as_gate = rule.clone();
        as_gate.kind = "GateClusterRole".into();
        let (verb, group, resource, name) = probe(&as_gate, &all)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while may_named(&sa, verb, group, resource, "", name).await? {
            ensure!(
                Instant::now() < deadline,
                "{verb} {resource} still allowed 30 s after removing {}",
                rule.label()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let spec = gated(&dir.join(format!("gate-rule-{i}")))?;
        match Cloudcore::start(&spec).await {
            Ok(mut core) => {
                core.stop().await;
                failures.push(format!("{}: cloudcore starts without it", rule.label()));
            }
            Err(e) => {
                let log = std::fs::read_to_string(spec.log_file())?;
                let named: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("missing permission") || l.contains("checking CRD"))
                    .collect();
                let named = named.join("\n");
                if !names_rule(&named, rule) {
                    failures.push(format!(
                        "{}: exits naming something else: {e}",
                        rule.label()
                    ));
                }
            }
        }
        apply_file(&file).await?;
    }
    // Back to the manifests without the optional role.
    kubectl_ok(
        &["delete", "-f", file.to_str().context("utf-8 path")?],
        None,
    )
    .await?;
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Edge-only rules, proven by the edge requests that need them
// ---------------------------------------------------------------------------------------------

/// A Rust edge with a certificate from the bootstrap token, connected over the real WebSocket
/// as edgecore connects; stopped on drop.
struct Edge {
    client: edge::hub::HubClient,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Message>>>>,
    pushed: Arc<Mutex<Vec<Message>>>,
}

impl Edge {
    async fn connect(core: &Cloudcore, node: &str) -> Result<Edge> {
        use edge::hub::{HubClient, HubClientConfig, HubEvent};
        let ports = core.spec().ports;
        let certs = edge::hub::bootstrap(
            &format!("https://{}", ports.https_addr()),
            &core.token()?,
            node,
        )
        .await?;
        let tls = Arc::new(certs.client_tls()?);
        let config = HubClientConfig::new(node, ports.websocket_addr().to_string());
        let (client, mut events) = HubClient::start(config, tls);
        let connected = tokio::time::timeout(Duration::from_secs(15), async {
            while let Some(ev) = events.recv().await {
                if matches!(ev, HubEvent::Connected) {
                    return true;
                }
            }
            false
        })
        .await;
        ensure!(connected == Ok(true), "edge {node} did not connect");
        let waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Message>>>> = Arc::default();
        let pushed: Arc<Mutex<Vec<Message>>> = Arc::default();
        let (w, p) = (waiting.clone(), pushed.clone());
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let HubEvent::Message(m) = ev else { continue };
                let waiter = match m.header.parent_id.is_empty() {
                    true => None,
                    false => w.lock().unwrap().remove(&*m.header.parent_id.as_str()),
                };
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(m);
                    }
                    None => p.lock().unwrap().push(m),
                }
            }
        });
        Ok(Edge {
            client,
            waiting,
            pushed,
        })
    }

    /// Sends a request as edgecore's edged does (cloudhub adds `node/<id>/` to `resource`);
    /// returns the receiver of its answer.
    async fn send(
        &self,
        resource: &str,
        operation: &str,
        content: &Value,
    ) -> Result<oneshot::Receiver<Message>> {
        let msg = Message::new()
            .with_route("edged", "meta", resource, operation)
            .with_content(Content::json(content)?);
        self.send_message(msg).await
    }

    /// Sends `msg` as a synchronous request; returns the receiver of its answer.
    async fn send_message(&self, mut msg: Message) -> Result<oneshot::Receiver<Message>> {
        msg.header.sync = true;
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap()
            .insert(msg.header.id.to_string(), tx);
        self.client.send(msg).await?;
        Ok(rx)
    }

    /// Sends a request and waits for its answer, decoded.
    async fn ask(&self, resource: &str, operation: &str, content: &Value) -> Result<Value> {
        let rx = self.send(resource, operation, content).await?;
        let answer = tokio::time::timeout(Duration::from_secs(15), rx)
            .await
            .with_context(|| format!("no answer to {operation} {resource}"))??;
        let text = answer.content.as_json();
        Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
    }

    /// Sends an Application as edgecore's metaServer does (route `metaserver` /
    /// `dynamiccontroller`, resource and operation `null`) and waits for the Application the
    /// dynamiccontroller answers (`Status` `Approved` or `Rejected`).
    async fn application(&self, verb: &str, key: &str, option: &Value) -> Result<Value> {
        let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.encode(v.to_string());
        let app = json!({"ID": format!("lp{}{}", suffix(), suffix()), "Key": key, "Verb": verb,
            "Nodename": "", "Option": b64(option), "ReqBody": null, "Subresource": "",
            "RespBody": null, "Status": "InApplying", "Reason": "",
            "Error": {"ErrStatus": {"metadata": {}}}, "Timestamp": "0001-01-01T00:00:00Z"});
        let msg = Message::new()
            .with_route("metaserver", "dynamiccontroller", "null", "null")
            .with_content(Content::json(&app)?);
        let rx = self.send_message(msg).await?;
        let answer = tokio::time::timeout(Duration::from_secs(15), rx)
            .await
            .with_context(|| format!("no answer to the Application {verb} {key}"))??;
        serde_json::from_str(answer.content.as_json())
            .with_context(|| format!("not an Application: {}", answer.content.as_json()))
    }

    /// Waits until the cloud has sent the edge a message for `resource`.
    async fn wait_pushed(&self, resource_suffix: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self
            .pushed
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.route.resource.ends_with(resource_suffix))
        {
            ensure!(
                Instant::now() < deadline,
                "the edge got nothing for {resource_suffix}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        self.client.stop();
    }
}

/// The Kubernetes status of an error answer (`ObjectResp` or raw), if it is one.
fn error_status(answer: &Value) -> Option<&Value> {
    [&answer["Err"]["ErrStatus"], &answer["ErrStatus"]]
        .into_iter()
        .find(|s| s.is_object())
}

/// The edge's world: its Node and, in `ns`, pod `web` bound to it that uses claim `data`
/// (bound to PersistentVolume `pv`) and a projected token of ServiceAccount `app`, and a
/// VolumeAttachment `va` to the node, and pod `gone` bound to it too, Service `lp-svc` and
/// EndpointSlice `lp-slice` (which a Role there lets the node read); and a second edge,
/// `newcomer`, whose Node `new_node` does not exist yet.
struct EdgeWorld {
    admin: kube::Client,
    core: Cloudcore,
    edge: Edge,
    node: String,
    newcomer: Edge,
    new_node: String,
    ns: String,
    pv: String,
    va: String,
}

fn suffix() -> String {
    beehive::new_id().replace('-', "")[..8].to_owned()
}

async fn create_as_admin(admin: &kube::Client, v: Value) -> Result<()> {
    let gvk: kube::api::GroupVersionKind = serde_json::from_value::<kube::api::TypeMeta>(
        json!({"apiVersion": v["apiVersion"], "kind": v["kind"]}),
    )?
    .try_into()?;
    let (resource, caps) = kube::discovery::pinned_kind(admin, &gvk).await?;
    let obj: kube::api::DynamicObject = serde_json::from_value(v)?;
    let api: Api<kube::api::DynamicObject> = match (caps.scope, obj.metadata.namespace.as_deref()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(admin.clone(), ns, &resource)
        }
        _ => Api::all_with(admin.clone(), &resource),
    };
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

impl EdgeWorld {
    async fn new(core: Cloudcore) -> Result<EdgeWorld> {
        let admin = k8s_testenv::client().await;
        let ns = k8s_testenv::namespace("lp-edge").await;
        let node = format!("lp-edge-{}", suffix());
        let (pv, va) = (format!("lp-pv-{}", suffix()), format!("lp-va-{}", suffix()));
        let objects = [
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {EDGE_LABEL: ""}}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "app", "namespace": ns}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "", "hostPath": {"path": "/tmp/least-privilege"},
                    "claimRef": {"namespace": ns, "name": "data"}}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                    "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}}),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": va}, "spec": {"attacher": "csi.example.com",
                    "nodeName": node, "source": {"persistentVolumeName": pv}}}),
            // What edge applications read through the metaServer. The cluster lets a node read
            // Services, but not EndpointSlices: granted to this node here, as deployments of
            // edge applications that read them do, so that the review as the node allows the
            // read and what is left to decide is cloudcore's own permission.
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "lp-svc", "namespace": ns},
                "spec": {"ports": [{"port": 80}]}}),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "lp-slice", "namespace": ns},
                "addressType": "IPv4", "endpoints": []}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "edge-reads", "namespace": ns},
                "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "edge-reads", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "edge-reads"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                    "name": format!("system:node:{node}")}]}),
        ];
        for obj in objects {
            create_as_admin(&admin, obj).await?;
        }
        let edge = Edge::connect(&core, &node).await?;
        edge.wait_pushed(&format!("/node/{node}")).await?;
        create_as_admin(
            &admin,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"nodeName": node, "serviceAccountName": "app",
                    "containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "token", "projected": {"sources":
                            [{"serviceAccountToken": {"path": "token"}}]}}]}}),
        )
        .await?;
        edge.wait_pushed(&format!("{ns}/pod/web")).await?;
        create_as_admin(
            &admin,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "gone", "namespace": ns},
                "spec": {"nodeName": node,
                    "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}}),
        )
        .await?;
        edge.wait_pushed(&format!("{ns}/pod/gone")).await?;
        let new_node = format!("lp-new-{}", suffix());
        let newcomer = Edge::connect(&core, &new_node).await?;
        Ok(EdgeWorld {
            admin,
            core,
            edge,
            node,
            newcomer,
            new_node,
            ns,
            pv,
            va,
        })
    }

    /// Sends the edge request `case` stands for. `Ok(None)`: it succeeded and the API server
    /// shows it; `Ok(Some(refusal))`: cloudcore's identity was refused and the API server is
    /// unchanged; `Err`: neither.
    async fn request(&self, case: EdgeCase, round: u32) -> Result<Option<String>> {
        let (admin, ns, node) = (&self.admin, self.ns.as_str(), self.node.as_str());
        let pods = Api::<Pod>::namespaced(admin.clone(), ns);
        let answer = match case {
            EdgeCase::LegacyPodStatus => {
                let ip = format!("10.1.3.{round}");
                let pod = pods.get("web").await?;
                let status = json!({"UID": pod.metadata.uid, "Name": "web",
                    "Status": {"phase": "Running", "podIP": ip}});
                let answer = self
                    .edge
                    .ask(&format!("{ns}/podstatus/web"), "update", &status)
                    .await?;
                let live_ip = pods.get("web").await?.status.and_then(|s| s.pod_ip);
                match error_status(&answer) {
                    None => ensure!(
                        answer == "OK" && live_ip.as_deref() == Some(ip.as_str()),
                        "legacy pod status answered {answer}, pod has {live_ip:?}"
                    ),
                    Some(_) => ensure!(
                        live_ip.as_deref() != Some(ip.as_str()),
                        "refused, yet the pod has podIP {ip}"
                    ),
                }
                answer
            }
            EdgeCase::LegacyNodeStatus => {
                let reason = format!("Round{round}");
                let status = json!({"UID": "u", "Status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": reason}],
                    "nodeInfo": {"kubeletVersion": "v1.31.0-kubeedge", "machineID": "",
                        "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                        "containerRuntimeVersion": "", "kubeProxyVersion": "",
                        "operatingSystem": "linux", "architecture": "amd64"}},
                    "ExtendResources": {}});
                let answer = self
                    .edge
                    .ask(&format!("default/nodestatus/{node}"), "update", &status)
                    .await?;
                let live = Api::<Node>::all(admin.clone()).get(node).await?;
                let ready = live
                    .status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == "Ready")
                    .and_then(|c| c.reason);
                match error_status(&answer) {
                    None => ensure!(
                        answer == "OK" && ready.as_deref() == Some(reason.as_str()),
                        "legacy node status answered {answer}, Ready reason {ready:?}"
                    ),
                    Some(_) => ensure!(
                        ready.as_deref() != Some(reason.as_str()),
                        "refused, yet the node is Ready with reason {reason}"
                    ),
                }
                answer
            }
            EdgeCase::NodeRegistration => {
                let new = self.new_node.as_str();
                let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": new, "labels": {"kubernetes.io/hostname": new, EDGE_LABEL: ""}}});
                let answer = self
                    .newcomer
                    .ask(&format!("default/node/{new}"), "insert", &body)
                    .await?;
                let live = Api::<Node>::all(admin.clone()).get_opt(new).await?;
                match error_status(&answer) {
                    None => ensure!(live.is_some(), "registration answered {answer}, no node"),
                    Some(_) => ensure!(live.is_none(), "refused, yet node {new} exists"),
                }
                answer
            }
            EdgeCase::MirrorPodCreate => {
                let own = Api::<Node>::all(admin.clone()).get(node).await?;
                let pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "static-web", "namespace": ns,
                        "annotations": {"kubernetes.io/config.mirror": "3f2a9c",
                            "kubernetes.io/config.source": "file"},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                            "uid": own.metadata.uid, "controller": true}]},
                    "spec": {"nodeName": node,
                        "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}});
                let answer = self
                    .edge
                    .ask(&format!("{ns}/pod/static-web"), "insert", &pod)
                    .await?;
                let live = pods.get_opt("static-web").await?;
                match error_status(&answer) {
                    None => ensure!(live.is_some(), "mirror pod answered {answer}, no pod"),
                    Some(_) => ensure!(live.is_none(), "refused, yet the mirror pod exists"),
                }
                answer
            }
            EdgeCase::PodDelete => {
                let uid = pods.get("gone").await?.metadata.uid;
                let options = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
                let answer = self
                    .edge
                    .ask(&format!("{ns}/pod/gone"), "delete", &options)
                    .await?;
                let live = pods.get_opt("gone").await?;
                match error_status(&answer) {
                    None => ensure!(
                        answer == "OK" && live.is_none(),
                        "pod delete answered {answer}, pod {live:?}"
                    ),
                    Some(_) => ensure!(live.is_some(), "refused, yet the pod is gone"),
                }
                answer
            }
            EdgeCase::Revocation => {
                let gone = format!("lp-rev-{}", suffix());
                let nodes = Api::<Node>::all(admin.clone());
                create_as_admin(
                    admin,
                    json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": gone, "labels": {EDGE_LABEL: ""}}}),
                )
                .await?;
                nodes.delete(&gone, &Default::default()).await?;
                let revoked = Api::<ConfigMap>::namespaced(admin.clone(), "kubeedge");
                let deadline = Instant::now() + Duration::from_secs(15);
                loop {
                    let recorded = revoked
                        .get_opt("revokedcerts")
                        .await?
                        .and_then(|c| c.data)
                        .is_some_and(|d| d.contains_key(&gone));
                    if recorded {
                        return Ok(None);
                    }
                    let log = self.core.log();
                    if let Some(line) = log
                        .lines()
                        .find(|l| l.contains("writing the revocation failed") && l.contains(&gone))
                    {
                        // cloudhub's log names no cause ("kubernetes"): the ConfigMap
                        // left without the entry, against the run with the verb, shows it.
                        let entry = revoked
                            .get_opt("revokedcerts")
                            .await?
                            .and_then(|c| c.data)
                            .is_some_and(|d| d.contains_key(&gone));
                        ensure!(!entry, "revocation of {gone} recorded after all");
                        let error = line.find("error=").map_or(line, |at| &line[at..]);
                        let error = format!("{error}; revokedcerts has no entry for the node");
                        return Ok(Some(error.to_owned()));
                    }
                    ensure!(
                        Instant::now() < deadline,
                        "revocation of {gone}: neither recorded nor refused"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            EdgeCase::PodStatus => {
                let ip = format!("10.1.2.{round}");
                let patch = json!({"status": {"phase": "Running", "podIP": ip}});
                let answer = self
                    .edge
                    .ask(&format!("{ns}/podpatch/web"), "patch", &patch)
                    .await?;
                let live = Api::<Pod>::namespaced(admin.clone(), ns).get("web").await?;
                let live_ip = live.status.and_then(|s| s.pod_ip);
                match error_status(&answer) {
                    None => ensure!(
                        answer["Object"]["status"]["podIP"] == ip.as_str()
                            && live_ip.as_deref() == Some(ip.as_str()),
                        "pod status patch answered {answer}, pod has {live_ip:?}"
                    ),
                    Some(_) => ensure!(
                        live_ip.as_deref() != Some(ip.as_str()),
                        "refused, yet the pod has podIP {ip}"
                    ),
                }
                answer
            }
            EdgeCase::PersistentVolume => {
                let answer = self
                    .edge
                    .ask(
                        &format!("default/persistentvolume/{}", self.pv),
                        "query",
                        &Value::Null,
                    )
                    .await?;
                if error_status(&answer).is_none() {
                    ensure!(
                        answer["kind"] == "PersistentVolume",
                        "PV query answered {answer}"
                    );
                }
                answer
            }
            EdgeCase::VolumeAttachment => {
                let answer = self
                    .edge
                    .ask(
                        &format!("default/volumeattachment/{}", self.va),
                        "query",
                        &Value::Null,
                    )
                    .await?;
                if error_status(&answer).is_none() {
                    ensure!(
                        answer["kind"] == "VolumeAttachment" && answer["spec"]["nodeName"] == node,
                        "VolumeAttachment query answered {answer}"
                    );
                }
                answer
            }
            EdgeCase::Token => {
                let pod = Api::<Pod>::namespaced(admin.clone(), ns).get("web").await?;
                let request = json!({"apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest", "metadata": {"name": "app", "namespace": ns},
                    "spec": {"expirationSeconds": 3600, "boundObjectRef": {"apiVersion": "v1",
                        "kind": "Pod", "name": "web", "uid": pod.metadata.uid}}});
                let answer = self
                    .edge
                    .ask(&format!("{ns}/serviceaccounttoken/app"), "query", &request)
                    .await?;
                if error_status(&answer).is_none() {
                    ensure!(
                        answer["kind"] == "TokenRequest"
                            && answer["status"]["token"]
                                .as_str()
                                .is_some_and(|t| !t.is_empty()),
                        "token request answered {answer}"
                    );
                }
                answer
            }
            EdgeCase::MetaServiceList | EdgeCase::MetaEndpointSliceList => {
                let (key, kind, name) = match case {
                    EdgeCase::MetaServiceList => ("core/v1/services", "ServiceList", "lp-svc"),
                    _ => (
                        "discovery.k8s.io/v1/endpointslices",
                        "EndpointSliceList",
                        "lp-slice",
                    ),
                };
                let app = self
                    .edge
                    .application("list", &format!("/{key}/{ns}/null"), &json!({}))
                    .await?;
                match app["Status"].as_str() {
                    Some("Approved") => {
                        let body = app["RespBody"].as_str().context("no RespBody")?;
                        let list: Value = serde_json::from_slice(
                            &base64::engine::general_purpose::STANDARD.decode(body)?,
                        )?;
                        let names: Vec<&str> = list["items"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|i| i["metadata"]["name"].as_str())
                            .collect();
                        ensure!(
                            list["kind"] == kind && names.contains(&name),
                            "list {key} approved with {list}"
                        );
                        return Ok(None);
                    }
                    Some("Rejected") => {
                        // The API server refusing cloudcore's own identity, not the review as
                        // the node refusing the edge.
                        let status = &app["Error"]["ErrStatus"];
                        let message = status["message"].as_str().unwrap_or_default();
                        ensure!(
                            status["code"] == 403
                                && message.contains("system:serviceaccount:kubeedge:cloudcore"),
                            "list {key} rejected otherwise: {app}"
                        );
                        return Ok(Some(message.to_owned()));
                    }
                    _ => bail!("list {key} answered {app}"),
                }
            }
            EdgeCase::StreamAuthorization => {
                let (status, body) = logs_as_apiserver(&self.core, ns, node).await?;
                // Authorized: the request goes on to the node (which has no tunnel here).
                if status != 500 {
                    ensure!(status != 403, "the review denied the API server: {body}");
                    return Ok(None);
                }
                // The review itself refused to cloudcore's own identity: answered 500.
                ensure!(
                    body.contains("Authorization error")
                        && body.contains("system:serviceaccount:kubeedge:cloudcore"),
                    "500 for another reason: {body}"
                );
                return Ok(Some(body));
            }
            EdgeCase::Event => {
                let name = format!("{node}.{round}");
                let event = json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": "default"},
                    "involvedObject": {"kind": "Node", "name": node, "uid": node},
                    "reason": "Started", "message": "started", "type": "Normal",
                    "source": {"component": "kubelet"}, "count": 1});
                // Events are never answered: the API server or cloudcore's log tells.
                drop(
                    self.edge
                        .send(&format!("default/event/{name}"), "insert", &event)
                        .await?,
                );
                let events = Api::<Event>::namespaced(admin.clone(), "default");
                let deadline = Instant::now() + Duration::from_secs(15);
                loop {
                    if events.get_opt(&name).await?.is_some() {
                        return Ok(None);
                    }
                    let log = self.core.log();
                    if let Some(line) = log
                        .lines()
                        .find(|l| l.contains("event not written") && l.contains(&name))
                    {
                        ensure!(
                            events.get_opt(&name).await?.is_none(),
                            "event {name} written after all"
                        );
                        // The API server refusing cloudcore's own identity.
                        ensure!(
                            line.contains("forbidden")
                                && line.contains("system:serviceaccount:kubeedge:cloudcore"),
                            "event {name} not written for another reason: {line}"
                        );
                        let error = line.find("error=").map_or(line, |at| &line[at..]);
                        return Ok(Some(error.to_owned()));
                    }
                    ensure!(
                        Instant::now() < deadline,
                        "event {name}: neither written nor refused"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            EdgeCase::Lease => {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                        "renewTime": "2026-01-01T00:00:00.000000Z"}});
                let answer = self
                    .edge
                    .ask(&format!("kube-node-lease/lease/{node}"), "insert", &lease)
                    .await?;
                let live = Api::<Lease>::namespaced(admin.clone(), "kube-node-lease")
                    .get_opt(node)
                    .await?;
                match error_status(&answer) {
                    None => ensure!(live.is_some(), "lease insert answered {answer}, no lease"),
                    Some(_) => ensure!(live.is_none(), "refused, yet the lease exists"),
                }
                answer
            }
            EdgeCase::Csr => {
                let name = format!("lp-csr-{}", suffix());
                let request = pki::EdgeCsr::generate(node)?;
                let pem = pki::to_pem("CERTIFICATE REQUEST", &request.csr_der);
                let csr = json!({"apiVersion": "certificates.k8s.io/v1",
                    "kind": "CertificateSigningRequest", "metadata": {"name": name},
                    "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                        "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"]}});
                let answer = self
                    .edge
                    .ask(
                        &format!("default/certificatesigningrequest/{name}"),
                        "insert",
                        &csr,
                    )
                    .await?;
                let live = Api::<CertificateSigningRequest>::all(admin.clone())
                    .get_opt(&name)
                    .await?;
                match error_status(&answer) {
                    None => ensure!(live.is_some(), "CSR insert answered {answer}, no CSR"),
                    Some(_) => ensure!(live.is_none(), "refused, yet the CSR exists"),
                }
                answer
            }
        };
        match error_status(&answer) {
            None => Ok(None),
            Some(status) => {
                let message = status["message"].as_str().unwrap_or_default();
                // The API server refusing cloudcore's own identity, not cloudcore refusing the
                // edge.
                ensure!(
                    status["code"] == 403
                        && message.contains("system:serviceaccount:kubeedge:cloudcore"),
                    "refused otherwise: {answer}"
                );
                Ok(Some(message.to_owned()))
            }
        }
    }
}

#[tokio::test]
async fn edge_only_rules_and_verbs_are_each_needed_by_an_edge_request() -> Result<()> {
    test_tiers::require!(ApiServer);
    let _serial = Serial::acquire()?;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = std::env::temp_dir().join(format!("cloudcore-edge-rules-{}", std::process::id()));
    let kubeconfig = service_account_kubeconfig(&dir.join("sa")).await?;
    let sa = client_of(&kubeconfig).await?;
    let rules = rbac_rules()?;
    let mut spec = CloudSpec::for_testenv(&dir.join("c"))?;
    spec.kubeconfig = kubeconfig.clone();
    // RBAC changes reach the authorizer without a restart, and the start-up check does not ask
    // about these rules: one cloudcore serves every case.
    let world = EdgeWorld::new(Cloudcore::start(&spec).await?).await?;
    // (resource, the verb taken away or none for the whole rule, request, what it is)
    let mut checks: Vec<(&str, Option<&str>, EdgeCase, &str)> = EDGE_ONLY
        .iter()
        .map(|(resource, EdgeProof::Scenario(case, what))| (*resource, None, *case, *what))
        .collect();
    checks.extend(
        EDGE_VERBS
            .iter()
            .map(|(resource, verb, case, what)| (*resource, Some(*verb), *case, *what)),
    );
    checks.extend(ALSO_NEEDED_BY.iter().copied());
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (round, (resource, verb, case, what)) in (1..).zip(checks) {
        let rule = rules
            .iter()
            .find(|r| {
                r.resources.iter().any(|x| x == resource)
                    && verb.is_none_or(|v| r.verbs.iter().any(|x| x == v))
            })
            .with_context(|| format!("no rule for {verb:?} {resource}"))?;
        let only: Vec<String> = verb.map(str::to_owned).into_iter().collect();
        let (p_verb, group, res, name) = match verb {
            Some(_) => probe_verbs(rule, &only, &rules)?,
            None => probe(rule, &rules)?,
        };
        let (reduced, taken) = match verb {
            Some(v) => (
                rbac_without_verb(rule, v)?,
                format!("{v} of {}", rule.label()),
            ),
            None => (rbac_without(rule)?, rule.label()),
        };
        // Without it first, so what the refused request would have created is not there yet.
        apply_yaml(&reduced).await?;
        wait_allowed(&sa, p_verb, group, res, rule.namespace(), name, false).await?;
        let without = world.request(case, 2 * round).await;
        apply_rbac().await?;
        wait_allowed(&sa, p_verb, group, res, rule.namespace(), name, true).await?;
        let with = world.request(case, 2 * round + 1).await;
        let row = match (with, without) {
            (Ok(None), Ok(Some(refusal))) => {
                let refusal: String = refusal.chars().take(110).collect();
                format!("proven: {what}: succeeds with it, refused without it ({refusal})")
            }
            (with, without) => {
                let row = format!("NOT shown: {what}: with it {with:?}, without it {without:?}");
                failures.push(format!("{taken}: {row}"));
                row
            }
        };
        table.push(format!("{taken:<70} -> {row}"));
    }
    apply_rbac().await?;
    println!(
        "edge-only rule (or verb) of manifests/rbac.yaml removed -> the edge request that needs it"
    );
    for row in &table {
        println!("{row}");
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    let EdgeWorld { mut core, .. } = world;
    core.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Waits (up to 30 s) until the identity of `client` may (`want`) or may not do the request.
async fn wait_allowed(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
    want: bool,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while may_named(client, verb, group, resource, namespace, name).await? != want {
        ensure!(
            Instant::now() < deadline,
            "{verb} {resource} still not allowed={want} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The DER of every PEM block of a file.
fn pem_blocks(path: &Path) -> Result<Vec<Vec<u8>>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    Ok(pki::pem_blocks(&text)?.into_iter().map(|b| b.der).collect())
}

/// `GET /containerLogs/…` on cloudcore's stream server with the API server's kubelet-client
/// certificate, as `kubectl logs` makes the API server do; the status and body of the answer.
async fn logs_as_apiserver(core: &Cloudcore, ns: &str, node: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pki_dir = k8s_testenv::env().pki();
    let ca = pem_blocks(&pki_dir.join("ca.crt"))?.remove(0);
    let cert = pem_blocks(&pki_dir.join("kubelet-client.crt"))?.remove(0);
    let key = pem_blocks(&pki_dir.join("kubelet-client.key"))?.remove(0);
    let tls = pki::tls::client_config(&ca, Some((&cert, &key)))?;
    let port = core.spec().ports.stream;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut io = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await?;
    let request = format!(
        "GET /containerLogs/{ns}/web/c?nodeName={node} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    );
    io.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), io.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status line: {answer:?}"))?;
    Ok((status, answer))
}

// ---------------------------------------------------------------------------------------------
// The impersonation variant of the manifests
// ---------------------------------------------------------------------------------------------

/// With `authorization.enable: true, debug: false` cloudcore makes its requests on behalf of
/// an edge as `system:node:<name>` (group `system:nodes`), so its ServiceAccount needs
/// `manifests/rbac.yaml` and `manifests/optional/impersonation.yaml` only: every edge request
/// the tables above prove needs an edge rule without impersonation succeeds here without
/// `manifests/rbac-edge-requests.yaml`, decided by the API server's Node authorizer.
#[tokio::test]
async fn impersonating_cloudcore_serves_every_edge_request_without_the_edge_request_rules()
-> Result<()> {
    let _serial = Serial::acquire()?;
    k8s_testenv::install_crds(&k8s_testenv::project_crds()).await;
    let dir = std::env::temp_dir().join(format!("cloudcore-impersonating-{}", std::process::id()));
    let result = async {
        let kubeconfig =
            service_account_kubeconfig_for(&dir.join("sa"), Grants::Impersonation).await?;
        let sa = client_of(&kubeconfig).await?;
        // Not one rule of the edge requests: they can only succeed as the node.
        for (verb, resource) in [
            ("create", "pods"),
            ("update", "pods/status"),
            ("create", "serviceaccounts/token"),
            ("create", "events"),
        ] {
            ensure!(
                !may(&sa, verb, "", resource, "").await?,
                "cloudcore's own identity may {verb} {resource}"
            );
        }
        let mut spec = CloudSpec::for_testenv(&dir.join("c"))?;
        spec.kubeconfig = kubeconfig;
        spec.impersonate = true;
        let world = EdgeWorld::new(Cloudcore::start(&spec).await?).await?;
        let all = EDGE_ONLY
            .iter()
            .map(|(_, EdgeProof::Scenario(case, what))| (*case, *what))
            .chain(EDGE_VERBS.iter().map(|(_, _, case, what)| (*case, *what)))
            .chain(
                ALSO_NEEDED_BY
                    .iter()
                    .map(|(_, _, case, what)| (*case, *what)),
            );
        let mut cases: Vec<(EdgeCase, &str)> = Vec::new();
        for (case, what) in all {
            if !cases.iter().any(|(c, _)| *c == case) {
                cases.push((case, what));
            }
        }
        let mut failures = Vec::new();
        for (round, (case, what)) in (1..).zip(cases) {
            match world.request(case, round).await {
                Ok(None) => println!("{what:<90} -> succeeds"),
                other => failures.push(format!("{what}: {other:?}")),
            }
        }
        let log = world.core.log_tail(200);
        let EdgeWorld { mut core, .. } = world;
        core.stop().await;
        ensure!(
            failures.is_empty(),
            "{}\ncloudcore's log:\n{log}",
            failures.join("\n")
        );
        Ok(())
    }
    .await;
    // The other variant again, whatever happened: the other scenarios expect it.
    apply_manifests_rbac().await?;
    let _ = std::fs::remove_dir_all(&dir);
    result
}
