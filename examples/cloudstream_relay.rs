//! Measures cloudstream's relay against going straight to the kubelet stand-in, side by side
//! in one run: a `logs` body, `exec` output (kubelet → API client) and `exec` input (API
//! client → kubelet), each through the tunnel (API client → stream server → tunnel → edge
//! agent → kubelet stand-in) and directly, both over HTTPS with client certificates (as
//! kube-apiserver talks to a kubelet on 10250: the path the tunnel replaces) and over plain
//! TCP (no cryptography: a floor no TLS path reaches); MiB/s, the tunnel's ratio to each,
//! time to first byte, and CPU seconds per GiB.
//!
//! `cargo run --release --example cloudstream_relay -- [SIZE_MIB=256] [ROUNDS=5]`
//!
//! The parties of a real deployment are threads here: the API client (main), cloudcore
//! (cloudstream's own arbiter), the edge agent and the kubelet stand-in.
//! On a shared machine elapsed time varies with other work; the CPU seconds all threads
//! spent per GiB moved vary much less.
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
use cloudstream::{
    CloudStream, CloudStreamConfig, CloudStreamTls, ServerTls, StaticPods, TlsMaterial,
};
use edge::stream::{AgentOptions, EdgeStreamConfig, StreamAgent, client_tls};
use kubeedge_wire::http1::{self, BodyReader, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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

/// The kubelet's answer to an exec upgrade; after it the connection carries the streams.
const SWITCHING: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
/// What the kubelet stand-in answers once it has read a whole exec input.
const INPUT_DONE: &[u8] = b"ok";

const LOGS: &str = "/containerLogs/bench/big/app";
const EXEC_OUT: &str = "/exec/bench/big/output?command=cat&stdout=1";
const EXEC_IN: &str = "/exec/bench/big/input?command=cat&stdin=1";

/// A kubelet stand-in. Logs: `body` with a Content-Length. Exec: the `101`, then `body`
/// (container `output`), or reading `body.len()` bytes and answering [`INPUT_DONE`]
/// (container `input`); then the connection closes.
///
/// With `tls`, it serves HTTPS and requires a client certificate, as a kubelet does.
async fn kubelet(
    listener: TcpListener,
    body: Arc<Vec<u8>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    while let Ok((sock, _)) = listener.accept().await {
        let _ = sock.set_nodelay(true);
        let body = body.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_kubelet(sock, body).await,
                Some(tls) => {
                    if let Ok(sock) = tls.accept(sock).await {
                        serve_kubelet(sock, body).await;
                    }
                }
            }
        });
    }
}

/// One connection of the kubelet stand-in.
async fn serve_kubelet<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, body: Arc<Vec<u8>>) {
    let mut buf = BytesMut::new();
    let Ok(head) = http1::read_request_head(&mut sock, &mut buf).await else {
        return;
    };
    let path = head.path().to_owned();
    if path.starts_with("/exec/") {
        let _ = sock.write_all(SWITCHING).await;
        if path.ends_with("/input") {
            let mut n = buf.len();
            while n < body.len() {
                buf.clear();
                buf.reserve(1 << 20);
                match sock.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => n += k,
                }
            }
            let _ = sock.write_all(INPUT_DONE).await;
        } else {
            let _ = sock.write_all(&body).await;
        }
    } else {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = sock.write_all(head.as_bytes()).await;
        let _ = sock.write_all(&body).await;
    }
    let _ = sock.shutdown().await;
}

/// One transfer: time to the first byte that matters (body, exec output, or the `101` for
/// exec input) and to the end, and the CPU time all threads used meanwhile.
#[derive(Debug, Clone, Copy)]
struct Sample {
    first: Duration,
    total: Duration,
    cpu: Duration,
}

/// CPU time of every thread of this process so far (nanoseconds on CPU, from schedstat):
/// less disturbed by other work on the machine than elapsed time.
fn cpu_time() -> Duration {
    let mut ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Duration::from_nanos(ns)
}

/// Runs `transfer` and adds the CPU time it took.
async fn measured(
    transfer: impl std::future::Future<Output = anyhow::Result<Sample>>,
) -> anyhow::Result<Sample> {
    let before = cpu_time();
    let mut s = transfer.await?;
    s.cpu = cpu_time().saturating_sub(before);
    Ok(s)
}

/// GETs `LOGS` and reads the whole body.
async fn logs<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    want: usize,
) -> anyhow::Result<Sample> {
    let start = Instant::now();
    conn.write_all(format!("GET {LOGS} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut conn, &mut buf).await?;
    if head.status != 200 {
        bail!("logs: status {}", head.status);
    }
    let mut body = BodyReader::new(&head);
    let mut first = None;
    let mut n = 0;
    while let Some(piece) = body.next(&mut conn, &mut buf, 1 << 20).await? {
        first.get_or_insert_with(|| start.elapsed());
        n += piece.len();
    }
    if n != want {
        bail!("logs: body of {n} bytes, expected {want}");
    }
    Ok(Sample {
        first: first.unwrap_or_default(),
        total: start.elapsed(),
        cpu: Duration::ZERO,
    })
}

/// Sends the exec upgrade for `target` and reads the kubelet's `101`; bytes read past it
/// stay in `buf`.
async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    buf: &mut BytesMut,
    target: &str,
) -> anyhow::Result<()> {
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n\
Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await?;
    let head = http1::read_response_head(conn, buf).await?;
    if head.status != 101 {
        bail!("exec: status {}", head.status);
    }
    Ok(())
}

/// Exec output: the upgrade, then `want` bytes from the kubelet.
async fn exec_out<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    want: usize,
) -> anyhow::Result<Sample> {
    let start = Instant::now();
    let mut buf = BytesMut::new();
    upgrade(&mut conn, &mut buf, EXEC_OUT).await?;
    let mut n = buf.len();
    let mut first = (n > 0).then(|| start.elapsed());
    while n < want {
        buf.clear();
        buf.reserve(1 << 20);
        let k = conn.read_buf(&mut buf).await?;
        if k == 0 {
            bail!("exec output: {n} bytes, expected {want}");
        }
        first.get_or_insert_with(|| start.elapsed());
        n += k;
    }
    Ok(Sample {
        first: first.unwrap_or_default(),
        total: start.elapsed(),
        cpu: Duration::ZERO,
    })
}

/// Exec input: the upgrade, then `body` toward the kubelet, until it says it has it all.
async fn exec_in<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    body: &[u8],
) -> anyhow::Result<Sample> {
    let start = Instant::now();
    let mut buf = BytesMut::new();
    upgrade(&mut conn, &mut buf, EXEC_IN).await?;
    let first = start.elapsed();
    for piece in body.chunks(1 << 20) {
        conn.write_all(piece).await?;
    }
    conn.flush().await?;
    while buf.len() < INPUT_DONE.len() {
        if conn.read_buf(&mut buf).await? == 0 {
            bail!("exec input: the kubelet did not confirm");
        }
    }
    if &buf[..] != INPUT_DONE {
        bail!("exec input: unexpected answer {:?}", &buf[..]);
    }
    Ok(Sample {
        first,
        total: start.elapsed(),
        cpu: Duration::ZERO,
    })
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

/// The kubelet stand-in's addresses: plain TCP (what the edge agent dials) and HTTPS.
#[derive(Debug, Clone, Copy)]
struct KubeletAddrs {
    tcp: SocketAddr,
    https: SocketAddr,
}

/// A listener on 127.0.0.1 for a runtime not started yet.
fn bind() -> std::io::Result<(std::net::TcpListener, SocketAddr)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.set_nonblocking(true)?;
    let addr = l.local_addr()?;
    Ok((l, addr))
}

/// The edge node: the edge agent on a thread of its own until `stop` fires, the kubelet
/// stand-in (plain and HTTPS, serving with `kubelet_tls`) on another. Sends the kubelet's
/// addresses once the agent runs.
fn edge_node(
    body: Arc<Vec<u8>>,
    server: String,
    tls: Arc<rustls::ClientConfig>,
    kubelet_tls: Arc<rustls::ServerConfig>,
    ready: std::sync::mpsc::Sender<anyhow::Result<KubeletAddrs>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
        };
        rt.block_on(async move {
            let (listener, addr, https, https_addr) = match bind().and_then(|(l, a)| {
                let (h, ha) = bind()?;
                Ok((l, a, h, ha))
            }) {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready.send(Err(e.into()));
                    return;
                }
            };
            // The kubelet runs on threads of its own (edged's goroutines): its large writes
            // must not hold up the agent.
            std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let (Ok(l), Ok(h)) = (
                        TcpListener::from_std(listener),
                        TcpListener::from_std(https),
                    ) else {
                        return;
                    };
                    let acceptor = tokio_rustls::TlsAcceptor::from(kubelet_tls);
                    tokio::join!(
                        kubelet(l, body.clone(), None),
                        kubelet(h, body, Some(acceptor))
                    );
                });
            });
            let mut options = AgentOptions::new(NODE, "127.0.0.1");
            options.kubelet = addr;
            let config = EdgeStreamConfig {
                enable: true,
                server,
                ..EdgeStreamConfig::default()
            };
            let agent = StreamAgent::new(config, options, tls).spawn();
            let _ = ready.send(Ok(KubeletAddrs {
                tcp: addr,
                https: https_addr,
            }));
            let _ = stop.await;
            agent.shutdown().await;
        });
    })
}

/// The samples of one workload: straight to the kubelet over TCP and over HTTPS, and
/// through the tunnel.
#[derive(Default)]
struct Row {
    tcp: Vec<Sample>,
    https: Vec<Sample>,
    tunnel: Vec<Sample>,
}

impl Row {
    fn push(&mut self, tcp: Sample, https: Sample, tunnel: Sample) {
        self.tcp.push(tcp);
        self.https.push(https);
        self.tunnel.push(tunnel);
    }

    /// Medians of (MiB/s, first byte in ms, CPU s/GiB) of each path: TCP, HTTPS, tunnel.
    fn medians(&self, size_mib: usize) -> [(f64, f64, f64); 3] {
        let of = |v: &[Sample]| {
            let total = median(v.iter().map(|s| s.total).collect()).as_secs_f64();
            let first = median(v.iter().map(|s| s.first).collect()).as_secs_f64();
            let cpu = median(v.iter().map(|s| s.cpu).collect()).as_secs_f64();
            (
                size_mib as f64 / total,
                first * 1e3,
                cpu * 1024.0 / size_mib as f64,
            )
        };
        [of(&self.tcp), of(&self.https), of(&self.tunnel)]
    }
}

/// Prints the three tables: throughput, first byte, CPU; each tunnel figure also as a ratio
/// to direct HTTPS (the path the tunnel replaces) and to direct TCP.
fn report(rows: &[(&str, &str, Row)], size_mib: usize, rounds: usize) {
    println!(
        "body {size_mib} MiB, {rounds} rounds, medians (release build: {})",
        !cfg!(debug_assertions)
    );
    let m: Vec<_> = rows.iter().map(|(_, _, r)| r.medians(size_mib)).collect();
    println!(
        "  {:<12} {:>9} {:>9} {:>9}  {:>8} {:>8}",
        "MiB/s", "TCP", "HTTPS", "tunnel", "t/HTTPS", "t/TCP"
    );
    for ((name, _, _), [t, h, x]) in rows.iter().zip(&m) {
        println!(
            "  {name:<12} {:9.1} {:9.1} {:9.1}  {:8.3} {:8.3}",
            t.0,
            h.0,
            x.0,
            x.0 / h.0,
            x.0 / t.0
        );
    }
    println!(
        "  {:<24} {:>9} {:>9} {:>9}  {:>8} {:>8}",
        "first (ms)", "TCP", "HTTPS", "tunnel", "t/HTTPS", "t/TCP"
    );
    for ((name, what, _), [t, h, x]) in rows.iter().zip(&m) {
        let label = format!("{name} ({what})");
        println!(
            "  {label:<24} {:9.3} {:9.3} {:9.3}  {:8.2} {:8.2}",
            t.1,
            h.1,
            x.1,
            x.1 / h.1,
            x.1 / t.1
        );
    }
    println!(
        "  {:<12} {:>9} {:>9} {:>9}",
        "CPU s/GiB", "TCP", "HTTPS", "tunnel"
    );
    for ((name, _, _), [t, h, x]) in rows.iter().zip(&m) {
        println!("  {name:<12} {:9.2} {:9.2} {:9.2}", t.2, h.2, x.2);
    }
}

async fn run(dir: &Path, size_mib: usize, rounds: usize) -> anyhow::Result<()> {
    let size = size_mib << 20;
    // Incompressible, and not UTF-8.
    let body: Arc<Vec<u8>> = Arc::new(
        (0..size as u64)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    );

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

    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let edge = edge_node(
        body.clone(),
        format!("127.0.0.1:{}", handle.tunnel_addr().port()),
        client_tls(&material(dir, "node")?)?,
        pki::stream_tls::server_config(&material(dir, "server")?, true)?,
        ready_tx,
        stop_rx,
    );
    let kubelet = ready_rx.recv().context("edge node thread")??;
    if !handle.wait_for_session(NODE, Duration::from_secs(10)).await {
        bail!("the edge agent did not connect");
    }

    let api = material(dir, "apiserver")?;
    let api_tls =
        pki::stream_tls::client_config(api.cert_chain.clone(), api.key.clone_key(), Some(&api.ca))?;
    let stream_addr = SocketAddr::from(([127, 0, 0, 1], handle.stream_addr().port()));
    let tcp = || async {
        let tcp = TcpStream::connect(kubelet.tcp).await?;
        let _ = tcp.set_nodelay(true);
        anyhow::Ok(tcp)
    };
    // As the API server reaches a kubelet: TLS over TCP without Nagle, the server verified.
    let connect_tls = |addr: SocketAddr| {
        let config = api_tls.clone();
        async move {
            let tcp = TcpStream::connect(addr).await?;
            let _ = tcp.set_nodelay(true);
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
            anyhow::Ok(
                tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await?,
            )
        }
    };
    let https = || connect_tls(kubelet.https);
    let tunnel = || connect_tls(stream_addr);
    let (mut l, mut o, mut i) = (Row::default(), Row::default(), Row::default());
    // A warm-up of each, not counted, then the paths alternate so all see the same machine
    // state.
    for round in 0..=rounds {
        let lt = measured(logs(tcp().await?, size)).await?;
        let lh = measured(logs(https().await?, size)).await?;
        let lx = measured(logs(tunnel().await?, size)).await?;
        let ot = measured(exec_out(tcp().await?, size)).await?;
        let oh = measured(exec_out(https().await?, size)).await?;
        let ox = measured(exec_out(tunnel().await?, size)).await?;
        let it = measured(exec_in(tcp().await?, &body)).await?;
        let ih = measured(exec_in(https().await?, &body)).await?;
        let ix = measured(exec_in(tunnel().await?, &body)).await?;
        if round > 0 {
            l.push(lt, lh, lx);
            o.push(ot, oh, ox);
            i.push(it, ih, ix);
        }
    }
    report(
        &[
            ("logs", "body byte", l),
            ("exec stdout", "output byte", o),
            ("exec stdin", "101", i),
        ],
        size_mib,
        rounds,
    );
    let c = handle.counters();
    println!(
        "  counters: streams {} total, {} MiB from edge, {} MiB to edge",
        c.streams_total,
        c.bytes_from_edge >> 20,
        c.bytes_to_edge >> 20
    );
    let _ = stop_tx.send(());
    let _ = tokio::task::spawn_blocking(move || edge.join()).await;
    bus.shutdown().await;
    Ok(())
}
