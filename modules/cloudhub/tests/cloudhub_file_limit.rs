//! The WebSocket listener at the process's open-file limit, through real TCP and TLS: this
//! test binary lowers its own `RLIMIT_NOFILE` (its only test, so nothing else shares the
//! limit), fills it with edges and checks that the next one is refused with a close, counted,
//! while the connected edges keep working and a freed descriptor is used again.

#[path = "cloudhub/support/mod.rs"]
mod support;

use std::time::Duration;

use kubeedge_api::listener::{ListenerStats, files_reserve};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use support::*;

const WS: &str = "cloudhub_websocket";

fn stats(h: &Harness) -> ListenerStats {
    h.hub
        .listener_stats()
        .into_iter()
        .find(|s| s.listener == WS)
        .expect("websocket listener stats")
}

/// Descriptors open in this process.
fn open_files() -> u64 {
    // Less the one reading the directory.
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1
}

/// Upgrades as `node`; `Ok(edge)` on 101, `Err` with how the attempt ended otherwise.
async fn try_connect(h: &Harness, node: &str) -> Result<Edge, String> {
    let (path, headers) = (edge_path(node), edge_headers(node));
    let attempt = raw_upgrade(h.ws, h.tls(Some(&h.edge_cert(node))), &path, &headers);
    match tokio::time::timeout(WAIT, attempt).await {
        Err(_) => Err("no answer in time".into()),
        Ok(Err(e)) => {
            assert_ne!(
                e.raw_os_error(),
                Some(24),
                "the client itself ran out of descriptors: the hub let the process reach its limit"
            );
            Err(format!("closed: {e}"))
        }
        Ok(Ok((101, _, Some(ws)))) => Ok(Edge { ws }),
        Ok(Ok((status, body, _))) => Err(format!("{status} {body}")),
    }
}

#[actix_rt::test]
async fn connections_past_the_open_file_limit_are_refused_with_a_close_and_edges_keep_working() {
    let h = Harness::with(|c| {
        c.websocket.limits.max_unauthenticated_per_ip = 0;
        c.websocket.limits.max_unauthenticated_per_network = 0;
        c.node_limit = 1_000;
    })
    .await;
    let mut edges = vec![h.connect("edge-0").await];
    h.wait_nodes(1).await;
    // Room for about ten more edges (each holds two descriptors here: the client's socket and
    // the hub's) before the reserve.
    let saved = getrlimit(Resource::Nofile);
    let limit = open_files() + 64 + 20;
    assert_eq!(files_reserve(limit), 64);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit),
            maximum: saved.maximum,
        },
    )
    .unwrap();

    let mut refused = None;
    for i in 1..100 {
        match try_connect(&h, &format!("edge-{i}")).await {
            Ok(edge) => edges.push(edge),
            Err(how) => {
                refused = Some((i, how));
                break;
            }
        }
    }
    let (at, how) = refused.expect("an edge past the open-file limit is refused");
    assert!(how.starts_with("closed"), "refused with a close, got {how}");
    assert!(
        edges.len() >= 5,
        "{} edges connected before the limit",
        edges.len()
    );
    let s = stats(&h);
    assert_eq!(s.refused_files, 1, "{s:?}");
    assert_eq!(s.refused_connections + s.refused_handshakes, 0, "{s:?}");
    // Refused again while full, and counted each time.
    assert!(try_connect(&h, &format!("edge-{at}")).await.is_err());
    assert_eq!(stats(&h).refused_files, 2);

    // The connected edges are unaffected: every one gets a message and stays connected.
    h.wait_nodes(edges.len()).await;
    for (i, edge) in edges.iter_mut().enumerate() {
        edge.keepalive().await;
        let node = format!("edge-{i}");
        h.downstream(pod(&node, "p", &format!("{node}-p"), "5", "update"))
            .await;
        let got = edge.recv().await;
        assert_eq!(got.route.resource, "default/pod/p", "{node}");
        edge.ack(&got).await;
    }
    assert!(
        edges[0]
            .closed_within(Duration::from_millis(200))
            .await
            .is_none()
    );

    // Two edges leave: their descriptors are taken by the next edge, nothing is stuck.
    let connected = edges.len();
    edges.truncate(connected - 2);
    h.wait_nodes(connected - 2).await;
    wait_until(|| stats(&h).open == (connected - 2) as u64).await;
    let mut late = try_connect(&h, &format!("edge-{at}"))
        .await
        .expect("a descriptor freed: the edge refused before connects");
    h.wait_nodes(connected - 1).await;
    late.keepalive().await;
    setrlimit(Resource::Nofile, saved).unwrap();
}
