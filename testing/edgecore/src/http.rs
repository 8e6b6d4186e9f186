//! Plain HTTP/1.1 on loopback: one request (cloudcore's monitor server and router, edgecore's
//! metaServer), and a [`Recorder`] that stands in for an HTTP service or sink.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
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
    request(
        addr,
        "GET",
        path,
        &[("Accept", "application/json")],
        b"",
        limit,
    )
    .await
}

/// `method path` on `addr` with `headers`, `body` (with its `Content-Length`) and
/// `Connection: close`, all within `limit`.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    limit: Duration,
) -> Result<Response> {
    let what = format!("{method} http://{addr}{path}");
    let exchange = async {
        let mut sock = TcpStream::connect(addr).await?;
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        sock.write_all(req.as_bytes()).await?;
        sock.write_all(body).await?;
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

/// One request a [`Recorder`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The method.
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// The headers, names lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// An HTTP server on a free loopback port that answers every request with one status, header
/// and body, and records what it got (method, target, headers, body). Stops on drop.
#[derive(Debug)]
pub struct Recorder {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts answering `status` with `body` and the header `X-Recorder: yes`; a body of
    /// `"{target}"` answers with the request's target.
    pub async fn start(status: u16, body: &'static str) -> Result<Recorder> {
        let port = crate::cloud::listen_ports(1)?[0];
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::io(addr.to_string(), e))?;
        let got: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let seen = got.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = BytesMut::new();
                    let Ok(head) = http1::read_request_head(&mut sock, &mut buf).await else {
                        return;
                    };
                    let len = head.content_length().unwrap_or(0) as usize;
                    let mut bodybytes = buf.to_vec();
                    while bodybytes.len() < len {
                        let mut more = vec![0u8; len - bodybytes.len()];
                        match tokio::io::AsyncReadExt::read(&mut sock, &mut more).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => bodybytes.extend_from_slice(&more[..n]),
                        }
                    }
                    let answer = if body == "{target}" {
                        head.target.clone()
                    } else {
                        body.to_owned()
                    };
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Recorded {
                            method: head.method.clone(),
                            target: head.target.clone(),
                            headers: head
                                .headers
                                .pairs()
                                .map(|(k, v)| {
                                    (
                                        k.to_ascii_lowercase(),
                                        String::from_utf8_lossy(v).into_owned(),
                                    )
                                })
                                .collect(),
                            body: bodybytes,
                        });
                    let resp = format!(
                        "HTTP/1.1 {status} {}\r\nX-Recorder: yes\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        http1::reason(status),
                        answer.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                });
            }
        });
        Ok(Recorder { addr, got, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it received so far.
    pub fn received(&self) -> Vec<Recorded> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
