//! Dialing the cloud from a chosen source address: load tools give each simulated edge a
//! loopback address of its own (`127.x.y.z`), as real edges have, so the cloud's per-source
//! limits see them apart.

use std::net::IpAddr;

use tokio::net::{TcpSocket, TcpStream};

/// TCP to `server` (`host:port`), from `local` when given (port chosen by the OS): the first
/// resolved address of the same family is dialed. Without `local` the OS picks the source.
/// `TCP_NODELAY` is set, as Go sets it on every socket: the hub's frames and the HTTP requests
/// are small writes that must not wait for an acknowledgement.
pub(crate) async fn dial(server: &str, local: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let stream = match local {
        None => TcpStream::connect(server).await?,
        Some(local) => {
            let target = tokio::net::lookup_host(server)
                .await?
                .find(|a| a.is_ipv4() == local.is_ipv4())
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::AddrNotAvailable,
                        format!("{server} has no address of the family of {local}"),
                    )
                })?;
            let socket = if local.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.bind((local, 0).into())?;
            socket.connect(target).await?
        }
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}
