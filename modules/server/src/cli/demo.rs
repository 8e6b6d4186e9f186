//! `--demo`: the whole system in one process, with no Kubernetes cluster.
//!
//! Real: cloudhub (TLS WebSocket, certificate server, bootstrap tokens, reliable delivery with
//! ACKs), cloudstream (tunnel and stream servers), and N edge nodes built from the `edge` crate
//! (token bootstrap, hub client, stream agent, a tiny kubelet). Replaced: the Kubernetes API
//! server and the controllers — a scripted `edgecontroller` module sends one pod to each node
//! and prints the statuses the nodes report; acknowledgement records live in memory; the
//! `kubectl logs` request comes from this process with an API-server-like client certificate.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::{Bus, Content, Message, constants::operation};
use cloudhub::{CloudHub, CloudHubConfig, ListenerConfig, MemoryStore};
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamTls, ServerTls, StaticPods, TlsMaterial,
};
use edge::hub::{HubClient, HubClientConfig, HubEvent, bootstrap};
use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent};
use kubeedge_api::names;
use pki::{ExtKeyUsage, IssueOptions};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivateSec1KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
}

fn material(cert_der: &[u8], key_der: &[u8], ca_der: &[u8]) -> TlsMaterial {
    TlsMaterial {
        cert_chain: vec![CertificateDer::from(cert_der.to_vec())],
        key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(key_der.to_vec())),
        ca: vec![CertificateDer::from(ca_der.to_vec())],
    }
}

/// A kubelet stand-in: answers `/containerLogs/...` with a few lines naming the pod.
async fn kubelet(node: String) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    actix_rt::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let node = node.clone();
            actix_rt::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let path = String::from_utf8_lossy(&head)
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .to_owned();
                let body = format!(
                    "[{node}] container started\n[{node}] serving {path}\n[{node}] all good\n"
                );
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(addr)
}

/// One simulated edge node: bootstrap with the token, hub client, stream agent, kubelet.
async fn start_edge(
    node: String,
    ip: &str,
    https: SocketAddr,
    websocket: SocketAddr,
    tunnel: SocketAddr,
    token: &str,
) -> anyhow::Result<(HubClient, edge::stream::AgentHandle)> {
    let certs = bootstrap(&format!("https://{https}"), token, &node)
        .await
        .with_context(|| format!("{node}: bootstrap"))?;
    let tls = Arc::new(certs.client_tls()?);
    let (client, mut events) =
        HubClient::start(HubClientConfig::new(&node, websocket.to_string()), tls);
    // The edge side of a pod: store it (the client already acknowledged it), report it running.
    let reporter = client.clone();
    let name = node.clone();
    actix_rt::spawn(async move {
        while let Some(event) = events.recv().await {
            let HubEvent::Message(m) = event else {
                continue;
            };
            if m.route.operation != operation::INSERT || !m.route.resource.contains("/pod/") {
                continue;
            }
            let pod: serde_json::Value = m.content.parse().unwrap_or_default();
            let pod_name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            say(format!(
                "  {name}: received pod {pod_name} (resourceVersion {})",
                m.header.resource_version
            ));
            let status = serde_json::json!({"UID": pod["metadata"]["uid"], "Name": pod_name, "Status": {"phase": "Running"}});
            let report = Message::new()
                .with_route(
                    "edged",
                    "meta",
                    format!("default/podstatus/{pod_name}"),
                    operation::UPDATE,
                )
                .with_content(Content::json(&status).unwrap_or_default());
            let _ = reporter.send(report).await;
        }
    });
    let kubelet = kubelet(node.clone()).await?;
    let mut options = AgentOptions::new(&node, ip);
    options.kubelet = kubelet;
    // The tunnel server is verified against the CA from bootstrap, like the hub.
    let stream_tls =
        edge::stream::client_tls(&material(&certs.cert_der, &certs.key_der, &certs.ca_der))?;
    let config = EdgeStreamConfig {
        enable: true,
        server: tunnel.to_string(),
        ..EdgeStreamConfig::default()
    };
    let agent = StreamAgent::new(config, options, stream_tls).spawn();
    Ok((client, agent))
}

/// `GET https://<stream>/containerLogs/default/<pod>/app` as the API server would, with a
/// client certificate from the CA the stream server trusts.
async fn fetch_logs(
    stream: SocketAddr,
    client: Arc<rustls::ClientConfig>,
    pod: &str,
) -> anyhow::Result<String> {
    let tcp = TcpStream::connect(stream).await?;
    let connector = tokio_rustls::TlsConnector::from(client);
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1")?.to_owned(), tcp)
        .await?;
    let req = format!(
        "GET /containerLogs/default/{pod}/app HTTP/1.1\r\nHost: {stream}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw)).await??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no response head")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "stream server answered {}",
            head.lines().next().unwrap_or_default()
        );
    }
    // Chunked: drop the size lines.
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    Ok(out)
}

pub(crate) async fn run(nodes: usize) -> anyhow::Result<()> {
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("cloudcore-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bus = Bus::new();

    let loopback_listener = |port| ListenerConfig {
        address: "127.0.0.1".into(),
        port,
        ..ListenerConfig::default()
    };
    let hub_config = CloudHubConfig {
        advertise_address: vec!["127.0.0.1".into()],
        websocket: loopback_listener(0),
        https: loopback_listener(0),
        tls_ca_file: dir.join("ca/rootCA.crt"),
        tls_ca_key_file: dir.join("ca/rootCA.key"),
        tls_cert_file: dir.join("certs/server.crt"),
        tls_private_key_file: dir.join("certs/server.key"),
        ..CloudHubConfig::default()
    };
    let hub = CloudHub::new(
        hub_config,
        bus.endpoint(names::CLOUDHUB),
        None,
        Arc::new(MemoryStore::new()),
    )
    .await?;
    let hub_handle = hub.handle();
    bus.register(hub)?;

    // cloudstream: the tunnel trusts the cloudhub CA; the stream server presents the cloudhub
    // server certificate and trusts the same CA for "API server" client certificates.
    let ca = hub_handle.ca();
    let server = hub_handle.server_cert();
    let hub_tls = material(&server.cert_der, &server.key_der, ca.cert_der());
    let stream_config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let pods = Arc::new(StaticPods::new());
    let stream = CloudStream::new(
        stream_config,
        bus.endpoint(names::CLOUDSTREAM),
        None,
        CloudStreamTls {
            tunnel: ServerTls::Material(hub_tls.clone()),
            stream: Some(ServerTls::Material(hub_tls)),
        },
    )?
    .with_pod_locator(pods.clone());
    let stream_handle = stream.handle();
    bus.register(stream)?;

    // The scripted controller: it receives what cloudhub publishes to group edgecontroller.
    let mut controller = bus.register_inbox(names::EDGECONTROLLER, names::EDGECONTROLLER, 0)?;
    let controller_ep = bus.endpoint(names::EDGECONTROLLER);
    bus.start()?;
    let addrs = hub_handle.start_servers()?;
    let (websocket, https) = (
        addrs.websocket.context("websocket")?,
        addrs.https.context("https")?,
    );
    // cloudstream listens on every address (as upstream); dial it on loopback.
    let loopback = |a: SocketAddr| SocketAddr::from(([127, 0, 0, 1], a.port()));
    let (tunnel, stream_addr) = (
        loopback(stream_handle.tunnel_addr()),
        loopback(stream_handle.stream_addr()),
    );
    say(format!(
        "cloudcore demo: cloudhub wss://{websocket} and https://{https}, cloudstream tunnel {tunnel} and stream {stream_addr}"
    ));
    say(format!("bootstrap token: {}…", &hub_handle.token()[..24]));

    let names: Vec<String> = (1..=nodes).map(|i| format!("edge-{i}")).collect();
    let mut edges = Vec::new();
    for (i, node) in names.iter().enumerate() {
        // Each tunnel claims its own internal IP: cloudstream refuses an IP another live
        // tunnel holds. All of 127.0.0.0/8 is loopback.
        let ip = format!("127.0.{}.{}", (i + 1) / 256, (i + 1) % 256);
        edges.push(
            start_edge(
                node.clone(),
                &ip,
                https,
                websocket,
                tunnel,
                &hub_handle.token(),
            )
            .await?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while hub_handle.connected_nodes() < nodes || stream_handle.connected_nodes().len() < nodes {
        if Instant::now() > deadline {
            bail!(
                "only {} of {nodes} nodes connected",
                hub_handle.connected_nodes()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say(format!(
        "{nodes} edge nodes bootstrapped their certificates and connected ({:.1?})",
        began.elapsed()
    ));

    for (i, node) in names.iter().enumerate() {
        let pod = format!("web-{}", i + 1);
        pods.place("default", &pod, node);
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "uid": beehive::new_id(), "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}]},
        });
        let msg = Message::new()
            .with_route(
                names::EDGECONTROLLER,
                names::GROUP_RESOURCE,
                format!("node/{node}/default/pod/{pod}"),
                operation::INSERT,
            )
            .with_resource_version("1")
            .with_content(Content::json(&body)?);
        say(format!("controller: pod default/{pod} → {node}"));
        controller_ep.send(names::CLOUDHUB, msg).await?;
    }
    let mut running = 0;
    while running < nodes {
        let m = tokio::time::timeout_at(deadline.into(), controller.recv())
            .await
            .context("waiting for pod statuses")??;
        if m.route.resource.contains("/podstatus/") {
            let status: serde_json::Value = m.content.parse_bytes().unwrap_or_default();
            say(format!(
                "controller: {} reports {} {}",
                m.route.resource.split('/').nth(1).unwrap_or("?"),
                status["Name"].as_str().unwrap_or("?"),
                status["Status"]["phase"].as_str().unwrap_or("?")
            ));
            running += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while names
        .iter()
        .any(|n| hub_handle.node_stats(n).map(|s| s.acked).unwrap_or(0) == 0)
    {
        if Instant::now() > deadline {
            bail!("pods were not acknowledged");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say("cloudhub: every node acknowledged its pod");

    let client_cert = ca.issue(&IssueOptions {
        common_name: "kube-apiserver-kubelet-client".into(),
        organizations: vec!["system:masters".into()],
        ext_key_usages: vec![ExtKeyUsage::ClientAuth],
        validity_days: 1,
    })?;
    let client_tls = Arc::new(pki::tls::client_config(
        ca.cert_der(),
        Some((&client_cert.cert_der, &client_cert.key_der)),
    )?);
    let logs = fetch_logs(stream_addr, client_tls, "web-1").await?;
    say("kubectl logs web-1 (through cloudstream and the edge-1 tunnel):");
    for line in logs.lines() {
        say(format!("  | {line}"));
    }
    if !logs.contains("[edge-1] all good") {
        bail!("unexpected logs: {logs:?}");
    }

    for (client, agent) in edges {
        client.stop();
        agent.shutdown().await;
    }
    stream_handle.shutdown();
    bus.shutdown().await;
    hub_handle.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    say(format!("demo complete in {:.1?}", began.elapsed()));
    Ok(())
}
