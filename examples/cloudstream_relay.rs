//! Measures cloudstream's relay: a large `logs` body fetched through the tunnel (API client
//! → stream server → tunnel → edge agent → kubelet stand-in) against the same body fetched
//! directly from the kubelet stand-in, side by side in one run; MiB/s, their ratio, and time
//! to first byte.
//!
//! `cargo run --release --example cloudstream_relay -- [SIZE_MIB=256] [ROUNDS=5]`
//!
//! Certificates come from the `openssl` command (a CA, a serving certificate for 127.0.0.1,
//! the node's and the API server's client certificates), written to a temporary folder.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use beehive::Bus;
use cloudstream::http1::{self, BodyReader};
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamTls, ServerTls, StaticPods, TlsMaterial,
};
use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent, client_tls};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NODE: &str = "bench-node";

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .context("run openssl")?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A P-256 key and a certificate signed by `ca` with the given subject and extensions.
fn issue(dir: &Path, name: &str, subject: &str, ext: &str) -> anyhow::Result<()> {
    openssl(
        dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &format!("{name}.key"),
        ],
    )?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            subject,
            "-out",
            &format!("{name}.csr"),
        ],
    )?;
    std::fs::write(dir.join(format!("{name}.ext")), ext)?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ],
    )
}

fn certificates() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("cloudstream-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    openssl(
        &dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "ca.key",
        ],
    )?;
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-subj",
            "/CN=bench-ca",
            "-days",
            "1",
            "-out",
            "ca.crt",
        ],
    )?;
    issue(
        &dir,
        "server",
        "/CN=cloudcore",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )?;
    issue(
        &dir,
        "node",
        &format!("/O=system:nodes/CN=system:node:{NODE}"),
        "extendedKeyUsage=clientAuth\n",
    )?;
    issue(
        &dir,
        "apiserver",
        "/CN=kube-apiserver-kubelet-client",
        "extendedKeyUsage=clientAuth\n",
    )?;
    Ok(dir)
}

fn material(dir: &Path, name: &str) -> anyhow::Result<TlsMaterial> {
    Ok(TlsMaterial::from_files(
        &dir.join(format!("{name}.crt")),
        &dir.join(format!("{name}.key")),
        &dir.join("ca.crt"),
    )?)
}

/// A kubelet stand-in: every request gets `body` with a Content-Length.
async fn kubelet(body: Arc<Vec<u8>>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = http1::BytesMut::new();
                if http1::read_request_head(&mut sock, &mut buf).await.is_err() {
                    return;
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
            });
        }
    });
    Ok(addr)
}

/// Sends a GET on `conn` and reads the whole body; returns (time to first body byte, total
/// time, body length).
async fn fetch<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    target: &str,
    want: usize,
) -> anyhow::Result<(Duration, Duration, usize)> {
    let start = Instant::now();
    conn.write_all(format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut buf = http1::BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf).await?;
    if head.status != 200 {
        bail!("status {}", head.status);
    }
    let mut body = BodyReader::new(&head);
    let mut first = None;
    let mut n = 0;
    while let Some(piece) = body.next(&mut conn, &mut buf, 1 << 20).await? {
        first.get_or_insert_with(|| start.elapsed());
        n += piece.len();
    }
    if n != want {
        bail!("body of {n} bytes, expected {want}");
    }
    Ok((first.unwrap_or_default(), start.elapsed(), n))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let size_mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let dir = certificates()?;
    let result = actix_rt::System::new().block_on(run(&dir, size_mib, rounds));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(dir: &Path, size_mib: usize, rounds: usize) -> anyhow::Result<()> {
    let size = size_mib << 20;
    // Incompressible, and not UTF-8.
    let body: Vec<u8> = (0..size as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let kubelet_addr = kubelet(Arc::new(body)).await?;

    let bus = Bus::new();
    let pods = StaticPods::new();
    pods.place("bench", "big", NODE);
    let config = CloudStreamConfig {
        enable: true,
        tunnel_port: 0,
        stream_port: 0,
        ..CloudStreamConfig::default()
    };
    let tls = CloudStreamTls {
        tunnel: ServerTls::Material(material(dir, "server")?),
        stream: Some(ServerTls::Material(material(dir, "server")?)),
    };
    let cs = CloudStream::new(config, bus.endpoint("cloudStream"), None, tls)?
        .with_pod_locator(Arc::new(pods));
    let handle = cs.handle();
    bus.register(cs)?;
    bus.start()?;

    let mut options = AgentOptions::new(NODE, "127.0.0.1");
    options.kubelet = kubelet_addr;
    let edge_config = EdgeStreamConfig {
        enable: true,
        server: format!("127.0.0.1:{}", handle.tunnel_addr().port()),
        ..EdgeStreamConfig::default()
    };
    let agent =
        StreamAgent::new(edge_config, options, client_tls(&material(dir, "node")?)?).spawn();
    if !agent.wait_connected(Duration::from_secs(10)).await
        || !handle.wait_for_session(NODE, Duration::from_secs(10)).await
    {
        bail!("the edge agent did not connect");
    }

    let api = material(dir, "apiserver")?;
    let api_tls = cloudstream::tls::client_config(
        api.cert_chain.clone(),
        api.key.clone_key(),
        Some(&api.ca),
    )?;
    let target = "/containerLogs/bench/big/app";
    let stream_addr = SocketAddr::from(([127, 0, 0, 1], handle.stream_addr().port()));
    let (mut direct, mut tunnel, mut ttfb_direct, mut ttfb_tunnel) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // One warm-up of each, then alternate so both see the same machine state.
    fetch(TcpStream::connect(kubelet_addr).await?, target, size).await?;
    fetch(
        cloudstream::tls::connect(stream_addr, "127.0.0.1", api_tls.clone()).await?,
        target,
        size,
    )
    .await?;
    for _ in 0..rounds {
        let (first, total, _) =
            fetch(TcpStream::connect(kubelet_addr).await?, target, size).await?;
        ttfb_direct.push(first);
        direct.push(total);
        let conn = cloudstream::tls::connect(stream_addr, "127.0.0.1", api_tls.clone()).await?;
        let (first, total, _) = fetch(conn, target, size).await?;
        ttfb_tunnel.push(first);
        tunnel.push(total);
    }
    let mibs = |d: Duration| size_mib as f64 / d.as_secs_f64();
    let (d, t) = (mibs(median(direct)), mibs(median(tunnel)));
    println!(
        "body {size_mib} MiB, {rounds} rounds, medians (release build: {})",
        !cfg!(debug_assertions)
    );
    println!(
        "  direct from the kubelet stand-in : {d:9.1} MiB/s   first byte {:?}",
        median(ttfb_direct)
    );
    println!(
        "  through cloudstream tunnel       : {t:9.1} MiB/s   first byte {:?}",
        median(ttfb_tunnel)
    );
    println!("  tunnel / direct                  : {:9.3}", t / d);
    let c = handle.counters();
    println!(
        "  counters: streams {} total, {} MiB from edge",
        c.streams_total,
        c.bytes_from_edge >> 20
    );
    agent.shutdown().await;
    bus.shutdown().await;
    Ok(())
}
