//! The least a cloudcore must do for an edge to bootstrap and connect, as a server of its own:
//! the floor that `bench_vs_kubeedge` measures the connect row against (included with
//! `#[path]`; cargo does not build `examples/support/` as an example of its own).
//!
//! The server does what no cloudcore can leave out and nothing else: the certificate server's
//! `GET /ca.crt` (the CA's DER) and `GET /edge.crt` (the bootstrap JWT checked, the CSR checked
//! and signed by the same CA), each on a TLS connection of its own, and the WebSocket port's
//! mutual-TLS handshake and HTTP upgrade; what the edge sends after the upgrade is read and
//! dropped. No API server, no node bookkeeping, no messages. The tool re-executes itself with
//! `floor-server …` ([`FloorArgs`]); the child prints `READY <https port> <websocket port>`,
//! serves on `--threads` current-thread runtimes, and exits when its stdin closes.

use std::io::{BufRead, BufReader, Read as _};
use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kubeedge_wire::http1::{self, BytesMut};
use kubeedge_wire::ws;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// What the child serves with.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FloorArgs {
    /// The CA certificate (PEM) that signs the edges' certificates and the server's.
    #[arg(long)]
    ca_cert: PathBuf,
    /// Its key (PEM); its DER is also the secret the bootstrap JWT is signed with.
    #[arg(long)]
    ca_key: PathBuf,
    /// Current-thread runtimes accepting on both ports.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// A CSR or request body over this is refused (a P-256 CSR is ~300 bytes).
const MAX_BODY: usize = 64 * 1024;
/// Every step of a connection must finish within this.
const STEP: Duration = Duration::from_secs(30);

struct Keys {
    ca: pki::CertificateAuthority,
    https: Arc<rustls::ServerConfig>,
    ws: Arc<rustls::ServerConfig>,
}

/// The child: serves until stdin closes.
pub(crate) fn floor_server(args: FloorArgs) -> anyhow::Result<()> {
    let ca = pki::CertificateAuthority::from_pem(
        &std::fs::read_to_string(&args.ca_cert).context("CA certificate")?,
        &std::fs::read_to_string(&args.ca_key).context("CA key")?,
    )?;
    let server = ca.issue_server_cert(&["127.0.0.1".to_owned()], &["localhost".to_owned()])?;
    let keys = Arc::new(Keys {
        https: Arc::new(pki::tls::server_config_optional_client(
            &server.cert_der,
            &server.key_der,
        )?),
        ws: Arc::new(pki::tls::server_config_mutual(
            ca.cert_der(),
            &server.cert_der,
            &server.key_der,
        )?),
        ca,
    });
    let https = StdListener::bind("127.0.0.1:0")?;
    let wsl = StdListener::bind("127.0.0.1:0")?;
    let (hp, wp) = (https.local_addr()?.port(), wsl.local_addr()?.port());
    for _ in 0..args.threads.max(1) {
        let (https, wsl, keys) = (https.try_clone()?, wsl.try_clone()?, keys.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let https = listener(https).expect("https listener");
                let wsl = listener(wsl).expect("websocket listener");
                let k = keys.clone();
                tokio::spawn(accept_loop(https, move |tcp| certificate(tcp, k.clone())));
                accept_loop(wsl, move |tcp| upgrade(tcp, keys.clone())).await;
            });
        });
    }
    println!("READY {hp} {wp}");
    // Serves until the parent closes stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::process::exit(0);
}

fn listener(l: StdListener) -> std::io::Result<tokio::net::TcpListener> {
    l.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(l)
}

async fn accept_loop<F, Fut>(listener: tokio::net::TcpListener, serve: F)
where
    F: Fn(tokio::net::TcpStream) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of descriptors or a reset before accept: try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve(tcp));
    }
}

/// The certificate server: one request per TLS connection, as the edge sends them.
async fn certificate(tcp: tokio::net::TcpStream, keys: Arc<Keys>) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(keys.https.clone());
    let mut tls = tokio::time::timeout(STEP, acceptor.accept(tcp)).await??;
    let mut buf = BytesMut::new();
    let head = tokio::time::timeout(STEP, http1::read_request_head(&mut tls, &mut buf)).await??;
    let len = usize::try_from(head.content_length().unwrap_or(0))?;
    if len > MAX_BODY {
        bail!("a body of {len} bytes");
    }
    tokio::time::timeout(STEP, read_to(&mut tls, &mut buf, len)).await??;
    let (status, body) = match head.path() {
        "/ca.crt" => (200, keys.ca.cert_der().to_vec()),
        "/edge.crt" => match sign(&head, &buf[..len], &keys.ca) {
            Ok(cert) => (200, cert),
            Err(e) => (401, e.to_string().into_bytes()),
        },
        _ => (404, b"not found".to_vec()),
    };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        http1::reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    tokio::time::timeout(STEP, async {
        tls.write_all(&out).await?;
        tls.shutdown().await
    })
    .await??;
    Ok(())
}

/// Reads until `buf` holds at least `len` bytes.
async fn read_to<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    len: usize,
) -> anyhow::Result<()> {
    while buf.len() < len {
        if io.read_buf(buf).await? == 0 {
            bail!("the body ended after {} of {len} bytes", buf.len());
        }
    }
    Ok(())
}

/// What the certificate server cannot leave out: the bootstrap JWT (signed with the CA key)
/// and the CSR, signed for the node named.
fn sign(
    head: &http1::RequestHead,
    csr: &[u8],
    ca: &pki::CertificateAuthority,
) -> anyhow::Result<Vec<u8>> {
    let jwt = head
        .headers
        .get_str("Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .context("no bearer token")?;
    pki::verify_jwt(jwt, ca.key_der())?;
    let node = head.headers.get_str("NodeName").context("no NodeName")?;
    Ok(ca.sign_edge_csr(csr, node, &[], &pki::SignPolicy::default())?)
}

/// The WebSocket port: the mutual-TLS handshake and the upgrade, then whatever the edge sends
/// is read and dropped until it closes.
async fn upgrade(tcp: tokio::net::TcpStream, keys: Arc<Keys>) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(keys.ws.clone());
    let mut tls = tokio::time::timeout(STEP, acceptor.accept(tcp)).await??;
    let mut buf = BytesMut::new();
    let head = tokio::time::timeout(STEP, http1::read_request_head(&mut tls, &mut buf)).await??;
    let accept = match ws::check_upgrade_request(&head) {
        Ok(accept) => accept,
        Err(refusal) => bail!("not an upgrade: {}", refusal.reason),
    };
    tokio::time::timeout(
        STEP,
        tls.write_all(ws::switching_protocols(&accept, &[]).as_bytes()),
    )
    .await??;
    loop {
        buf.clear();
        buf.reserve(16 * 1024);
        if tls.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

// ------------------------------------------------------------------------- the parent's side

/// The server child; closing its stdin ends it, then SIGKILL after a grace.
pub(crate) struct FloorServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The certificate server's port.
    pub(crate) https: u16,
    /// The WebSocket port.
    pub(crate) ws: u16,
}

impl FloorServer {
    /// Starts the server with `ca` (written under `dir` for the child to read).
    pub(crate) fn start(
        dir: &std::path::Path,
        ca: &pki::CertificateAuthority,
    ) -> anyhow::Result<FloorServer> {
        let (cert, key) = (dir.join("floor-ca.crt"), dir.join("floor-ca.key"));
        pki::write_file(&cert, &ca.cert_pem(), false)?;
        pki::write_file(&key, &ca.key_pem(), true)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("floor-server")
            .arg("--ca-cert")
            .arg(&cert)
            .arg("--ca-key")
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start the floor server")?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let ports: Vec<u16> = line
            .strip_prefix("READY")
            .map(|r| {
                r.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let mut server = FloorServer {
            child,
            stdin,
            https: 0,
            ws: 0,
        };
        let &[https, ws] = ports.as_slice() else {
            bail!("the floor server did not start: {line:?}");
        };
        (server.https, server.ws) = (https, ws);
        Ok(server)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
