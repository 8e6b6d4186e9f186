//! A kubelet-compatible test server standing in for edged's read-only server: logs (plain and
//! follow), metrics, and exec/attach speaking SPDY/3.1 (`v4.channel.k8s.io`, what kube-apiserver
//! uses) or WebSocket `v5.channel.k8s.io`. It records every request and, for exec, every byte on
//! the wire after the request head. Bodies include bytes that are not UTF-8.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kubeedge_wire::http1::{self, RequestHead};
use kubeedge_wire::ws;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, broadcast};
use ws_peer::{Decoder, OpCode, Role, WsMessage, encode_frame};

use crate::serial::KubeletPort;

/// What one exec connection carried.
#[derive(Debug, Clone, Default)]
pub struct ExecRecord {
    /// The request target.
    pub target: String,
    /// The 101 response head the kubelet wrote.
    pub head_sent: Vec<u8>,
    /// Every byte read after the request head.
    pub received: Vec<u8>,
    /// Every byte written after the response head.
    pub sent: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    requests: Mutex<Vec<RequestHead>>,
    execs: Mutex<Vec<ExecRecord>>,
    followers_gone: Notify,
    gone: Mutex<usize>,
}

/// The server; it runs until the test's runtime ends. Clones share its state.
#[derive(Debug, Clone)]
pub struct FakeKubelet {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<State>,
    follow: broadcast::Sender<Bytes>,
}

/// The listening socket, then the port lock: fields drop in this order.
struct Listening {
    listener: TcpListener,
    _port: Option<KubeletPort>,
}

impl Drop for Listening {
    /// Stops listening before the lock goes, whoever else holds a copy of the descriptor: a
    /// child process another thread is spawning keeps one until its exec, and closing ours
    /// alone would leave the port listening (refusing the next holder's bind) that long. On
    /// Linux, shutting a listening socket's read side takes it out of the listening state
    /// for every copy.
    fn drop(&mut self) {
        let _ = rustix::net::shutdown(&self.listener, rustix::net::Shutdown::Read);
    }
}

/// Body of every plain logs request: text and bytes that are not UTF-8.
pub fn log_body() -> Vec<u8> {
    let mut b = b"line one\nline two \xff\xfe\x00 binary\n".to_vec();
    b.extend((0..=255u8).cycle().take(70_000));
    b.extend_from_slice(b"\nlast line without newline \xc3\x28");
    b
}

/// Body of logs for pod `big`: 8 MiB.
pub fn big_log_body() -> Vec<u8> {
    (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect()
}

/// Body of every metrics request (its last line has no newline).
pub const METRICS_BODY: &[u8] = b"# HELP up up\nup 1\nweird \xff bytes\nlast 2";

/// The exit code the fake exec reports.
pub const EXIT_CODE: u32 = 3;

impl FakeKubelet {
    /// On a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Self {
        FakeKubelet::start_on("127.0.0.1:0").await
    }

    /// On a given address (a real edgecore always dials 127.0.0.1:10350).
    ///
    /// # Panics
    /// When the address cannot be bound; [`FakeKubelet::try_start_on`] returns the error.
    pub async fn start_on(addr: &str) -> Self {
        match FakeKubelet::try_start_on(addr).await {
            Ok(k) => k,
            Err(e) => panic!("kubelet stand-in: {e}"),
        }
    }

    /// On a given address; the error names the address. For edgecore's kubelet endpoint use
    /// [`FakeKubelet::start_on_kubelet_port`].
    pub async fn try_start_on(addr: &str) -> crate::Result<Self> {
        FakeKubelet::listen(addr, None).await
    }

    /// On edgecore's fixed kubelet endpoint ([`crate::KUBELET`]), which one stand-in on the
    /// machine holds at a time: this waits for it, and holds it until the server stops (when
    /// the test's runtime ends), releasing it only after the listening socket is closed, so
    /// the next holder can bind it. Test binaries running side by side take turns here.
    pub async fn start_on_kubelet_port() -> crate::Result<Self> {
        let port = KubeletPort::acquire().await?;
        FakeKubelet::listen(crate::KUBELET, Some(port)).await
    }

    async fn listen(addr: &str, port: Option<KubeletPort>) -> crate::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| crate::Error::io(format!("kubelet stand-in bind {addr}"), e))?;
        FakeKubelet::serve_on(listener, port)
    }

    /// Serves on `listener` until the runtime ends, holding `port` as long.
    fn serve_on(listener: TcpListener, port: Option<KubeletPort>) -> crate::Result<Self> {
        let addr = listener
            .local_addr()
            .map_err(|e| crate::Error::io("kubelet stand-in", e))?;
        let (follow, _) = broadcast::channel(1024);
        let k = FakeKubelet {
            addr,
            state: Arc::default(),
            follow,
        };
        let server = k.clone();
        let listening = Listening {
            listener,
            _port: port,
        };
        tokio::spawn(async move {
            // The whole struct, not only the field the loop names (which is all a block
            // would capture): the lock must live as long as the listener.
            let listening = listening;
            while let Ok((sock, _)) = listening.listener.accept().await {
                tokio::spawn(server.clone().serve(sock));
            }
        });
        Ok(k)
    }

    /// Every request head received so far, in order.
    pub fn requests(&self) -> Vec<RequestHead> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Every exec/attach connection so far.
    pub fn execs(&self) -> Vec<ExecRecord> {
        self.state.execs.lock().unwrap().clone()
    }

    /// Sends a line to every `follow=true` logs request now open; returns how many.
    pub fn push_line(&self, line: &[u8]) -> usize {
        self.follow.send(Bytes::copy_from_slice(line)).unwrap_or(0)
    }

    /// `follow=true` logs requests now open.
    pub fn followers(&self) -> usize {
        self.follow.receiver_count()
    }

    /// Waits until `n` followers are connected.
    pub async fn wait_followers(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while self.followers() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("followers did not connect");
    }

    /// Waits until `n` follow connections have been closed by the edge.
    pub async fn wait_followers_gone(&self, n: usize, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                let notified = self.state.followers_gone.notified();
                if *self.state.gone.lock().unwrap() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await
        .is_ok()
    }

    async fn serve(self, mut sock: TcpStream) {
        let mut buf = BytesMut::new();
        let Ok(head) = http1::read_request_head(&mut sock, &mut buf).await else {
            return;
        };
        self.state.requests.lock().unwrap().push(head.clone());
        let path = head.path().to_owned();
        if path.starts_with("/exec/") || path.starts_with("/attach/") {
            return self.exec(sock, head, buf).await;
        }
        if path.starts_with("/metrics") || path.starts_with("/stats") {
            return respond(&mut sock, 200, METRICS_BODY).await;
        }
        if !path.starts_with("/containerLogs/") {
            return respond(&mut sock, 404, b"404 page not found\n").await;
        }
        if path.contains("/missing/") {
            return respond(&mut sock, 404, b"pod missing is not here").await;
        }
        if path.contains("/big/") {
            return respond(&mut sock, 200, &big_log_body()).await;
        }
        if head.target.contains("follow=true") {
            return self.follow(sock).await;
        }
        respond(&mut sock, 200, &log_body()).await;
    }

    async fn follow(self, mut sock: TcpStream) {
        let mut lines = self.follow.subscribe();
        let _ = sock
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await;
        let mut scratch = [0u8; 64];
        loop {
            tokio::select! {
                line = lines.recv() => {
                    let Ok(line) = line else { break };
                    let mut out = BytesMut::new();
                    http1::put_chunk(&mut out, &line);
                    if sock.write_all(&out).await.is_err() {
                        break;
                    }
                }
                r = sock.read(&mut scratch) => if matches!(r, Ok(0) | Err(_)) { break },
            }
        }
        drop(lines);
        *self.state.gone.lock().unwrap() += 1;
        self.state.followers_gone.notify_waiters();
    }

    async fn exec(self, mut sock: TcpStream, head: RequestHead, mut buf: BytesMut) {
        let mut record = ExecRecord {
            target: head.target.clone(),
            received: buf.to_vec(),
            ..ExecRecord::default()
        };
        if head.headers.has_token("Upgrade", "SPDY/3.1") {
            // What kube-apiserver speaks to kubelets.
            let reply = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
            record.head_sent = reply.as_bytes().to_vec();
            if sock.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
            let exec = crate::spdy::SpdyExec {
                exit_code: EXIT_CODE,
            };
            exec.serve(&mut sock, &head.target, buf, &mut record.sent)
                .await;
            self.state.execs.lock().unwrap().push(record);
            return;
        }
        // Our test clients upgrade with POST too; the relay is what is under test.
        let as_get = RequestHead {
            method: "GET".into(),
            ..head.clone()
        };
        let accept = match ws::check_upgrade_request(&as_get) {
            Ok(a) => a,
            Err(r) => return respond(&mut sock, r.status, r.reason.as_bytes()).await,
        };
        let reply = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
        );
        record.head_sent = reply.as_bytes().to_vec();
        if sock.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
        let index = {
            let mut execs = self.state.execs.lock().unwrap();
            execs.push(record);
            execs.len() - 1
        };
        if head.path().contains("/stuck/") {
            // Never reads: stands for a local connection that does not keep up.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        let mut decoder = Decoder::new(Role::Server, 1 << 20);
        let mut chunk = [0u8; 8192];
        loop {
            while let Ok(Some(msg)) = decoder.decode(&mut buf) {
                let mut out = BytesMut::new();
                let mut done = false;
                match msg {
                    WsMessage::Binary(p) if p.first() == Some(&0) => {
                        encode_frame(&mut out, OpCode::Binary, true, &[&[1], &p[1..]], None);
                        let note = format!("got {} bytes\n", p.len() - 1);
                        encode_frame(
                            &mut out,
                            OpCode::Binary,
                            true,
                            &[&[2], note.as_bytes()],
                            None,
                        );
                    }
                    WsMessage::Binary(p) if p.as_ref() == [255, 0] => {
                        let status = format!(
                            "{{\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"command terminated with non-zero exit code: exit status {EXIT_CODE}\",\"reason\":\"NonZeroExitCode\",\"details\":{{\"causes\":[{{\"reason\":\"ExitCode\",\"message\":\"{EXIT_CODE}\"}}]}}}}"
                        );
                        encode_frame(
                            &mut out,
                            OpCode::Binary,
                            true,
                            &[&[3], status.as_bytes()],
                            None,
                        );
                        encode_frame(
                            &mut out,
                            OpCode::Close,
                            true,
                            &[&1000u16.to_be_bytes()],
                            None,
                        );
                        done = true;
                    }
                    WsMessage::Close(..) => done = true,
                    _ => {}
                }
                self.state.execs.lock().unwrap()[index]
                    .sent
                    .extend_from_slice(&out);
                if sock.write_all(&out).await.is_err() || done {
                    let _ = sock.shutdown().await;
                    return;
                }
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.state.execs.lock().unwrap()[index]
                        .received
                        .extend_from_slice(&chunk[..n]);
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }
}

async fn respond(sock: &mut TcpStream, status: u16, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body).await;
    let _ = sock.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked_elsewhere(path: &std::path::Path) -> bool {
        let file = std::fs::File::open(path).unwrap();
        matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
    }

    /// The port lock is released only with the listener: while the server runs, another
    /// holder cannot take it (and then fail to bind). Once the server stops, the port is free
    /// and the lock released, even while copies of both descriptors live on, as they do in a
    /// child process another thread is spawning (until its exec): copies made here stand in
    /// for it deterministically.
    #[test]
    fn the_port_lock_lives_as_long_as_the_listener() {
        let dir = std::env::temp_dir().join(format!("kubelet-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listener_copy = listener.try_clone().unwrap();
        let (addr, lock_copy) = rt.block_on(async {
            let port = KubeletPort::acquire_at(&path).unwrap();
            let lock_copy = port.file().try_clone().unwrap();
            listener.set_nonblocking(true).unwrap();
            let listener = TcpListener::from_std(listener).unwrap();
            let k = FakeKubelet::serve_on(listener, Some(port)).unwrap();
            // The server runs on after the handle is gone, as in a scenario.
            let addr = k.addr;
            drop(k);
            tokio::task::yield_now().await;
            (addr, lock_copy)
        });
        assert!(
            locked_elsewhere(&path),
            "lock released while {addr} listens"
        );
        assert!(std::net::TcpStream::connect(addr).is_ok());
        drop(rt);
        assert!(
            !locked_elsewhere(&path),
            "lock kept after the server stopped"
        );
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "{addr} still accepts connections after the server stopped"
        );
        drop(std::net::TcpListener::bind(addr).expect("the next holder binds the port at once"));
        drop((listener_copy, lock_copy));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
