//! The accept loop and TLS handshake the tunnel and stream servers share.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kubeedge_api::listener::{Admission, Gate};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// Pause after a failed accept (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Accepts connections on `listener` until `stop` fires. Each socket is first admitted by
/// `gate` (a refused one is closed at once, unread); admitted ones get Nagle off and TCP
/// keepalive every `keepalive` (zero: off), and `serve` runs with the admission, which it
/// keeps for the connection's life, on `tasks`. `server` names the listener in the logs.
pub(crate) async fn accept_until<F, Fut>(
    listener: TcpListener,
    stop: &CancellationToken,
    tasks: &TaskTracker,
    server: &'static str,
    gate: Arc<Gate>,
    keepalive: Duration,
    mut serve: F,
) where
    F: FnMut(TcpStream, SocketAddr, Admission) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, "{server} accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        // The gate counts and logs refusals itself.
        let Ok(admission) = gate.admit(peer.ip()) else {
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        set_keepalive(&tcp, keepalive);
        tasks.spawn(serve(tcp, peer, admission));
    }
    info!("{server} server stopped accepting");
}

/// Turns on TCP keepalive, so a peer that vanished without a FIN or RST (power loss, NAT
/// state dropped) is noticed by the kernel even while we only wait to write or read.
fn set_keepalive(tcp: &TcpStream, every: Duration) {
    if every.is_zero() {
        return;
    }
    let params = socket2::TcpKeepalive::new()
        .with_time(every)
        .with_interval(every);
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&params) {
        debug!(error = %e, "TCP keepalive not set");
    }
}

/// The server side of the TLS handshake on `tcp`, given at most `limit`; `None` when it
/// failed or timed out (logged as `server`'s, with the peer).
pub(crate) async fn handshake(
    tls: &TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    limit: Duration,
    server: &'static str,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(limit, tls.accept(tcp)).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            info!(%peer, error = %e, "{server} TLS handshake failed");
            None
        }
        Err(_) => {
            info!(%peer, "{server} TLS handshake timed out");
            None
        }
    }
}
