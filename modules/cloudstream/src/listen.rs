//! The accept loop and TLS handshake the tunnel and stream servers share.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Pause after a failed accept (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Accepts connections on `listener` until `stop` fires and spawns `serve` for each (with
/// Nagle off). `server` names the listener in the logs.
pub(crate) async fn accept_until<F, Fut>(
    listener: TcpListener,
    stop: &CancellationToken,
    server: &'static str,
    mut serve: F,
) where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
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
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve(tcp, peer));
    }
    info!("{server} server stopped accepting");
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
