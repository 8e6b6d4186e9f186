//! The listener: one request per connection, answered on the same connection, then closed.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::sync::Arc;
use std::time::Duration;

use beehive::Endpoint;
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::names::CLOUDHUB;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::address::Address;
use crate::metrics::{Outcome, UdsMetrics};
use crate::request::{self, RequestError};

/// How long an edge may take to answer (KubeEdge's `CSISyncMsgRespTimeout`).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client may take to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests in progress at once; one more is answered with an error at once.
pub const MAX_IN_PROGRESS: usize = 64;

/// A bound listener.
#[derive(Debug)]
pub(crate) enum Listener {
    Unix(UnixListener, std::path::PathBuf),
    Tcp(TcpListener),
}

/// Why the listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The address does not parse or is not allowed.
    #[error(transparent)]
    Address(#[from] crate::address::AddressError),
    /// A file that is not a socket is where the socket should be.
    #[error("{0} exists and is not a socket")]
    NotASocket(String),
    /// Creating the folder, removing the old socket, binding or setting the mode failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BindError {
    let what = what.into();
    move |source| BindError::Io { what, source }
}

/// Binds `address`: for a socket file, its folder is created (mode 0700) when missing, an old
/// socket there is removed (as KubeEdge does; any other file is left and refused), and the
/// socket gets mode 0600 (KubeEdge leaves it to the umask). Needs a Tokio runtime.
pub(crate) fn bind(address: &Address) -> Result<Listener, BindError> {
    match address {
        Address::Unix(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.exists()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io(format!("creating {}", dir.display())))?;
            }
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)
                    .map_err(io(format!("removing the old socket {}", path.display())))?,
                Ok(_) => return Err(BindError::NotASocket(path.display().to_string())),
                Err(_) => {}
            }
            let listener =
                UnixListener::bind(path).map_err(io(format!("binding {}", path.display())))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(format!("setting the mode of {}", path.display())))?;
            Ok(Listener::Unix(listener, path.clone()))
        }
        Address::Tcp(addr) => {
            let std = std::net::TcpListener::bind(addr).map_err(io(format!("binding {addr}")))?;
            std.set_nonblocking(true)
                .map_err(io(format!("binding {addr}")))?;
            Ok(Listener::Tcp(
                TcpListener::from_std(std).map_err(io(format!("binding {addr}")))?,
            ))
        }
    }
}

/// Serves until `stop`; the socket file is removed then.
pub(crate) async fn serve(
    listener: Listener,
    endpoint: Endpoint,
    metrics: UdsMetrics,
    timeout: Duration,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_IN_PROGRESS));
    let conn = Conn {
        endpoint,
        metrics,
        slots,
        timeout,
    };
    match listener {
        Listener::Unix(l, path) => {
            loop {
                tokio::select! {
                    accepted = l.accept() => match accepted {
                        Ok((sock, _)) => conn.spawn(sock),
                        Err(e) => warn!(error = %e, "accepting on the unix socket failed"),
                    },
                    () = stop.cancelled() => break,
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        Listener::Tcp(l) => loop {
            tokio::select! {
                accepted = l.accept() => match accepted {
                    Ok((sock, _)) => conn.spawn(sock),
                    Err(e) => warn!(error = %e, "accepting on the uds tcp address failed"),
                },
                () = stop.cancelled() => break,
            }
        },
    }
    info!("unix socket server stopped");
}

#[derive(Clone)]
struct Conn {
    endpoint: Endpoint,
    metrics: UdsMetrics,
    slots: Arc<Semaphore>,
    timeout: Duration,
}

impl Conn {
    fn spawn<S>(&self, mut sock: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let conn = self.clone();
        tokio::spawn(async move {
            let answer = match conn.slots.clone().try_acquire_owned() {
                Ok(_slot) => conn.answer(&mut sock).await,
                Err(_) => {
                    conn.metrics.count(Outcome::Busy);
                    request::error_answer(None, "too many volume requests in progress")
                }
            };
            let _ = sock.write_all(&request::encode(&answer)).await;
            let _ = sock.shutdown().await;
        });
    }

    async fn answer<S: AsyncRead + Unpin>(&self, sock: &mut S) -> beehive::Message {
        let read = match tokio::time::timeout(READ_TIMEOUT, request::read(sock)).await {
            Ok(r) => r,
            Err(_) => Err(RequestError::Io(std::io::ErrorKind::TimedOut.into())),
        };
        let parsed = read
            .map_err(request::Refused::from)
            .and_then(|bytes| request::parse(&bytes));
        let msg = match parsed {
            Ok(msg) => msg,
            Err(refused) => {
                self.metrics.count(Outcome::Refused);
                info!(error = %refused.error, "volume request refused");
                return request::error_answer(
                    refused.request.as_deref(),
                    &refused.error.to_string(),
                );
            }
        };
        debug!(operation = %msg.route.operation, resource = %msg.route.resource, "volume request");
        // The edge is sent a fresh id: only the node asked ever sees it, so no other edge can
        // answer in its place (the client's own id may be predictable, or reused by another
        // client), and two clients with one id do not collide.
        let mut to_edge = msg.clone();
        to_edge.header.id = beehive::Id::new_v4();
        match self
            .endpoint
            .send_sync(CLOUDHUB, to_edge, self.timeout)
            .await
        {
            Ok(mut answer) => {
                answer.header.parent_id = msg.header.id.clone();
                let answer = request::edge_answer(&msg, answer);
                self.metrics.count(if answer.route.operation == "error" {
                    Outcome::EdgeFailed
                } else {
                    Outcome::Answered
                });
                answer
            }
            Err(e) => {
                self.metrics.count(Outcome::NotAnswered);
                info!(resource = %msg.route.resource, error = %e, "volume request not answered");
                request::error_answer(Some(&msg), &e.to_string())
            }
        }
    }
}
