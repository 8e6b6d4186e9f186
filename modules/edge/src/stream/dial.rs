//! Dials the tunnel: TCP, TLS with the node certificate, then the WebSocket upgrade with the
//! node name and IP headers (as gorilla sends them: no ALPN, no Origin, no extensions).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kubeedge_wire::tunnel::{INPUT_WINDOW_HEADER, WINDOW_HEADER};
use kubeedge_wire::ws::{self, WsError};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The tunnel path on the cloud.
pub(crate) const CONNECT_PATH: &str = "/v1/kubeedge/connect";

/// Errors dialing the tunnel.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// `server` is not `host:port`.
    #[error("tunnel server {0:?} is not host:port")]
    BadServer(String),
    /// TCP or TLS failed.
    #[error("connect {server}: {source}")]
    Connect {
        /// The server.
        server: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The upgrade failed (status, headers or a bad response).
    #[error("upgrade: {0}")]
    Upgrade(String),
    /// The whole dial took longer than `handshakeTimeout`.
    #[error("dial timed out")]
    Timeout,
}

/// A connected tunnel: the TLS stream, bytes read past the `101` head, and the IP reported.
pub(crate) struct Dialed {
    pub(crate) stream: TlsStream<TcpStream>,
    pub(crate) leftover: BytesMut,
    pub(crate) node_ip: String,
    /// The per-stream send window the cloud granted, when it takes part in flow control
    /// (a KubeEdge cloud does not answer the offer: no window, no limit).
    pub(crate) window: Option<usize>,
    /// Whether the cloud keeps what it sends each stream within the input window offered
    /// (it echoed the offer), so that WINDOW messages must reopen it.
    pub(crate) input_window: bool,
}

fn host_of(server: &str) -> Option<&str> {
    if let Some(rest) = server.strip_prefix('[') {
        return rest.split(']').next();
    }
    server.rsplit_once(':').map(|(h, _)| h)
}

/// Dials `server` within `limit`, offering an input window of `input_window` bytes per
/// stream.
pub(crate) async fn dial(
    server: &str,
    tls: Arc<rustls::ClientConfig>,
    node_name: &str,
    node_ip: &str,
    input_window: usize,
    limit: Duration,
) -> Result<Dialed, DialError> {
    tokio::time::timeout(
        limit,
        dial_inner(server, tls, node_name, node_ip, input_window),
    )
    .await
    .map_err(|_| DialError::Timeout)?
}

async fn dial_inner(
    server: &str,
    tls: Arc<rustls::ClientConfig>,
    node_name: &str,
    node_ip: &str,
    input_window: usize,
) -> Result<Dialed, DialError> {
    let host = host_of(server).ok_or_else(|| DialError::BadServer(server.to_owned()))?;
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| DialError::BadServer(server.to_owned()))?;
    let connect_err = |source| DialError::Connect {
        server: server.to_owned(),
        source,
    };
    let tcp = TcpStream::connect(server).await.map_err(connect_err)?;
    let _ = tcp.set_nodelay(true);
    // Upstream recomputes the default-route IP on every dial; the local address of this
    // connection is that interface's IP.
    let node_ip = if node_ip.is_empty() {
        tcp.local_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default()
    } else {
        node_ip.to_owned()
    };
    let mut stream = TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(connect_err)?;
    let input_window = input_window.to_string();
    let extra = [
        ("Sessionhostnameoverride", node_name),
        ("Sessioninternalip", node_ip.as_str()),
        // Offers per-stream flow control; a KubeEdge cloud ignores unknown headers.
        (WINDOW_HEADER, "1"),
        // Offers flow control of what the cloud sends: at most this much per stream
        // ahead of the local connection.
        (INPUT_WINDOW_HEADER, input_window.as_str()),
    ];
    let (head, leftover) = ws::client_handshake(&mut stream, server, CONNECT_PATH, &extra)
        .await
        .map_err(|e| match e {
            // Like gorilla: report the status and the start of the body.
            WsError::Refused { status, body } => {
                let body = body.get(..body.len().min(256)).unwrap_or(&body);
                DialError::Upgrade(format!("status {status}: {}", body.trim()))
            }
            other => DialError::Upgrade(other.to_string()),
        })?;
    let window = head
        .headers
        .get_str(WINDOW_HEADER)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|w| *w > 0);
    let input_window = head.headers.get(INPUT_WINDOW_HEADER).is_some();
    Ok(Dialed {
        stream,
        leftover,
        node_ip,
        window,
        input_window,
    })
}
