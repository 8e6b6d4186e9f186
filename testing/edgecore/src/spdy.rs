//! The kubelet's side of exec over SPDY/3.1 (remotecommand `v4.channel.k8s.io`), which is
//! what kube-apiserver speaks to kubelets. Enough for `kubectl exec -i … -- cat`: streams are
//! told apart by creation order (error, stdin, stdout, stderr — client-go's order) because
//! reading the client's header blocks would need zlib with SPDY's dictionary; our own header
//! blocks are stored (uncompressed) deflate blocks, which any inflater reads.

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const PING: u16 = 6;
const FLAG_FIN: u8 = 0x01;

/// What the exec does: echo stdin to stdout, note each chunk on stderr, and exit with
/// `exit_code` when stdin closes.
pub(crate) struct SpdyExec {
    pub(crate) exit_code: u32,
}

struct Streams {
    /// Stream kinds in creation order.
    kinds: Vec<&'static str>,
    ids: Vec<(u32, &'static str)>,
}

impl Streams {
    fn id(&self, kind: &str) -> Option<u32> {
        self.ids.iter().find(|(_, k)| *k == kind).map(|(id, _)| *id)
    }
}

fn flag(query: &str, name: &str) -> bool {
    query
        .split('&')
        .any(|p| p == format!("{name}=1") || p == format!("{name}=true"))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.put_u16(0x8003);
    out.put_u16(kind);
    out.put_u32((u32::from(flags) << 24) | payload.len() as u32);
    out.extend_from_slice(payload);
    out
}

fn data(stream: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.put_u32(stream & 0x7fff_ffff);
    out.put_u32((u32::from(flags) << 24) | payload.len() as u32);
    out.extend_from_slice(payload);
    out
}

/// A header block with no pairs, as one stored deflate block plus a sync-flush marker; the
/// first block of the connection carries the zlib header.
fn empty_header_block(first: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if first {
        out.extend_from_slice(&[0x78, 0x01]);
    }
    let body = 0u32.to_be_bytes();
    out.push(0x00);
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(&(!(body.len() as u16)).to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
    out
}

impl SpdyExec {
    /// Serves one upgraded connection; `target` is the request target (its query says which
    /// streams come), `buf` holds bytes read past the request head. Appends every byte sent
    /// after the 101 head to `sent`.
    pub(crate) async fn serve(
        &self,
        sock: &mut TcpStream,
        target: &str,
        mut buf: BytesMut,
        sent: &mut Vec<u8>,
    ) {
        let query = target.split_once('?').map(|(_, q)| q).unwrap_or("");
        let tty = flag(query, "tty");
        let mut kinds = vec!["error"];
        if flag(query, "input") {
            kinds.push("stdin");
        }
        if flag(query, "output") {
            kinds.push("stdout");
        }
        if flag(query, "error") && !tty {
            kinds.push("stderr");
        }
        if tty {
            kinds.push("resize");
        }
        let mut streams = Streams {
            kinds,
            ids: Vec::new(),
        };
        let mut first_block = true;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            while buf.len() >= 8 {
                let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
                if buf.len() < 8 + len {
                    break;
                }
                let word = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let flags = buf[4];
                buf.advance(8);
                let payload = buf.split_to(len);
                let mut out = Vec::new();
                let mut finished = false;
                if word & 0x8000_0000 != 0 {
                    let kind = (word & 0xffff) as u16;
                    match kind {
                        SYN_STREAM if payload.len() >= 4 => {
                            let id = u32::from_be_bytes([
                                payload[0], payload[1], payload[2], payload[3],
                            ]) & 0x7fff_ffff;
                            let k = streams
                                .kinds
                                .get(streams.ids.len())
                                .copied()
                                .unwrap_or("unknown");
                            streams.ids.push((id, k));
                            let mut reply = id.to_be_bytes().to_vec();
                            reply.extend_from_slice(&empty_header_block(first_block));
                            first_block = false;
                            out.extend_from_slice(&control(SYN_REPLY, 0, &reply));
                        }
                        PING => out.extend_from_slice(&control(PING, 0, &payload)),
                        _ => {}
                    }
                } else {
                    let id = word & 0x7fff_ffff;
                    if Some(id) == streams.id("stdin") {
                        if !payload.is_empty() {
                            if let Some(o) = streams.id("stdout") {
                                out.extend_from_slice(&data(o, 0, &payload));
                            }
                            if let Some(e) = streams.id("stderr") {
                                out.extend_from_slice(&data(
                                    e,
                                    0,
                                    format!("got {} bytes\n", payload.len()).as_bytes(),
                                ));
                            }
                        }
                        if flags & FLAG_FIN != 0 {
                            for k in ["stdout", "stderr"] {
                                if let Some(s) = streams.id(k) {
                                    out.extend_from_slice(&data(s, FLAG_FIN, &[]));
                                }
                            }
                            let status = if self.exit_code == 0 {
                                r#"{"metadata":{},"status":"Success"}"#.to_owned()
                            } else {
                                format!(
                                    r#"{{"metadata":{{}},"status":"Failure","message":"command terminated with non-zero exit code: exit status {c}","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{c}"}}]}}}}"#,
                                    c = self.exit_code
                                )
                            };
                            if let Some(e) = streams.id("error") {
                                out.extend_from_slice(&data(e, FLAG_FIN, status.as_bytes()));
                            }
                            finished = true;
                        }
                    }
                }
                if !out.is_empty() {
                    sent.extend_from_slice(&out);
                    if sock.write_all(&out).await.is_err() {
                        return;
                    }
                }
                if finished {
                    // The kubelet closes the connection once the command has ended.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = sock.shutdown().await;
                    return;
                }
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.put_slice(&chunk[..n]),
            }
        }
    }
}
