//! Why `kubectl logs/exec` would fail for one node.
//!
//! The API server reaches an edge's kubelet API at the Node's InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port`; the request only arrives when, in order: the
//! edge has a cloudhub session here, its edgestream has a tunnel here, the Node advertises the
//! port this cloudcore redirects, the DNAT rule for that port exists, and the certificates
//! still verify. [`diagnose`] checks each of these for one node and names the first that
//! fails; the monitor server answers it at `GET /debug/nodes/{name}` and
//! `cloudcore diagnose <node>` prints it.

use std::fmt::Write as _;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::BytesMut;
use cloudhub::HubHandle;
use cloudstream::CloudStreamHandle;
use cloudstream::iptables::{CHAIN, CommandRunner};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kubeedge_wire::http1::{self, BodyReader, HttpError};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// A certificate expiring within this many days makes the report a warning.
pub const CERT_WARN_DAYS: i64 = 30;

/// Who keeps the tunnel-port DNAT rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesCheck {
    /// `modules.iptablesManager` is disabled: nodes advertise the stream port itself.
    NotManaged,
    /// cloudcore keeps the rule itself; a missing rule is a failure.
    Internal,
    /// The iptables-manager DaemonSet keeps it, usually in another network namespace; the
    /// rule is reported when readable here but never fails the check.
    External,
}

/// What the checks read: the running modules and how the tunnel port is exposed.
#[derive(Clone)]
pub struct Sources {
    /// cloudhub, when enabled.
    pub hub: Option<HubHandle>,
    /// cloudstream, when enabled.
    pub stream: Option<CloudStreamHandle>,
    /// The API server, when connected.
    pub kube: Option<kube::Client>,
    /// The kubelet port cloudstream writes into connecting Nodes.
    pub advertised_port: Option<u16>,
    /// The address the DNAT rule sends to: this replica's (`replicas.address`).
    pub replica_ip: String,
    /// Who keeps the DNAT rule.
    pub iptables: IptablesCheck,
    /// Runs `iptables -C` for the rule check.
    pub runner: Arc<dyn CommandRunner>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("hub", &self.hub)
            .field("stream", &self.stream)
            .field("kube", &self.kube.is_some())
            .field("advertised_port", &self.advertised_port)
            .field("replica_ip", &self.replica_ip)
            .field("iptables", &self.iptables)
            .finish_non_exhaustive()
    }
}

/// The slot the monitor server reads: empty until the modules run (standby, starting).
#[derive(Debug, Clone, Default)]
pub struct Diagnostics(Arc<RwLock<Option<Sources>>>);

impl Diagnostics {
    /// Makes the running modules diagnosable.
    pub fn set(&self, sources: Sources) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(sources);
    }

    /// Forgets them (shutdown).
    pub fn clear(&self) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The current sources, if the modules run.
    pub fn sources(&self) -> Option<Sources> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The node's cloudhub session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HubFacts {
    /// cloudhub runs in this cloudcore.
    pub enabled: bool,
    /// The node has a session now.
    pub connected: bool,
    /// How long the session has been up.
    pub session_age_seconds: Option<u64>,
}

/// The node's edgestream tunnel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TunnelFacts {
    /// cloudstream runs in this cloudcore.
    pub enabled: bool,
    /// The node has a tunnel now.
    pub connected: bool,
    /// The internal IP the tunnel registered.
    pub address: Option<String>,
}

/// The kubelet port the API server will dial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortFacts {
    /// The port this cloudcore writes into Nodes (negotiated, or the stream port).
    pub advertised: Option<u16>,
    /// Whether the Node object exists; `None` without an API server (or on error).
    pub node_exists: Option<bool>,
    /// The Node's `status.daemonEndpoints.kubeletEndpoint.Port`.
    pub node_port: Option<i32>,
    /// Why the Node could not be read, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The DNAT rule of the advertised port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IptablesFacts {
    /// `notManaged`, `internal` or `external`.
    pub mode: String,
    /// Whether the rule exists here; `None` when not checked or not readable.
    pub rule_present: Option<bool>,
    /// The rule, or why it was not checked.
    pub detail: String,
}

/// One certificate's expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertFacts {
    /// Which certificate.
    pub name: String,
    /// Its `notAfter`, RFC 3339.
    pub not_after: String,
    /// Whole days left (negative once expired).
    pub days_left: i64,
}

/// How the node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// Every check passed.
    Ok,
    /// Works now, will not for long.
    Warning,
    /// `kubectl logs/exec` fails.
    Failing,
}

/// Everything [`diagnose`] found for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The node.
    pub node: String,
    /// Its cloudhub session.
    pub hub: HubFacts,
    /// Its tunnel.
    pub tunnel: TunnelFacts,
    /// The kubelet port.
    pub port: PortFacts,
    /// The DNAT rule.
    pub iptables: IptablesFacts,
    /// cloudhub's certificates.
    pub certificates: Vec<CertFacts>,
    /// The outcome.
    pub status: Status,
    /// The first failing check (`hub`, `tunnel`, `node`, `port`, `iptables`,
    /// `certificate`), `None` when ok.
    pub check: Option<String>,
    /// One line saying what to fix (`ok` when nothing).
    pub verdict: String,
}

/// Checks `node` against `sources`.
pub async fn diagnose(sources: &Sources, node: &str) -> Report {
    let hub = HubFacts {
        enabled: sources.hub.is_some(),
        connected: sources
            .hub
            .as_ref()
            .is_some_and(|h| h.session_age(node).is_some()),
        session_age_seconds: sources
            .hub
            .as_ref()
            .and_then(|h| h.session_age(node))
            .map(|d| d.as_secs()),
    };
    let address = sources.stream.as_ref().and_then(|s| s.tunnel_ip(node));
    let tunnel = TunnelFacts {
        enabled: sources.stream.is_some(),
        connected: address.is_some(),
        address,
    };
    let port = port_facts(sources, node).await;
    let iptables = iptables_facts(sources).await;
    let certificates = sources.hub.as_ref().map(cert_facts).unwrap_or_default();

    let (status, check, verdict) = verdict(
        sources,
        node,
        &hub,
        &tunnel,
        &port,
        &iptables,
        &certificates,
    );
    Report {
        node: node.to_owned(),
        hub,
        tunnel,
        port,
        iptables,
        certificates,
        status,
        check: check.map(str::to_owned),
        verdict,
    }
}

async fn port_facts(sources: &Sources, node: &str) -> PortFacts {
    let mut facts = PortFacts {
        advertised: sources.advertised_port,
        node_exists: None,
        node_port: None,
        error: None,
    };
    if let Some(client) = &sources.kube {
        match Api::<Node>::all(client.clone()).get_opt(node).await {
            Ok(Some(n)) => {
                facts.node_exists = Some(true);
                facts.node_port = n
                    .status
                    .and_then(|s| s.daemon_endpoints)
                    .and_then(|d| d.kubelet_endpoint)
                    .map(|k| k.port);
            }
            Ok(None) => facts.node_exists = Some(false),
            Err(e) => facts.error = Some(e.to_string()),
        }
    }
    facts
}

async fn iptables_facts(sources: &Sources) -> IptablesFacts {
    let mode = match sources.iptables {
        IptablesCheck::NotManaged => {
            return IptablesFacts {
                mode: "notManaged".into(),
                rule_present: None,
                detail: "not managed (modules.iptablesManager disabled): nodes advertise the \
                         stream port itself"
                    .into(),
            };
        }
        IptablesCheck::Internal => "internal",
        IptablesCheck::External => "external",
    };
    let (Some(port), Some(stream)) = (sources.advertised_port, &sources.stream) else {
        return IptablesFacts {
            mode: mode.into(),
            rule_present: None,
            detail: "cloudstream is not running".into(),
        };
    };
    let ip = sources.replica_ip.as_str();
    let v6 = ip.contains(':');
    let to = if v6 {
        format!("[{ip}]:{}", stream.stream_addr().port())
    } else {
        format!("{ip}:{}", stream.stream_addr().port())
    };
    let program = if v6 { "ip6tables" } else { "iptables" };
    // The manager's own rule form, so `-C` matches what it appended.
    let args: Vec<String> = [
        "-C", CHAIN, "-t", "nat", "-p", "tcp", "-j", "DNAT", "--dport",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([port.to_string(), "--to".into(), to.clone()])
    .collect();
    let rule = format!("{CHAIN}: tcp dport {port} DNAT to {to}");
    let (rule_present, detail) = match sources.runner.run(program, &args).await {
        Ok(out) if out.success() => (Some(true), rule),
        Ok(out)
            if out.status == Some(127)
                || out.stderr.contains("you must be root")
                || out.stderr.contains("Permission denied") =>
        {
            (None, format!("cannot read iptables: {}", out.stderr.trim()))
        }
        Ok(_) => (Some(false), format!("missing: {rule}")),
        Err(e) => (None, format!("cannot run {program}: {e}")),
    };
    let detail = match (sources.iptables, rule_present) {
        (IptablesCheck::External, None) => {
            format!("managed externally by the iptables-manager DaemonSet ({detail})")
        }
        _ => detail,
    };
    IptablesFacts {
        mode: mode.into(),
        rule_present,
        detail,
    }
}

fn cert_facts(hub: &HubHandle) -> Vec<CertFacts> {
    let now = pki::unix_now();
    [
        ("cloudhub server", hub.server_cert().cert_der.as_slice()),
        ("cloudhub CA", hub.ca().cert_der()),
    ]
    .into_iter()
    .filter_map(|(name, der)| cert_fact(name, der, now))
    .collect()
}

fn cert_fact(name: &str, der: &[u8], now: i64) -> Option<CertFacts> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let not_after = cert.validity().not_after.timestamp();
    Some(CertFacts {
        name: name.into(),
        not_after: pki::rfc3339(not_after),
        days_left: (not_after - now).div_euclid(86_400),
    })
}

fn verdict(
    sources: &Sources,
    node: &str,
    hub: &HubFacts,
    tunnel: &TunnelFacts,
    port: &PortFacts,
    iptables: &IptablesFacts,
    certs: &[CertFacts],
) -> (Status, Option<&'static str>, String) {
    let fail = |check, text: String| (Status::Failing, Some(check), text);
    if !hub.enabled {
        return fail(
            "hub",
            "cloudhub is not enabled in this cloudcore: enable modules.cloudHub".into(),
        );
    }
    if !hub.connected {
        return fail(
            "hub",
            format!(
                "{node} is not connected to this cloudcore: check edgecore's \
                 modules.edgeHub (websocket server address, httpServer) and token, and that \
                 this cloudcore's cloudHub port is reachable from the edge"
            ),
        );
    }
    if !tunnel.enabled {
        return fail(
            "tunnel",
            "cloudstream is not enabled in this cloudcore: enable modules.cloudStream".into(),
        );
    }
    if !tunnel.connected {
        return fail(
            "tunnel",
            format!(
                "edgestream of {node} is not connected: enable modules.edgeStream in \
                 edgecore.yaml and check that it reaches this cloudcore's tunnel port {} \
                 (default 10004)",
                sources
                    .stream
                    .as_ref()
                    .map(|s| s.tunnel_addr().port())
                    .unwrap_or_default()
            ),
        );
    }
    if port.node_exists == Some(false) {
        return fail(
            "node",
            format!(
                "the Node object {node} does not exist: the API server has nowhere to send kubectl logs/exec"
            ),
        );
    }
    if let (Some(advertised), Some(true)) = (port.advertised, port.node_exists)
        && port.node_port != Some(i32::from(advertised))
    {
        let has = port.node_port.map_or_else(
            || "no kubelet port".to_owned(),
            |p| format!("kubelet port {p}"),
        );
        return fail(
            "port",
            format!(
                "Node {node} advertises {has} but this cloudcore serves port {advertised}: the \
                 API server dials the wrong port; reconnect edgestream (restart edgecore) so \
                 cloudstream rewrites it, and check that no other cloudcore or kubelet \
                 overwrites status.daemonEndpoints"
            ),
        );
    }
    if sources.iptables == IptablesCheck::Internal && iptables.rule_present != Some(true) {
        return fail(
            "iptables",
            format!(
                "iptables rule missing ({}): run cloudcore as root with NET_ADMIN in the host \
                 network, or set modules.iptablesManager.mode: external and run \
                 `cloudcore iptables-manager`",
                iptables.detail
            ),
        );
    }
    if let Some(c) = certs.iter().min_by_key(|c| c.days_left) {
        if c.days_left < 0 {
            return fail(
                "certificate",
                format!(
                    "the {} certificate expired on {}: renew it",
                    c.name, c.not_after
                ),
            );
        }
        if c.days_left < CERT_WARN_DAYS {
            return (
                Status::Warning,
                Some("certificate"),
                format!(
                    "the {} certificate expires in {} days ({}): renew it",
                    c.name, c.days_left, c.not_after
                ),
            );
        }
    }
    (Status::Ok, None, "ok".into())
}

/// Why a report could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The monitor server did not answer.
    #[error("monitor server {addr}: {source}")]
    Io {
        /// Where.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// It answered, but not with a report.
    #[error("monitor server answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// The answer is not a report.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// No answer in time.
    #[error("monitor server {0} did not answer in time")]
    Timeout(String),
    /// Not a node name.
    #[error("{0:?} is not a node name")]
    InvalidNode(String),
}

/// The largest report [`fetch_report`] reads: a report is a few hundred bytes.
const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// Asks the monitor server at `monitor` (`host:port`) about `node`, with `token` as the
/// bearer token when the server authorizes callers.
pub async fn fetch_report(
    monitor: &str,
    node: &str,
    token: Option<&str>,
) -> Result<Report, FetchError> {
    if !kubeedge_api::validation::is_dns1123_subdomain(node) {
        return Err(FetchError::InvalidNode(node.to_owned()));
    }
    let io = |source| FetchError::Io {
        addr: monitor.to_owned(),
        source,
    };
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(monitor).await.map_err(io)?;
        let authorization = token
            .map(|t| format!("Authorization: Bearer {}\r\n", t.trim()))
            .unwrap_or_default();
        let request = format!(
            "GET /debug/nodes/{node} HTTP/1.1\r\nHost: {monitor}\r\nAccept: application/json\r\n{authorization}Connection: close\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.map_err(io)?;
        let answer = |e: HttpError| match e {
            HttpError::Io(e) => io(e),
            e => FetchError::Malformed(e.to_string()),
        };
        let mut buf = BytesMut::new();
        let head = http1::read_response_head(&mut conn, &mut buf)
            .await
            .map_err(answer)?;
        let mut reader = BodyReader::new(&head);
        let mut body = Vec::new();
        while let Some(piece) = reader
            .next(&mut conn, &mut buf, 64 * 1024)
            .await
            .map_err(answer)?
        {
            if body.len() + piece.len() > MAX_REPORT_BYTES {
                return Err(FetchError::Malformed(format!(
                    "answer larger than {MAX_REPORT_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&piece);
        }
        Ok::<_, FetchError>((head.status, body))
    };
    let (status, body) = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| FetchError::Timeout(monitor.to_owned()))??;
    if status != 200 {
        return Err(FetchError::Status {
            status,
            body: String::from_utf8_lossy(&body).trim().to_owned(),
        });
    }
    serde_json::from_slice(&body).map_err(|e| FetchError::Malformed(e.to_string()))
}

impl Report {
    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "node {}", self.node);
        let hub = match (self.hub.enabled, self.hub.session_age_seconds) {
            (false, _) => "cloudhub disabled".to_owned(),
            (true, Some(age)) => format!("connected for {age}s"),
            (true, None) => "not connected".to_owned(),
        };
        let _ = writeln!(out, "  hub session:   {hub}");
        let tunnel = match (self.tunnel.enabled, &self.tunnel.address) {
            (false, _) => "cloudstream disabled".to_owned(),
            (true, Some(ip)) => format!("connected, streams go to {ip}"),
            (true, None) => "not connected".to_owned(),
        };
        let _ = writeln!(out, "  tunnel:        {tunnel}");
        let ours = self
            .port
            .advertised
            .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        let node = match (self.port.node_exists, self.port.node_port, &self.port.error) {
            (_, _, Some(e)) => format!("Node unreadable ({e})"),
            (None, _, _) => "Node not checked (no API server)".to_owned(),
            (Some(false), _, _) => "no Node object".to_owned(),
            (Some(true), Some(p), _) => format!("Node advertises {p}"),
            (Some(true), None, _) => "Node advertises no kubelet port".to_owned(),
        };
        let _ = writeln!(out, "  kubelet port:  cloudcore serves {ours}; {node}");
        let _ = writeln!(
            out,
            "  iptables:      {} ({})",
            self.iptables.detail, self.iptables.mode
        );
        for c in &self.certificates {
            let _ = writeln!(
                out,
                "  certificate:   {} expires {} ({} days)",
                c.name, c.not_after, c.days_left
            );
        }
        let status = match self.status {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Failing => "FAILING",
        };
        let _ = writeln!(out, "{status}: {}", self.verdict);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connected() -> (Sources, HubFacts, TunnelFacts, PortFacts, IptablesFacts) {
        let sources = Sources {
            hub: None,
            stream: None,
            kube: None,
            advertised_port: Some(10350),
            replica_ip: "127.0.0.1".into(),
            iptables: IptablesCheck::NotManaged,
            runner: Arc::new(cloudstream::iptables::SystemRunner::new()),
        };
        let hub = HubFacts {
            enabled: true,
            connected: true,
            session_age_seconds: Some(5),
        };
        let tunnel = TunnelFacts {
            enabled: true,
            connected: true,
            address: Some("10.0.0.5".into()),
        };
        let port = PortFacts {
            advertised: Some(10350),
            node_exists: Some(true),
            node_port: Some(10350),
            error: None,
        };
        let iptables = IptablesFacts {
            mode: "notManaged".into(),
            rule_present: None,
            detail: String::new(),
        };
        (sources, hub, tunnel, port, iptables)
    }

    fn certificate(days: u32) -> Vec<u8> {
        let ca = pki::CertificateAuthority::generate().unwrap();
        let mut options = pki::IssueOptions::edge("n");
        options.validity_days = days;
        ca.issue(&options).unwrap().cert_der
    }

    #[test]
    fn a_certificate_expiring_soon_should_warn_and_an_expired_one_should_fail() {
        let (sources, hub, tunnel, port, iptables) = connected();
        let now = pki::unix_now();
        let soon = cert_fact("cloudhub server", &certificate(10), now).unwrap();
        assert!((9..=10).contains(&soon.days_left), "{soon:?}");
        let (status, check, text) =
            verdict(&sources, "n", &hub, &tunnel, &port, &iptables, &[soon]);
        assert_eq!((status, check), (Status::Warning, Some("certificate")));
        assert!(
            text.starts_with("the cloudhub server certificate expires in"),
            "{text}"
        );

        // A 10-day certificate looked at 11 days on.
        let late = cert_fact("cloudhub server", &certificate(10), now + 11 * 86_400).unwrap();
        assert!(late.days_left < 0, "{late:?}");
        let (status, check, text) =
            verdict(&sources, "n", &hub, &tunnel, &port, &iptables, &[late]);
        assert_eq!((status, check), (Status::Failing, Some("certificate")));
        assert!(text.contains("expired on"), "{text}");

        let fine = cert_fact("cloudhub CA", &certificate(365), now).unwrap();
        let (status, check, text) =
            verdict(&sources, "n", &hub, &tunnel, &port, &iptables, &[fine]);
        assert_eq!((status, check, text.as_str()), (Status::Ok, None, "ok"));
    }
}
