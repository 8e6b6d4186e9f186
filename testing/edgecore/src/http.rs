//! One plain HTTP/1.1 GET on loopback (cloudcore's monitor server, edgecore's metaServer).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use kubeedge_wire::http1::{self, BodyReader};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::error::{Error, Result};

/// A response: status and the whole (de-chunked) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` on `addr` with `Connection: close`, all within `limit`.
pub async fn get(addr: SocketAddr, path: &str, limit: Duration) -> Result<Response> {
    let what = format!("GET http://{addr}{path}");
    let exchange = async {
        let mut sock = TcpStream::connect(addr).await?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
        );
        sock.write_all(req.as_bytes()).await?;
        let mut buf = BytesMut::new();
        let head = http1::read_response_head(&mut sock, &mut buf)
            .await
            .map_err(std::io::Error::other)?;
        let mut reader = BodyReader::new(&head);
        let mut body = Vec::new();
        while let Some(piece) = reader
            .next(&mut sock, &mut buf, 64 * 1024)
            .await
            .map_err(std::io::Error::other)?
        {
            body.extend_from_slice(&piece);
        }
        Ok::<_, std::io::Error>(Response {
            status: head.status,
            body,
        })
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(Error::io(what, e)),
        Err(_) => Err(Error::Timeout(what)),
    }
}
