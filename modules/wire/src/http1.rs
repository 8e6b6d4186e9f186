//! The HTTP/1.1 pieces both ends need on raw sockets: request and response heads (httparse),
//! chunked bodies, and short error responses. Raw sockets because exec/attach must relay the
//! kubelet's own `101` head byte for byte, which HTTP libraries consume.

use std::io;
use std::time::Duration;

use bytes::{Buf, BufMut};
/// The buffer types these functions take and return, so callers need not name `bytes`.
pub use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request or response head accepted.
pub const MAX_HEAD_LEN: usize = 64 * 1024;
const MAX_HEADERS: usize = 128;

/// Errors reading a head or a body.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The peer closed before a whole head arrived (`partial`: some bytes had come).
    #[error("connection closed before a complete HTTP head")]
    Eof {
        /// True when part of a head had arrived.
        partial: bool,
    },
    /// The head is over [`MAX_HEAD_LEN`].
    #[error("HTTP head larger than {MAX_HEAD_LEN} bytes")]
    TooLarge,
    /// The head does not parse.
    #[error("malformed HTTP head: {0}")]
    Malformed(String),
    /// A chunked body does not parse.
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
    /// The head did not arrive in time.
    #[error("timed out waiting for an HTTP head")]
    Timeout,
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

/// Header pairs as received: names as spelled by the peer, values as raw bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, Vec<u8>)>);

impl Headers {
    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Every value of `name` (case-insensitive), in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The first value of `name` as text, if it is valid UTF-8.
    pub fn get_str<'a>(&'a self, name: &str) -> Option<&'a str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// True when a comma-separated value of `name` equals `token` (case-insensitive), like
    /// gorilla's `tokenListContainsValue`.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.all(name).any(|v| {
            v.split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    }

    /// True when any value of `name` contains `needle` (case-insensitive), like
    /// `httpstream.IsUpgradeRequest`.
    pub fn contains_ci(&self, name: &str, needle: &str) -> bool {
        let needle = needle.to_ascii_lowercase();
        self.all(name).any(|v| {
            String::from_utf8_lossy(v)
                .to_ascii_lowercase()
                .contains(&needle)
        })
    }

    /// Pairs as `(&str, &[u8])`.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_slice()))
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target as sent (`/path?query`).
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// The headers.
    pub headers: Headers,
}

impl RequestHead {
    /// An HTTP/1.1 head with these headers, as a parsed one would be.
    pub fn with_headers(method: &str, target: &str, headers: &[(&str, &str)]) -> Self {
        RequestHead {
            method: method.into(),
            target: target.into(),
            version: 1,
            headers: Headers(
                headers
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
                    .collect(),
            ),
        }
    }

    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// Whether the client lets the connection be reused after this request.
    pub fn keep_alive(&self) -> bool {
        if self.headers.has_token("Connection", "close") {
            return false;
        }
        self.version >= 1 || self.headers.has_token("Connection", "keep-alive")
    }

    /// Bytes of request body that follow the head, when framed by `Content-Length`; `None`
    /// for a chunked or otherwise unframed body.
    pub fn content_length(&self) -> Option<u64> {
        if self.headers.get("Transfer-Encoding").is_some() {
            return None;
        }
        match self.headers.get_str("Content-Length") {
            None => Some(0),
            Some(v) => v.trim().parse().ok(),
        }
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: Headers,
}

/// Reads a request head from `io`, using and refilling `buf`; bytes after the head stay in
/// `buf`. `Eof { partial: false }` means the peer closed cleanly between requests.
pub async fn read_request_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
) -> Result<RequestHead, HttpError> {
    read_head(io, buf).await
}

/// Reads a response head; bytes after it stay in `buf`.
pub async fn read_response_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
) -> Result<ResponseHead, HttpError> {
    read_head(io, buf).await
}

/// A head httparse reads: a request's or a response's.
trait Head: Sized {
    /// The head at the front of `bytes` (with room for `headers`) and its length, once all
    /// of it is there.
    fn parse<'b>(
        bytes: &'b [u8],
        headers: &mut [httparse::Header<'b>],
    ) -> Result<Option<(Self, usize)>, HttpError>;
}

impl Head for RequestHead {
    fn parse<'b>(
        bytes: &'b [u8],
        headers: &mut [httparse::Header<'b>],
    ) -> Result<Option<(Self, usize)>, HttpError> {
        let mut req = httparse::Request::new(headers);
        let httparse::Status::Complete(n) = req.parse(bytes).map_err(malformed)? else {
            return Ok(None);
        };
        let head = RequestHead {
            method: req.method.unwrap_or("").to_owned(),
            target: req.path.unwrap_or("").to_owned(),
            version: req.version.unwrap_or(1),
            headers: owned(req.headers),
        };
        check_framing(&head.headers)?;
        Ok(Some((head, n)))
    }
}

impl Head for ResponseHead {
    fn parse<'b>(
        bytes: &'b [u8],
        headers: &mut [httparse::Header<'b>],
    ) -> Result<Option<(Self, usize)>, HttpError> {
        let mut resp = httparse::Response::new(headers);
        Ok(match resp.parse(bytes).map_err(malformed)? {
            httparse::Status::Complete(n) => Some((
                ResponseHead {
                    status: resp.code.unwrap_or(0),
                    headers: owned(resp.headers),
                },
                n,
            )),
            httparse::Status::Partial => None,
        })
    }
}

/// The loop under both head readers: parses what `buf` holds, reading more from `io` (up to
/// [`MAX_HEAD_LEN`]) while the head is partial; a complete head's bytes leave `buf`.
async fn read_head<H: Head, R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
) -> Result<H, HttpError> {
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            if let Some((head, n)) = H::parse(buf, &mut headers)? {
                buf.advance(n);
                return Ok(head);
            }
        }
        fill(io, buf).await?;
    }
}

fn malformed(e: httparse::Error) -> HttpError {
    HttpError::Malformed(e.to_string())
}

/// [`read_request_head`] with a deadline.
pub async fn read_request_head_within<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    limit: Duration,
) -> Result<RequestHead, HttpError> {
    tokio::time::timeout(limit, read_request_head(io, buf))
        .await
        .map_err(|_| HttpError::Timeout)?
}

/// Refuses a request whose body length is ambiguous: two `Content-Length` headers (even
/// equal ones), a `Content-Length` that is not a plain number, or `Content-Length` together
/// with `Transfer-Encoding`. Proxies in front may pick a different one than we would, and
/// the bytes after the body would then be read as another request (smuggling).
fn check_framing(headers: &Headers) -> Result<(), HttpError> {
    let mut lengths = headers.all("Content-Length");
    let first = lengths.next();
    if lengths.next().is_some() {
        return Err(HttpError::Malformed("duplicate Content-Length".into()));
    }
    if let Some(v) = first {
        let v = v.trim_ascii();
        if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
            return Err(HttpError::Malformed("invalid Content-Length".into()));
        }
        if headers.get("Transfer-Encoding").is_some() {
            return Err(HttpError::Malformed(
                "Content-Length with Transfer-Encoding".into(),
            ));
        }
    }
    Ok(())
}

fn owned(headers: &[httparse::Header<'_>]) -> Headers {
    Headers(
        headers
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect(),
    )
}

async fn fill<R: AsyncRead + Unpin>(io: &mut R, buf: &mut BytesMut) -> Result<(), HttpError> {
    if buf.len() >= MAX_HEAD_LEN {
        return Err(HttpError::TooLarge);
    }
    buf.reserve(8192);
    if io.read_buf(buf).await? == 0 {
        return Err(HttpError::Eof {
            partial: !buf.is_empty(),
        });
    }
    Ok(())
}

/// A complete short response with a `text/plain` body, for errors. `close` adds
/// `Connection: close`.
pub fn text_response(status: u16, body: &str, close: bool) -> Bytes {
    short_response(status, "text/plain; charset=utf-8", body, close)
}

/// A complete short response with an `application/json` body (a Kubernetes `Status`).
/// `close` adds `Connection: close`.
pub fn json_response(status: u16, body: &str, close: bool) -> Bytes {
    short_response(status, "application/json", body, close)
}

fn short_response(status: u16, content_type: &str, body: &str, close: bool) -> Bytes {
    let mut out = BytesMut::with_capacity(160 + body.len());
    out.put_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    out.put_slice(
        format!("Content-Type: {content_type}\r\nX-Content-Type-Options: nosniff\r\n").as_bytes(),
    );
    out.put_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    if close {
        out.put_slice(b"Connection: close\r\n");
    }
    out.put_slice(b"\r\n");
    out.put_slice(body.as_bytes());
    out.freeze()
}

/// The standard reason phrase of `status` (IANA's registry, as the `http` crate knows it), or
/// `Unknown` for a code without one.
pub fn reason(status: u16) -> &'static str {
    actix_http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Unknown")
}

/// Appends `data` as one chunk of a chunked body (nothing for empty data: an empty chunk
/// would end the body).
pub fn put_chunk(dst: &mut BytesMut, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    dst.put_slice(ChunkHead::new(data.len()).as_bytes());
    dst.put_slice(data);
    dst.put_slice(CHUNK_END);
}

/// The line that starts a chunk: its size in hex and CRLF. Built without allocating; a
/// relay writes it, the data and [`CHUNK_END`] as one vectored write.
#[derive(Debug, Clone, Copy)]
pub struct ChunkHead {
    bytes: [u8; 18],
    start: usize,
}

impl ChunkHead {
    /// The head of a chunk of `len` bytes.
    pub fn new(len: usize) -> Self {
        let mut bytes = [0u8; 18];
        bytes[16] = b'\r';
        bytes[17] = b'\n';
        let mut start = 16;
        let mut v = len as u64;
        loop {
            start -= 1;
            bytes[start] = b"0123456789abcdef"[(v & 0xf) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        ChunkHead { bytes, start }
    }

    /// The line's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// What follows a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// How a response body is framed.
#[derive(Debug)]
enum Framing {
    Length(u64),
    Chunked(ChunkState),
    UntilEof,
    Done,
}

#[derive(Debug, Clone, Copy)]
enum ChunkState {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// Reads a response body chunk by chunk, removing chunked framing.
#[derive(Debug)]
pub struct BodyReader {
    framing: Framing,
}

impl BodyReader {
    /// A reader for the body that follows `head`.
    pub fn new(head: &ResponseHead) -> Self {
        let framing = if head.headers.has_token("Transfer-Encoding", "chunked") {
            Framing::Chunked(ChunkState::Size)
        } else if let Some(n) = head
            .headers
            .get_str("Content-Length")
            .and_then(|v| v.trim().parse().ok())
        {
            Framing::Length(n)
        } else {
            Framing::UntilEof
        };
        BodyReader { framing }
    }

    /// The next piece of the body (`None` at its end). `buf` holds bytes already read past
    /// the head; the reader refills it from `io`.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        buf: &mut BytesMut,
        max: usize,
    ) -> Result<Option<Bytes>, HttpError> {
        loop {
            match &mut self.framing {
                Framing::Done => return Ok(None),
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                Framing::Length(left) => {
                    if buf.is_empty() && read_more(io, buf, max).await? == 0 {
                        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                    }
                    let n = (*left).min(buf.len() as u64).min(max as u64) as usize;
                    *left -= n as u64;
                    return Ok(Some(buf.split_to(n).freeze()));
                }
                Framing::UntilEof => {
                    if buf.is_empty() && read_more(io, buf, max).await? == 0 {
                        self.framing = Framing::Done;
                        return Ok(None);
                    }
                    let n = buf.len().min(max);
                    return Ok(Some(buf.split_to(n).freeze()));
                }
                Framing::Chunked(state) => match *state {
                    ChunkState::Size => match httparse::parse_chunk_size(buf) {
                        Ok(httparse::Status::Complete((used, size))) => {
                            buf.advance(used);
                            *state = if size == 0 {
                                ChunkState::Trailers
                            } else {
                                ChunkState::Data(size)
                            };
                        }
                        // Extensions are skipped up to CRLF; a line that long is not a size.
                        Ok(httparse::Status::Partial) if buf.len() > 4096 => {
                            return Err(HttpError::BadChunk("line too long"));
                        }
                        Ok(httparse::Status::Partial) => more(io, buf, max).await?,
                        Err(httparse::InvalidChunkSize) => {
                            return Err(HttpError::BadChunk("size is not hex"));
                        }
                    },
                    ChunkState::Data(left) => {
                        if buf.is_empty() {
                            more(io, buf, max).await?;
                        }
                        let n = left.min(buf.len() as u64).min(max as u64) as usize;
                        *state = if left == n as u64 {
                            ChunkState::DataEnd
                        } else {
                            ChunkState::Data(left - n as u64)
                        };
                        return Ok(Some(buf.split_to(n).freeze()));
                    }
                    ChunkState::DataEnd => {
                        let Some(line) = take_line(buf)? else {
                            more(io, buf, max).await?;
                            continue;
                        };
                        if !line.is_empty() {
                            return Err(HttpError::BadChunk("chunk not followed by CRLF"));
                        }
                        *state = ChunkState::Size;
                    }
                    ChunkState::Trailers => {
                        let Some(line) = take_line(buf)? else {
                            more(io, buf, max).await?;
                            continue;
                        };
                        if line.is_empty() {
                            self.framing = Framing::Done;
                            return Ok(None);
                        }
                    }
                },
            }
        }
    }
}

/// One CRLF-terminated line from the front of `buf`, without the CRLF.
fn take_line(buf: &mut BytesMut) -> Result<Option<BytesMut>, HttpError> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(i) => {
            let mut line = buf.split_to(i + 2);
            line.truncate(i);
            Ok(Some(line))
        }
        None if buf.len() > 4096 => Err(HttpError::BadChunk("line too long")),
        None => Ok(None),
    }
}

async fn read_more<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<usize, HttpError> {
    buf.reserve(max.max(4096));
    Ok(io.read_buf(buf).await?)
}

async fn more<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<(), HttpError> {
    if read_more(io, buf, max).await? == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(raw: &'static [u8], max: usize) -> Result<Vec<u8>, HttpError> {
        let mut io = raw;
        let mut buf = BytesMut::new();
        let head = read_response_head(&mut io, &mut buf).await?;
        let mut body = BodyReader::new(&head);
        let mut out = Vec::new();
        while let Some(b) = body.next(&mut io, &mut buf, max).await? {
            assert!(b.len() <= max);
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    #[test]
    fn chunk_heads_should_be_lowercase_hex_lines() {
        for (len, want) in [
            (1usize, "1\r\n"),
            (255, "ff\r\n"),
            (0x10000, "10000\r\n"),
            (usize::MAX, "ffffffffffffffff\r\n"),
        ] {
            assert_eq!(ChunkHead::new(len).as_bytes(), want.as_bytes());
        }
    }

    #[tokio::test]
    async fn chunked_body_should_be_unframed() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n8\r\n, \xffworld\r\n0\r\nTrailer: a\r\n\r\n";
        assert_eq!(body_of(raw, 3).await.unwrap(), b"hello, \xffworld");
    }

    #[tokio::test]
    async fn a_bad_chunk_size_should_be_refused() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n";
        assert!(matches!(
            body_of(raw, 64).await,
            Err(HttpError::BadChunk("size is not hex"))
        ));
        let long: &'static [u8] = Vec::leak(
            [
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;"[..],
                &[b'x'; 5000],
            ]
            .concat(),
        );
        assert!(matches!(
            body_of(long, 64).await,
            Err(HttpError::BadChunk("line too long"))
        ));
    }

    #[test]
    fn reasons_should_be_the_standard_phrases() {
        assert_eq!(reason(101), "Switching Protocols");
        assert_eq!(reason(431), "Request Header Fields Too Large");
        assert_eq!(reason(504), "Gateway Timeout");
        assert_eq!(reason(599), "Unknown");
    }

    #[tokio::test]
    async fn length_and_eof_bodies_should_be_read_whole() {
        let raw = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnopeEXTRA";
        assert_eq!(body_of(raw, 2).await.unwrap(), b"nope");
        let raw = b"HTTP/1.0 200 OK\r\n\r\nuntil the end";
        assert_eq!(body_of(raw, 64).await.unwrap(), b"until the end");
    }

    #[tokio::test]
    async fn truncated_bodies_should_be_errors() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort";
        assert!(body_of(raw, 64).await.is_err());
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(body_of(raw, 64).await.is_err());
    }

    #[tokio::test]
    async fn ambiguous_body_lengths_should_be_malformed() {
        for raw in [
            &b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\nx",
            b"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx",
            b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\nx",
        ] {
            let mut io = raw;
            let mut buf = BytesMut::new();
            let r = read_request_head(&mut io, &mut buf).await;
            assert!(matches!(r, Err(HttpError::Malformed(_))), "{r:?}");
        }
        let mut io = &b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"[..];
        let mut buf = BytesMut::new();
        let head = read_request_head(&mut io, &mut buf).await.unwrap();
        assert_eq!(head.content_length(), Some(1));
    }

    #[tokio::test]
    async fn request_head_should_leave_the_following_bytes_in_the_buffer() {
        let mut io: &[u8] =
            b"POST /exec/a/b/c?x=1 HTTP/1.1\r\nConnection: Upgrade\r\nupgrade: SPDY/3.1\r\n\r\n\x80\x03";
        let mut buf = BytesMut::new();
        let head = read_request_head(&mut io, &mut buf).await.unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.path(), "/exec/a/b/c");
        assert!(head.headers.has_token("connection", "upgrade"));
        assert_eq!(head.headers.get_str("UPGRADE"), Some("SPDY/3.1"));
        assert_eq!(&buf[..], b"\x80\x03");
    }

    /// Both head readers share one loop: a head arriving a few bytes per read is read whole,
    /// and what follows it stays in the buffer.
    #[tokio::test]
    async fn heads_should_be_read_across_small_reads() {
        use tokio::io::AsyncWriteExt as _;
        let (mut tx, mut rx) = tokio::io::duplex(7);
        tokio::spawn(async move {
            tx.write_all(b"GET /pods HTTP/1.1\r\nHost: a\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno")
                .await
        });
        let mut buf = BytesMut::new();
        let req = read_request_head(&mut rx, &mut buf).await.unwrap();
        assert_eq!((req.method.as_str(), req.target.as_str()), ("GET", "/pods"));
        let resp = read_response_head(&mut rx, &mut buf).await.unwrap();
        assert_eq!(resp.status, 404);
        assert_eq!(resp.headers.get_str("content-length"), Some("2"));
        assert!(b"no".starts_with(&buf), "{buf:?}");
        assert!(matches!(
            read_response_head(&mut &b"HTTP/1.1 200 OK\r\n"[..], &mut BytesMut::new()).await,
            Err(HttpError::Eof { partial: true })
        ));
    }

    #[test]
    fn short_responses_should_be_byte_exact() {
        assert_eq!(
            &text_response(404, "no such pod\n", true)[..],
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 12\r\nConnection: close\r\n\r\nno such pod\n"
        );
        assert_eq!(
            &json_response(403, "{}", false)[..],
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
