//! The beehive module: bus start runs the servers, bus shutdown stops them gracefully.

use std::time::Duration;

use crate::support::{Cloud, FakeKubelet, Pki};
use beehive::Bus;
use bytes::BytesMut;
use cloudstream::{CloudStream, CloudStreamConfig, CloudStreamTls, ServerTls};
use kubeedge_wire::http1::{self, BodyReader};
use tokio::io::AsyncWriteExt;

#[actix_rt::test]
async fn bus_shutdown_should_close_tunnels_fail_streams_and_stop_accepting() {
    let cloud = Cloud::start().await;
    let kubelet = FakeKubelet::start().await;
    cloud.pods.place("ns", "web", "edge-1");
    let edge = cloud.edge("edge-1", "10.0.0.7", kubelet.addr).await;
    let mut api = cloud.api_conn().await;
    api.write_all(b"GET /containerLogs/ns/web/c?follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut api, &mut buf).await.unwrap();
    kubelet.wait_followers(1).await;
    assert_eq!(cloud.handle.counters().sessions, 1);

    tokio::time::timeout(Duration::from_secs(10), cloud.bus.shutdown())
        .await
        .expect("bus shutdown hung");
    tokio::time::timeout(Duration::from_secs(10), cloud.handle.stopped())
        .await
        .expect("cloudstream did not stop");

    let mut body = BodyReader::new(&head);
    let end = tokio::time::timeout(Duration::from_secs(5), body.next(&mut api, &mut buf, 1024))
        .await
        .unwrap();
    assert!(
        end.is_err(),
        "an open stream must end with an error on shutdown"
    );
    assert!(
        edge.wait_disconnected(Duration::from_secs(5)).await,
        "the tunnel must be closed"
    );
    assert!(kubelet.wait_followers_gone(1, Duration::from_secs(5)).await);
    assert!(
        tokio::net::TcpStream::connect(cloud.handle.stream_addr())
            .await
            .is_err(),
        "the stream server must stop accepting"
    );
    assert!(
        tokio::net::TcpStream::connect(cloud.handle.tunnel_addr())
            .await
            .is_err()
    );
    assert_eq!(cloud.handle.counters().sessions, 0);
    edge.shutdown().await;
}

#[actix_rt::test]
async fn disabled_module_should_not_start_its_servers() {
    let ca = Pki::new("ca");
    let bus = Bus::new();
    // A fixed port nobody else uses in this test binary.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = CloudStreamConfig {
        enable: false,
        tunnel_port: u32::from(free),
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(ca.server()),
        stream: Some(ServerTls::Material(ca.server())),
    };
    let cs = CloudStream::new(config, bus.endpoint("cloudStream"), None, tls).unwrap();
    let handle = cs.handle();
    bus.register(cs).unwrap();
    bus.start().unwrap();
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", config_port(&handle)))
            .await
            .is_err(),
        "a disabled module must not listen"
    );
}

fn config_port(handle: &cloudstream::CloudStreamHandle) -> u16 {
    handle.tunnel_addr().port()
}

#[test]
fn missing_stream_certificate_files_should_fail_creation() {
    let ca = Pki::new("ca");
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        tls_stream_cert_file: "/nonexistent/stream.crt".into(),
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(ca.server()),
        stream: None,
    };
    let err = CloudStream::new(config, Bus::new().endpoint("cloudStream"), None, tls).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/stream.crt"), "{err}");
}

#[test]
fn tunnel_tls_should_prefer_readable_tunnel_files_and_fall_back_to_cloudhub() {
    let hub = Pki::new("cloudhub").server();
    let missing = CloudStreamConfig {
        tls_tunnel_ca_file: "/nonexistent/ca.crt".into(),
        tls_tunnel_cert_file: "/nonexistent/t.crt".into(),
        tls_tunnel_private_key_file: "/nonexistent/t.key".into(),
        ..CloudStreamConfig::default()
    };
    let ServerTls::Material(m) = CloudStreamTls::tunnel_from_config(&missing, hub.clone()).unwrap()
    else {
        panic!("material expected");
    };
    assert_eq!(m.cert_chain, hub.cert_chain);
    assert_eq!(m.ca, hub.ca);

    let dir = std::env::temp_dir().join(format!("cs-tunnel-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let own = Pki::new("tunnel").server();
    std::fs::write(dir.join("ca.der"), own.ca[0].as_ref()).unwrap();
    std::fs::write(dir.join("t.der"), own.cert_chain[0].as_ref()).unwrap();
    std::fs::write(dir.join("t.key"), own.key.secret_der()).unwrap();
    std::fs::write(
        dir.join("garbage"),
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    let files = CloudStreamConfig {
        tls_tunnel_ca_file: dir.join("ca.der").display().to_string(),
        tls_tunnel_cert_file: dir.join("t.der").display().to_string(),
        tls_tunnel_private_key_file: dir.join("t.key").display().to_string(),
        ..CloudStreamConfig::default()
    };
    let ServerTls::Material(m) = CloudStreamTls::tunnel_from_config(&files, hub.clone()).unwrap()
    else {
        panic!("material expected");
    };
    assert_eq!(m.cert_chain, own.cert_chain);
    assert_eq!(m.ca, own.ca);
    // Only the certificate present: both come from cloudhub (upstream needs the pair).
    let half = CloudStreamConfig {
        tls_tunnel_private_key_file: "/nonexistent/t.key".into(),
        ..files.clone()
    };
    let ServerTls::Material(m) = CloudStreamTls::tunnel_from_config(&half, hub.clone()).unwrap()
    else {
        panic!("material expected");
    };
    assert_eq!(m.cert_chain, hub.cert_chain);
    // A readable file without a certificate is an error, not a panic.
    let bad = CloudStreamConfig {
        tls_tunnel_ca_file: dir.join("garbage").display().to_string(),
        ..files
    };
    assert!(CloudStreamTls::tunnel_from_config(&bad, hub).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
