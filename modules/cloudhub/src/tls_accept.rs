//! The front of every edge-facing listener: each accepted socket is admitted through the
//! listener's [`Gate`] (its pre-authentication deadline included) before the TLS handshake,
//! then handed with its peer address to the listener's HTTP service.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_rt::net::{ActixStream, Ready, TcpStream};
use actix_service::{Service, ServiceFactory, ServiceFactoryExt, fn_factory, fn_service};
use actix_tls::accept::rustls_0_23::{Acceptor, TlsStream};
use kubeedge_api::listener::{Admission, Gate};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tracing::debug;

/// How the pre-authentication deadline of a [`Gated`] stands.
enum Deadline {
    Running(Pin<Box<Sleep>>),
    Passed,
    Lifted,
}

/// An admitted TCP connection: it carries its [`Admission`] for as long as it lives (the
/// listener's open count follows the socket, through TLS, HTTP and a WebSocket session), and
/// fails every read and write once the listener's pre-authentication deadline has passed
/// while the peer is still unauthenticated. The deadline is the socket's own, so it covers
/// the TLS handshake, the request head and the idle time between requests alike.
pub(crate) struct Gated {
    io: TcpStream,
    peer: SocketAddr,
    admission: Arc<Admission>,
    deadline: Deadline,
}

impl Gated {
    /// Admits `io` through `gate`; `None` (counted by the gate) when refused, and the socket
    /// is then dropped without a byte read.
    fn admit(gate: &Arc<Gate>, io: TcpStream) -> Option<Gated> {
        let peer = io.peer_addr().ok()?;
        let admission = gate.admit(peer.ip()).ok()?;
        // As Go sets on every socket: a downstream message is one small TLS record, and with
        // Nagle's algorithm it waits for the edge's delayed ACK of the previous one (40 ms).
        let _ = io.set_nodelay(true);
        Some(Gated {
            io,
            peer,
            admission: Arc::new(admission),
            deadline: Deadline::Running(Box::pin(tokio::time::sleep(
                gate.limits().pre_auth_timeout(),
            ))),
        })
    }

    /// The connection's admission: call [`Admission::authenticated`] once the peer proved
    /// who it is.
    pub(crate) fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Deadline::Running(sleep) = &mut self.deadline {
            if self.admission.is_authenticated() {
                self.deadline = Deadline::Lifted;
            } else if sleep.as_mut().poll(cx).is_ready() {
                self.admission.timed_out();
                self.deadline = Deadline::Passed;
            }
        }
        match self.deadline {
            Deadline::Passed => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "not authenticated within the pre-authentication deadline",
            )),
            _ => Ok(()),
        }
    }
}

impl AsyncRead for Gated {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl ActixStream for Gated {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        ActixStream::poll_read_ready(&self.io, cx)
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        ActixStream::poll_write_ready(&self.io, cx)
    }
}

/// The front of an edge-facing listener: admits each accepted socket through `gate` (a
/// refused one is closed unread) and runs the TLS handshake on it. The gate, not actix,
/// bounds handshakes: actix-tls's own per-worker cap is bypassed (its service is called
/// without its readiness check) and its timeout is set past the gate's deadline.
pub(crate) fn gated_tls(
    gate: Arc<Gate>,
    tls: Arc<rustls::ServerConfig>,
) -> impl ServiceFactory<TcpStream, Config = (), Response = TlsStream<Gated>, Error = (), InitError = ()>
{
    fn_factory(move || {
        let gate = gate.clone();
        let mut acceptor = Acceptor::new((*tls).clone());
        acceptor.set_handshake_timeout(gate.limits().pre_auth_timeout() + Duration::from_secs(5));
        async move {
            let tls =
                Rc::new(<Acceptor as ServiceFactory<Gated>>::new_service(&acceptor, ()).await?);
            Ok::<_, ()>(fn_service(move |io: TcpStream| {
                let admitted = Gated::admit(&gate, io);
                let tls = tls.clone();
                async move {
                    let io = admitted.ok_or(())?;
                    tls.call(io)
                        .await
                        .map_err(|e| debug!(error = ?e, "tls handshake failed"))
                }
            }))
        }
    })
}

/// An edge-facing HTTPS listener's whole pipeline: [`gated_tls`], then `http` (an actix-http
/// `HttpService`) on each admitted connection with its peer address. A dispatch error ends
/// that connection only, logged at debug level.
pub(crate) fn gated_https<H>(
    gate: Arc<Gate>,
    tls: Arc<rustls::ServerConfig>,
    http: H,
) -> impl ServiceFactory<TcpStream, Config = (), Response = (), Error = (), InitError = ()>
where
    H: ServiceFactory<(TlsStream<Gated>, Option<SocketAddr>), Config = (), Response = ()>,
    H::Error: std::fmt::Display,
{
    gated_tls(gate, tls)
        .map(|io: TlsStream<Gated>| {
            let peer = Some(io.get_ref().0.peer_addr());
            (io, peer)
        })
        .and_then(
            http.map_err(|e| debug!(error = %e, "http dispatch ended"))
                .map_init_err(|_| ()),
        )
}
