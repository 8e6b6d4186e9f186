//! Revocation without gaps: whatever way a Node goes — deleted after it removed its own edge
//! label, held by a finalizer so that its deletion never completes, or simply deleted — the
//! certificates of its node are revoked, its hub session and its tunnel are closed at once,
//! and the old certificate is refused at the next handshake.

use super::*;
use cloudstream::TlsMaterial;
use edge::hub::EdgeCerts;
use edge::stream::{AgentHandle, AgentOptions, EdgeStreamConfig, StreamAgent};
use kube::api::DeleteParams;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivateSec1KeyDer};

/// An edge-labelled Node whose `status.addresses` lists `ip` as its InternalIP.
pub(super) async fn node_at(client: &kube::Client, name: &str, ip: &str, extra: Value) -> Node {
    let mut node = json!({"metadata": {"name": name, "labels": {EDGE_LABEL: ""}}});
    merge(&mut node["metadata"], extra);
    let nodes: Api<Node> = Api::all(client.clone());
    create(nodes.clone(), &from(node)).await;
    let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("admin sets the Node's addresses")
}

/// An address in 10.200.0.0/16 no other test uses.
pub(super) fn unique_ip() -> String {
    let n = u16::from_str_radix(&short_id()[..4], 16).unwrap_or(1);
    format!("10.200.{}.{}", n >> 8, (n & 0xff).max(1))
}

/// A node's certificate from the bootstrap token, its hub session and its tunnel.
pub(super) struct Held {
    pub(super) node: String,
    pub(super) certs: EdgeCerts,
    pub(super) hub: HubClient,
    pub(super) tunnel: AgentHandle,
}

impl Held {
    /// Bootstraps `node`, connects its hub session and its tunnel (claiming `ip`), and waits
    /// for both.
    pub(super) async fn connect(node: &str, ip: &str) -> Held {
        let spec = cloud().spec();
        let token = cloud().token().expect("bootstrap token");
        let certs = edge::hub::bootstrap(
            &format!("https://{}", spec.ports.https_addr()),
            &token,
            node,
        )
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {node}: {e}"));
        let tls = Arc::new(certs.client_tls().expect("client TLS"));
        let config = HubClientConfig::new(node, spec.ports.websocket_addr().to_string());
        let (hub, mut events) = HubClient::start(config, tls);
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        let tunnel = Held::tunnel(node, ip, &certs);
        eventually(WAIT, "hub session and tunnel up", || async {
            (hub.is_connected() && tunnel.is_connected()).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{node}: {e}"));
        Held {
            node: node.to_owned(),
            certs,
            hub,
            tunnel,
        }
    }

    /// A tunnel agent for `node` claiming `ip`, presenting `certs`.
    pub(super) fn tunnel(node: &str, ip: &str, certs: &EdgeCerts) -> AgentHandle {
        let material = TlsMaterial {
            cert_chain: vec![CertificateDer::from(certs.cert_der.clone())],
            key: PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(certs.key_der.clone())),
            ca: vec![CertificateDer::from(certs.ca_der.clone())],
        };
        let mut options = AgentOptions::new(node, ip);
        options.redial_base = Duration::from_millis(200);
        options.redial_max = Duration::from_secs(1);
        StreamAgent::new(
            EdgeStreamConfig {
                enable: true,
                server: cloud().spec().ports.tunnel_addr().to_string(),
                ..EdgeStreamConfig::default()
            },
            options,
            edge::stream::client_tls(&material).expect("tunnel TLS"),
        )
        .spawn()
    }

    /// Asserts that the hub session and the tunnel are closed within a few seconds and stay
    /// closed (both clients keep redialing with the old certificate), and that a fresh
    /// handshake with that certificate is refused.
    pub(super) async fn assert_cut_off(&self, what: &str) {
        eventually(
            Duration::from_secs(10),
            "hub session and tunnel closed",
            || async { (!self.hub.is_connected() && !self.tunnel.is_connected()).then_some(()) },
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (hub_dials, tunnels) = (self.hub.connects(), self.tunnel.stats().tunnels);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !self.hub.is_connected() && !self.tunnel.is_connected(),
            "{what}: reconnected with the old certificate"
        );
        assert_eq!(
            (self.hub.connects(), self.tunnel.stats().tunnels),
            (hub_dials, tunnels),
            "{what}: a redial with the old certificate was accepted"
        );
        let tls = Arc::new(self.certs.client_tls().expect("client TLS"));
        let tcp = tokio::net::TcpStream::connect(cloud().spec().ports.websocket_addr())
            .await
            .expect("dial");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let refused = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio_rustls::TlsConnector::from(tls)
                .connect(name, tcp)
                .await?;
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
            let mut buf = [0u8; 1];
            s.read(&mut buf).await
        }
        .await;
        assert!(
            matches!(refused, Err(_) | Ok(0)),
            "{what}: the old certificate of {} still completes a handshake",
            self.node
        );
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.hub.stop();
    }
}

#[tokio::test]
async fn a_deleted_nodes_session_and_tunnel_are_closed_at_once() {
    let (client, _ns, node) = Scenario::names("rvd").await;
    let ip = unique_ip();
    node_at(&client, &node, &ip, json!({})).await;
    let held = Held::connect(&node, &ip).await;
    Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await
        .expect("admin deletes the Node");
    held.assert_cut_off("deleted Node").await;
}

#[tokio::test]
async fn a_node_that_removed_its_edge_label_is_still_revoked_when_deleted() {
    let (client, _ns, node) = Scenario::names("rvl").await;
    let ip = unique_ip();
    node_at(&client, &node, &ip, json!({})).await;
    let held = Held::connect(&node, &ip).await;
    let nodes: Api<Node> = Api::all(client.clone());
    // What a node could do to its own Node before labels were checked.
    let unlabel = json!({"metadata": {"labels": {EDGE_LABEL: null}}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .expect("remove the edge label");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        held.hub.is_connected() && held.tunnel.is_connected(),
        "a label change alone revokes nothing"
    );
    nodes
        .delete(&node, &DeleteParams::default())
        .await
        .expect("admin deletes the Node");
    held.assert_cut_off("deleted unlabelled Node").await;
}

#[tokio::test]
async fn a_node_held_by_a_finalizer_is_revoked_when_its_deletion_starts() {
    let (client, _ns, node) = Scenario::names("rvf").await;
    let ip = unique_ip();
    let finalizer = "example.com/hold";
    node_at(&client, &node, &ip, json!({"finalizers": [finalizer]})).await;
    let held = Held::connect(&node, &ip).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete(&node, &DeleteParams::default())
        .await
        .expect("admin deletes the Node");
    let terminating = nodes.get(&node).await.expect("held by its finalizer");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    held.assert_cut_off("Node being deleted").await;
    let release = json!({"metadata": {"finalizers": null}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("remove the finalizer");
}
