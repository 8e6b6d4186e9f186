//! Property-based fuzzing of every decoder that takes bytes from the network or from files: hub
//! WebSocket framing and message JSON, the Rust edge's reading of server frames, tunnel frames and
//! CONNECT JSON, the tunnel WebSocket codec, HTTP/1 heads and chunked bodies, Go URLs, CSRs,
//! certificates, keys and tokens, and the cloudcore YAML.
//!
//! Each decoder gets arbitrary bytes and mutated real inputs (bit flips, truncations, splices,
//! length-field edits, duplications of frames captured from an unmodified edgecore, see
//! `tests/fuzz_seeds/README.md`), and must not panic, hang or allocate more than a stated bound
//! (a global allocator counting per thread measures the peak of each decode). Where an encoder
//! exists, what decodes re-encodes and decodes to the same value.
//!
//! CI runs about 4,500 cases in all (256 per cheap property; properties whose cases sign
//! certificates, parse YAML or open TLS sessions run a fraction of that). One command runs
//! millions (10^6 per cheap property, the same fractions for the others):
//!
//! ```text
//! PROPTEST_CASES=1000000 cargo test --release --test fuzz_decoders
//! ```
//!
//! A failing case is shrunk and its seed saved to `tests/fuzz_decoders.proptest-regressions`
//! (commit that file, so the case runs first from then on).

use std::collections::BTreeMap;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use beehive::{Content, Message};
use cloudcore_server::config::CloudCoreConfig;
use kubeedge_wire::gourl::GoUrl;
use kubeedge_wire::http1::{self, BodyReader, Bytes, BytesMut, HttpError};
use kubeedge_wire::hub::{self as wire, Incoming, Reassembler};
use kubeedge_wire::tunnel::{ConnectRequest, MAX_DATA_LEN, MessageType, TunnelMessage};
use kubeedge_wire::ws::{self, Decoder, Role, WsMessage};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence, TestRunner};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use ws_peer::OpCode;

// ---------------------------------------------------------------------------------------------
// Harness: allocation measurement, case counts, mutations.

/// Runs `f` and returns its result with the peak of heap bytes it held at once (its result
/// included). `allocation_counter` installs a global allocator that counts per thread, so
/// other tests allocating on their threads (proptest generates their inputs there) never
/// inflate a measurement.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let mut out = None;
    // A panic is carried out of `measure` so that its per-thread nesting is unwound before
    // proptest runs the next (shrinking) case on this thread.
    let info = allocation_counter::measure(|| out = Some(catch_unwind(AssertUnwindSafe(f))));
    match out.expect("the measured closure ran") {
        Ok(out) => (out, usize::try_from(info.bytes_max).unwrap_or(usize::MAX)),
        Err(panic) => resume_unwind(panic),
    }
}

const KIB: usize = 1024;

/// Cases per property when `PROPTEST_CASES` is not set: a few thousand across the file.
const DEFAULT_CASES: u32 = 256;

/// `PROPTEST_CASES` (or [`DEFAULT_CASES`]) divided by `cost`, for properties whose cases are
/// slower (signatures, TLS handshakes) than a pure decode.
fn cases(cost: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    let total = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        DEFAULT_CASES
    };
    ProptestConfig {
        cases: (total / cost).max(4),
        source_file: Some(file!()),
        // Beside this file: `tests/` has no lib.rs for the default layout to anchor on.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..base
    }
}

/// A position in the input: anywhere, or near the start where headers and length fields are.
#[derive(Debug, Clone)]
enum Pos {
    Any(Index),
    Head(usize),
}

impl Pos {
    fn at(&self, len: usize) -> usize {
        match self {
            _ if len == 0 => 0,
            Pos::Any(i) => i.index(len),
            Pos::Head(h) => (*h).min(len - 1),
        }
    }
}

/// Byte strings decoders treat specially: WebSocket length markers and extended lengths, varint
/// edges, DER long-form lengths, maxima, and text that JSON, YAML and HTTP parsers trip on.
const MAGIC: &[&[u8]] = &[
    &[0x00],
    &[0x01],
    &[0x7d],
    &[0x7e],
    &[0x7f],
    &[0x80],
    &[0x81],
    &[0xfe],
    &[0xff],
    &[0x7e, 0xff, 0xff],
    &[0x7f, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    &[0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x01],
    &[0x80, 0x00],
    &[0xff, 0xff],
    &[0x7f, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff],
    &[0x00, 0x10, 0x00, 0x01],
    &[0xff; 8],
    &[0xff; 10],
    &[0x80; 11],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[0x84, 0xff, 0xff, 0xff, 0xff],
    &[0x84, 0x00, 0x10, 0x00, 0x00],
    &[0x88, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    &[0x80, 0x00, 0x00],
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"-0",
    b"1e999",
    b"18446744073709551616",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"0.5",
    b"null",
    b"[",
    b"{",
    b"%",
    b"%zz",
    b"%00",
    b"?",
    b"#",
    b";",
    b"=",
    b"-----BEGIN ",
    b"\xef\xbf\xbf",
    b"\xed\xa0\x80",
    b"\xc0\x80",
    b"\xf4\x90\x80\x80",
];

/// One edit of a seed, as mutation fuzzers make them.
#[derive(Debug, Clone)]
enum Edit {
    FlipBit(Pos, u8),
    SetByte(Pos, u8),
    /// Writes (or inserts) one of [`MAGIC`].
    Magic(Pos, Index, bool),
    Truncate(Index),
    Remove(Pos, usize),
    Insert(Pos, Vec<u8>),
    /// Repeats `n` bytes from the position right after themselves, `times` times.
    Duplicate(Pos, usize, u8),
    /// Copies a piece of another seed in (inserted, or written over).
    Splice {
        seed: Index,
        from: Index,
        len: usize,
        at: Pos,
        overwrite: bool,
    },
}

fn pos() -> impl Strategy<Value = Pos> {
    prop_oneof![
        any::<Index>().prop_map(Pos::Any),
        (0usize..24).prop_map(Pos::Head),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (pos(), 0u8..8).prop_map(|(p, b)| Edit::FlipBit(p, b)),
        2 => (pos(), any::<u8>()).prop_map(|(p, v)| Edit::SetByte(p, v)),
        3 => (pos(), any::<Index>(), any::<bool>()).prop_map(|(p, i, o)| Edit::Magic(p, i, o)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        1 => (pos(), 1usize..64).prop_map(|(p, n)| Edit::Remove(p, n)),
        1 => (pos(), vec(any::<u8>(), 1..16)).prop_map(|(p, b)| Edit::Insert(p, b)),
        1 => (pos(), 1usize..256, 1u8..8).prop_map(|(p, n, t)| Edit::Duplicate(p, n, t)),
        1 => (any::<Index>(), any::<Index>(), 1usize..512, pos(), any::<bool>()).prop_map(
            |(seed, from, len, at, overwrite)| Edit::Splice { seed, from, len, at, overwrite }
        ),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit], corpus: &[Vec<u8>]) -> Vec<u8> {
    for e in edits {
        let len = data.len();
        match e {
            Edit::FlipBit(p, bit) if len > 0 => data[p.at(len)] ^= 1 << bit,
            Edit::SetByte(p, v) if len > 0 => data[p.at(len)] = *v,
            Edit::FlipBit(..) | Edit::SetByte(..) => {}
            Edit::Magic(p, i, overwrite) => {
                let magic = MAGIC[i.index(MAGIC.len())];
                let at = p.at(len).min(len);
                if *overwrite {
                    let end = (at + magic.len()).min(len);
                    data.splice(at..end, magic.iter().copied());
                } else {
                    data.splice(at..at, magic.iter().copied());
                }
            }
            Edit::Truncate(i) => data.truncate(i.index(len + 1)),
            Edit::Remove(p, n) => {
                let at = p.at(len);
                data.drain(at..(at + n).min(len));
            }
            Edit::Insert(p, bytes) => {
                let at = p.at(len);
                data.splice(at..at, bytes.iter().copied());
            }
            Edit::Duplicate(p, n, times) => {
                let at = p.at(len);
                let piece = data[at..(at + n).min(len)].to_vec();
                let end = at + piece.len();
                for _ in 0..*times {
                    data.splice(end..end, piece.iter().copied());
                }
            }
            Edit::Splice {
                seed,
                from,
                len: n,
                at,
                overwrite,
            } => {
                let other = &corpus[seed.index(corpus.len())];
                if other.is_empty() {
                    continue;
                }
                let start = from.index(other.len());
                let piece = &other[start..(start + n).min(other.len())];
                let at = at.at(len);
                let end = if *overwrite {
                    (at + piece.len()).min(len)
                } else {
                    at
                };
                data.splice(at..end, piece.iter().copied());
            }
        }
    }
    data
}

/// A seed from `corpus` with a few edits.
fn mutated(corpus: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    (any::<Index>(), vec(edit(), 1..8))
        .prop_map(move |(i, edits)| apply(corpus[i.index(corpus.len())].clone(), &edits, corpus))
}

/// Arbitrary bytes, up to `max` of them.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

/// Arbitrary bytes, or a mutated seed from `corpus` (mutations weigh more: they get past the
/// first checks).
fn input(corpus: &'static [Vec<u8>], max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![1 => bytes(max), 3 => mutated(corpus)]
}

/// Read sizes for stream decoders: the same bytes split at different places must decode alike.
fn splits() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![usize::MAX]),
        vec(1usize..64, 1..8),
        vec(1usize..4096, 1..8),
    ]
}

fn split<'a>(data: &'a [u8], sizes: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = data;
    let mut i = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = sizes[i % sizes.len()].clamp(1, rest.len());
        i += 1;
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Some(head)
    })
}

/// An `AsyncRead` that hands out `data` in reads of the given sizes, then EOF.
struct Trickle<'a> {
    data: &'a [u8],
    sizes: &'a [usize],
    reads: usize,
}

impl<'a> Trickle<'a> {
    fn new(data: &'a [u8], sizes: &'a [usize]) -> Self {
        Trickle {
            data,
            sizes,
            reads: 0,
        }
    }
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let size = self.sizes[self.reads % self.sizes.len()].max(1);
        self.reads += 1;
        let n = size.min(self.data.len()).min(buf.remaining());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// JSON values of every shape, for round trips and for swapping into real messages.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec((".{0,8}", inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Replaces the `n`-th node (pre-order, modulo the count) of `v` with `with`.
fn replace_node(v: &mut Value, n: usize, with: Value) {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn walk(v: &mut Value, n: &mut usize, with: &mut Option<Value>) {
        if *n == 0 {
            if let Some(w) = with.take() {
                *v = w;
            }
            return;
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, n, with)),
            Value::Object(o) => o.values_mut().for_each(|x| walk(x, n, with)),
            _ => {}
        }
    }
    let mut n = n % count(v);
    walk(v, &mut n, &mut Some(with));
}

/// A JSON seed with one node swapped for another value and, sometimes, a key's case changed
/// (Go matches keys case-insensitively, so both spellings must decode).
fn json_mutated(corpus: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    (
        any::<Index>(),
        any::<usize>(),
        json_value(),
        any::<Option<Index>>(),
    )
        .prop_map(move |(i, node, with, recase)| {
            let mut v: Value =
                serde_json::from_slice(&corpus[i.index(corpus.len())]).unwrap_or(Value::Null);
            replace_node(&mut v, node, with);
            let mut out = serde_json::to_vec(&v).unwrap_or_default();
            if let Some(at) = recase
                && !out.is_empty()
            {
                let at = at.index(out.len());
                out[at] = out[at].to_ascii_uppercase();
            }
            out
        })
}

/// Text in the shape of JSON (tokens of every kind), which gets further than random bytes.
fn json_like() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("\"header\"".to_owned()),
        Just("\"route\"".to_owned()),
        Just("\"content\"".to_owned()),
        Just("\"msg_id\"".to_owned()),
        Just("\"timestamp\"".to_owned()),
        Just("\"MessID\"".to_owned()),
        Just("\"url\"".to_owned()),
        Just("\"alg\"".to_owned()),
        Just("\"exp\"".to_owned()),
        "-?[0-9]{1,25}(\\.[0-9]{1,5})?(e[+-]?[0-9]{1,4})?",
        "\"([a-zA-Z0-9 ]|\\\\u[0-9a-fA-F]{4}|\\\\[nrt\"\\\\/])*\"",
    ];
    vec(token, 0..64).prop_map(|t| t.concat().into_bytes())
}

/// `open` repeated `depth` times then `close` as often: parsers must refuse deep nesting
/// without overflowing the stack.
fn nested(
    open: &'static str,
    close: &'static str,
    max_depth: usize,
) -> impl Strategy<Value = Vec<u8>> {
    (1usize..max_depth).prop_map(move |depth| {
        let mut s = open.repeat(depth);
        s.push_str(&close.repeat(depth));
        s.into_bytes()
    })
}

// ---------------------------------------------------------------------------------------------
// Seeds.

/// Frames edgecore sent to the hub (masked), as captured.
const HUB_CAPTURED: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/hub/keepalive.ws"),
    include_bytes!("fuzz_seeds/hub/ack_response.ws"),
    include_bytes!("fuzz_seeds/hub/metaserver_request.ws"),
    include_bytes!("fuzz_seeds/hub/fragmented_metaserver_request.ws"),
    include_bytes!("fuzz_seeds/hub/sigterm_empty.ws"),
];

/// Hub messages that are not edge-to-cloud captures (downstream, and the edged-only uploads).
const JSON_MESSAGES: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/json/downstream_pod_insert.json"),
    include_bytes!("fuzz_seeds/json/node_status_update.json"),
    include_bytes!("fuzz_seeds/json/pod_status_update.json"),
];

/// Frames edgecore sent on the tunnel (masked), as captured.
const TUNNEL_CAPTURED: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/tunnel/ping.ws"),
    include_bytes!("fuzz_seeds/tunnel/logs_data.ws"),
    include_bytes!("fuzz_seeds/tunnel/logs_remove.ws"),
    include_bytes!("fuzz_seeds/tunnel/exec_data_101.ws"),
    include_bytes!("fuzz_seeds/tunnel/exec_data_spdy.ws"),
];

const CONNECT_JSON: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/json/logs_connect_7.json"),
    include_bytes!("fuzz_seeds/json/exec_connect_8.json"),
];

const REQUEST_HEADS: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/http/hub_upgrade_request.http"),
    include_bytes!("fuzz_seeds/http/tunnel_upgrade_request.http"),
    include_bytes!("fuzz_seeds/http/edge_crt_request.http"),
    include_bytes!("fuzz_seeds/http/kubelet_logs_request.http"),
    include_bytes!("fuzz_seeds/http/kubelet_exec_request.http"),
];

const RESPONSES: &[&[u8]] = &[
    include_bytes!("fuzz_seeds/http/metaserver_chunked_response.http"),
    include_bytes!("fuzz_seeds/http/metaserver_length_response.http"),
];

const EDGE_CSR: &[u8] = include_bytes!("fuzz_seeds/pki/edge_csr.der");
const EDGE_CERT: &[u8] = include_bytes!("fuzz_seeds/pki/edge_cert.der");
const CONFIG_YAML: &str = include_str!("fuzz_seeds/config/cloudcore.yaml");

/// The node edgecore ran as during the capture.
const CAPTURED_NODE: &str = "edge-node-1";

fn owned(seeds: &[&[u8]]) -> Vec<Vec<u8>> {
    seeds.iter().map(|s| s.to_vec()).collect()
}

/// A client frame (masked) of `op` with `payload`.
fn masked(op: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    ws_peer::encode_frame(
        &mut out,
        op,
        fin,
        &[payload],
        Some([0x5a, 0x13, 0xc7, 0x01]),
    );
    out.to_vec()
}

/// A server frame (unmasked) of `op` with `payload`.
fn unmasked(op: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    ws_peer::encode_frame(&mut out, op, fin, &[payload], None);
    out.to_vec()
}

/// `payload` as a fragmented message of `pieces` frames with a ping between the first two.
fn fragmented(payload: &[u8], pieces: usize, frame: fn(OpCode, bool, &[u8]) -> Vec<u8>) -> Vec<u8> {
    let size = payload.len().div_ceil(pieces).max(1);
    let mut parts: Vec<&[u8]> = payload.chunks(size).collect();
    if parts.is_empty() {
        parts.push(&[]);
    }
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let op = if i == 0 {
            OpCode::Text
        } else {
            OpCode::Continuation
        };
        out.extend(frame(op, i + 1 == parts.len(), part));
        if i == 0 {
            out.extend(frame(OpCode::Ping, true, b"ping you"));
        }
    }
    out
}

/// Payloads of the captured hub frames (what edgecore's `WriteJSON` produced).
static HUB_PAYLOADS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = Vec::new();
    for frame in HUB_CAPTURED {
        let mut r = Reassembler::server(1 << 20);
        let mut buf = BytesMut::from(*frame);
        while let Some(item) = r.next(&mut buf).expect("a captured frame decodes") {
            if let Incoming::Data(d) = item {
                out.push(d.to_vec());
            }
        }
    }
    assert_eq!(out.len(), HUB_CAPTURED.len(), "one message per capture");
    out
});

/// Hub messages: the captured payloads and the other JSON seeds.
static MESSAGES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = HUB_PAYLOADS.clone();
    out.extend(owned(JSON_MESSAGES));
    out
});

/// Edge-to-hub byte streams: each capture, the whole session back to back, and the messages
/// re-framed into fragments around a ping (as edgecore writes messages over 4 KiB).
static HUB_STREAMS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = owned(HUB_CAPTURED);
    out.push(HUB_CAPTURED.concat());
    out.extend(MESSAGES.iter().map(|m| fragmented(m, 3, masked)));
    out
});

/// Hub-to-edge byte streams (unmasked) for the Rust edge client.
static SERVER_STREAMS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out: Vec<Vec<u8>> = MESSAGES
        .iter()
        .map(|m| unmasked(OpCode::Text, true, m))
        .collect();
    out.push(out.concat());
    out.extend(MESSAGES.iter().map(|m| fragmented(m, 3, unmasked)));
    out
});

/// Tunnel payloads: the captured edge frames' and the cloud's CONNECT messages.
static TUNNEL_MESSAGES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = Vec::new();
    for frame in TUNNEL_CAPTURED {
        let mut d = Decoder::new(Role::Server, ws::MAX_MESSAGE_LEN);
        let mut buf = BytesMut::from(*frame);
        match d.decode(&mut buf).expect("a captured frame decodes") {
            Some(WsMessage::Text(t)) => out.push(t.to_vec()),
            Some(WsMessage::Ping(_)) => {}
            other => panic!("unexpected capture {other:?}"),
        }
    }
    for (id, (kind, json)) in [(7u64, (MessageType::LogsConnect, CONNECT_JSON[0]))]
        .into_iter()
        .chain([(8, (MessageType::ExecConnect, CONNECT_JSON[1]))])
    {
        out.push(
            TunnelMessage::new(id, kind, json.to_vec())
                .encode()
                .to_vec(),
        );
    }
    out.push(TunnelMessage::remove(300).encode().to_vec());
    out.push(
        TunnelMessage::close("failed to Update KubeletEndpoint Port")
            .encode()
            .to_vec(),
    );
    out
});

/// Edge-to-cloud tunnel streams (masked) and cloud-to-edge ones (unmasked).
static TUNNEL_STREAMS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = owned(TUNNEL_CAPTURED);
    out.push(TUNNEL_CAPTURED.concat());
    out.extend(TUNNEL_MESSAGES.iter().map(|m| fragmented(m, 2, masked)));
    out
});

static TUNNEL_SERVER_STREAMS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out: Vec<Vec<u8>> = TUNNEL_MESSAGES
        .iter()
        .map(|m| unmasked(OpCode::Text, true, m))
        .collect();
    out.push(out.concat());
    out
});

static CONNECTS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| owned(CONNECT_JSON));
static HEADS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| owned(REQUEST_HEADS));

/// Responses, and the request heads followed by chunked bodies, for the body reader.
static BODIES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut out = owned(RESPONSES);
    let mut chunked = BytesMut::from(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..]);
    http1::put_chunk(&mut chunked, b"2023-11-14T22:13:20Z stdout F hello\n");
    http1::put_chunk(&mut chunked, &[0xff, 0x00, 0x0d, 0x0a]);
    chunked.extend_from_slice(b"5;ext=1\r\nworld\r\n0\r\nTrailer: x\r\n\r\n");
    out.push(chunked.to_vec());
    out.push(b"HTTP/1.0 200 OK\r\n\r\nuntil the end".to_vec());
    out
});

/// Request targets seen on the wire.
static TARGETS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    REQUEST_HEADS
        .iter()
        .map(|h| {
            let line = h.split(|b| *b == b'\r').next().unwrap_or_default();
            line.split(|b| *b == b' ')
                .nth(1)
                .unwrap_or_default()
                .to_vec()
        })
        .chain([
            b"/containerLogs/default/nginx/nginx?follow=true&tailLines=10".to_vec(),
            b"/exec/ns/p%2Fq/c?command=sh&command=-c&command=echo%20hi&stdin=1".to_vec(),
            b"/stats/summary".to_vec(),
            b"/a%20b/%E2%82%AC?x=%ZZ#frag".to_vec(),
        ])
        .collect()
});

static CA: LazyLock<pki::CertificateAuthority> =
    LazyLock::new(|| pki::CertificateAuthority::generate().expect("a CA"));

static DER_SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let csr = pki::EdgeCsr::generate("edge-1").expect("a CSR");
    vec![
        EDGE_CSR.to_vec(),
        EDGE_CERT.to_vec(),
        CA.cert_der().to_vec(),
        csr.csr_der,
        // Key material made here, never stored in the corpus.
        csr.key_der,
        CA.key_der().to_vec(),
    ]
});

/// PEM files as the cloud and the edge read them from disk.
static PEM_SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let key = pki::generate_ec_key().expect("a key");
    vec![
        CA.cert_pem().into_bytes(),
        pki::to_pem("CERTIFICATE", EDGE_CERT).into_bytes(),
        pki::to_pem("EC PRIVATE KEY", &key).into_bytes(),
        format!("{}{}", CA.cert_pem(), CA.key_pem()).into_bytes(),
    ]
});

static TOKENS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let captured = REQUEST_HEADS[2]
        .split(|b| *b == b'\n')
        .find_map(|l| l.strip_prefix(b"Authorization: Bearer "))
        .expect("the captured /edge.crt request carries a token");
    vec![
        pki::create_jwt(CA.key_der(), Duration::from_secs(3600)).into_bytes(),
        pki::create_jwt_expiring(CA.key_der(), 1).into_bytes(),
        pki::create_token(&CA, Duration::from_secs(3600)).into_bytes(),
        captured.trim_ascii().to_vec(),
    ]
});

/// The JWTs among [`TOKENS`] that verify: the bare one and the one in the bootstrap token.
static VALID_JWTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let bare = String::from_utf8_lossy(&TOKENS[0]).into_owned();
    let bootstrap = String::from_utf8_lossy(&TOKENS[2]).into_owned();
    let (_, jwt) = pki::split_token(&bootstrap).expect("a bootstrap token");
    vec![bare, jwt.to_owned()]
});

static YAML_SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    vec![
        CONFIG_YAML.as_bytes().to_vec(),
        CloudCoreConfig::default_yaml().into_bytes(),
        CloudCoreConfig::min_yaml().into_bytes(),
    ]
});

#[test]
fn seed_corpus_is_what_edgecore_sent() {
    let ops: Vec<String> = HUB_PAYLOADS
        .iter()
        .map(|p| {
            wire::decode_json(p)
                .expect("captured JSON decodes")
                .route
                .operation
                .to_string()
        })
        .collect();
    assert_eq!(ops, ["keepalive", "response", "null", "null", ""]);
    assert!(HUB_PAYLOADS.iter().all(|p| p.ends_with(b"}\n")));
    let kinds: Vec<MessageType> = TUNNEL_MESSAGES[..4]
        .iter()
        .map(|m| {
            TunnelMessage::decode(Bytes::from(m.clone()))
                .expect("decodes")
                .kind
        })
        .collect();
    assert_eq!(
        kinds,
        [
            MessageType::Data,
            MessageType::RemoveConnect,
            MessageType::Data,
            MessageType::Data
        ]
    );
    for c in CONNECT_JSON {
        ConnectRequest::from_json(c).expect("CONNECT seeds decode");
    }
    CloudCoreConfig::from_yaml(CONFIG_YAML).expect("the config seed loads");
}

// ---------------------------------------------------------------------------------------------
// cloudhub: WebSocket framing (server side) and the hub message JSON.

/// What a hub connection made of a byte stream.
#[derive(Debug)]
struct HubRun {
    items: Vec<Incoming>,
    error: Option<wire::WireError>,
}

/// Feeds `input` to a server-side reassembler in reads of `sizes`, as the hub's read loop does,
/// and decodes each data message as the hub does.
fn run_hub(input: &[u8], sizes: &[usize], limit: usize) -> HubRun {
    let mut r = Reassembler::server(limit);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for chunk in split(input, sizes) {
        buf.extend_from_slice(chunk);
        loop {
            match r.next(&mut buf) {
                Ok(Some(item)) => {
                    if let Incoming::Data(d) = &item {
                        consume_message(d);
                    }
                    items.push(item);
                }
                Ok(None) => break,
                Err(e) => {
                    return HubRun {
                        items,
                        error: Some(e),
                    };
                }
            }
        }
    }
    HubRun { items, error: None }
}

/// Decodes a payload as the hub and the edge do and hands the message to everything that
/// reads message content on either side.
fn consume_message(payload: &[u8]) -> Option<Message> {
    let msg = wire::decode_json(payload).ok()?;
    let _ = cloudhub::classify(&msg);
    let _ = cloudhub::object_info(&msg);
    let _ = wire::needs_ack(&msg);
    let _ = wire::ack_for(&msg);
    let _ = msg.content.as_string();
    let _ = msg.content.parse_bytes::<Value>();
    let _ = msg.to_string();
    Some(msg)
}

/// Hub framing: the reassembler may reserve one frame up to its limit, may hold one fragmented
/// message up to its limit, and otherwise keeps slices of the input.
fn hub_bound(n: usize, limit: usize) -> usize {
    2 * limit + 6 * n + 16 * KIB
}

/// Hub JSON: a message holds its strings and its raw content, each no longer than the input.
fn json_bound(n: usize) -> usize {
    6 * n + 8 * KIB
}

proptest! {
    #![proptest_config(cases(1))]

    #[test]
    fn hub_frames_decode_without_panic_within_the_message_limit(
        input in input(&HUB_STREAMS, 8 * KIB),
        sizes in splits(),
        limit in prop_oneof![Just(64usize), Just(4 * KIB), Just(64 * KIB)],
    ) {
        let (run, peak) = peak_of(|| run_hub(&input, &sizes, limit));
        for item in &run.items {
            if let Incoming::Data(d) = item {
                prop_assert!(d.len() <= limit, "a {} byte message passed the {limit} limit", d.len());
            }
        }
        prop_assert!(peak <= hub_bound(input.len(), limit), "{peak} bytes for {} input bytes, limit {limit}", input.len());
    }

    #[test]
    fn hub_frames_split_anywhere_decode_alike(input in mutated(&HUB_STREAMS), sizes in splits()) {
        let whole = run_hub(&input, &[usize::MAX], 64 * KIB);
        let trickled = run_hub(&input, &sizes, 64 * KIB);
        prop_assert_eq!(&whole.items, &trickled.items);
        prop_assert_eq!(whole.error.map(|e| e.close_code()), trickled.error.map(|e| e.close_code()));
    }

    /// The hub reads frames with the tunnel's decoder under its own error mapping: on any
    /// bytes both deliver the same messages and stop at the same frame, refusing it as too
    /// large, or as a protocol error, alike.
    #[test]
    fn hub_and_tunnel_frames_decode_alike(
        input in prop_oneof![mutated(&HUB_STREAMS), mutated(&TUNNEL_STREAMS)],
        sizes in splits(),
        limit in prop_oneof![Just(64usize), Just(4 * KIB), Just(64 * KIB)],
    ) {
        let hub = run_hub(&input, &sizes, limit);
        let tunnel = run_ws(Role::Server, limit, &input, &sizes);
        let as_hub: Vec<Incoming> = tunnel
            .messages
            .into_iter()
            .map(|m| match m {
                WsMessage::Text(b) | WsMessage::Binary(b) => Incoming::Data(b),
                WsMessage::Ping(b) => Incoming::Ping(b),
                WsMessage::Pong(_) => Incoming::Pong,
                WsMessage::Close(..) => Incoming::Close,
            })
            .collect();
        prop_assert_eq!(hub.items, as_hub);
        prop_assert_eq!(
            hub.error.map(|e| matches!(e, wire::WireError::TooLarge { .. })),
            tunnel.error.map(|e| e.contains("larger than"))
        );
    }

    #[test]
    fn hub_fragments_reassemble_to_the_message(m in message(), pieces in 1usize..6, sizes in splits()) {
        let payload = wire::encode_json(&m);
        let run = run_hub(&fragmented(&payload, pieces, masked), &sizes, payload.len());
        prop_assert!(run.error.is_none(), "{:?}", run.error);
        let data: Vec<&Incoming> = run.items.iter().filter(|i| matches!(i, Incoming::Data(_))).collect();
        let want = Incoming::Data(Bytes::from(payload));
        prop_assert_eq!(data, vec![&want]);
    }

    #[test]
    fn hub_json_decodes_without_panic_within_bound(
        input in prop_oneof![bytes(2 * KIB), json_like(), mutated(&MESSAGES), json_mutated(&MESSAGES), nested("[", "]", 20_000), nested("{\"content\":", "}", 20_000)],
    ) {
        check_hub_json(&input)?;
    }

    #[test]
    fn hub_messages_round_trip(m in message()) {
        let wire_bytes = wire::encode_json(&m);
        prop_assert_eq!(wire_bytes.last(), Some(&b'\n'));
        let mut want = m;
        want.header.sync = false;
        prop_assert_eq!(wire::decode_json(&wire_bytes).expect("decodes"), want);
    }
}

fn check_hub_json(input: &[u8]) -> Result<(), TestCaseError> {
    let (msg, peak) = peak_of(|| consume_message(input));
    prop_assert!(
        peak <= json_bound(input.len()),
        "{peak} bytes for {} input bytes",
        input.len()
    );
    if let Some(m) = msg {
        // Whatever decodes re-encodes to something that decodes to the same message.
        let mut want = m.clone();
        want.header.sync = false;
        let again = wire::decode_json(&wire::encode_json(&m)).expect("re-encoded JSON decodes");
        prop_assert_eq!(&again, &want);
        prop_assert_eq!(
            Message::from_json(&want.to_json()).expect("to_json decodes"),
            want
        );
    }
    Ok(())
}

fn message() -> impl Strategy<Value = Message> {
    let text = || prop_oneof![Just(String::new()), ".{0,16}", "[a-z0-9/-]{1,24}"];
    // Ids also as UUIDs, lowercase (held as 16 bytes) or not (held as text).
    let id = || {
        prop_oneof![
            text(),
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[0-9a-fA-F]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9A-F]{12}",
        ]
    };
    (
        (id(), id(), any::<i64>(), text(), any::<bool>(), text()),
        (text(), text(), text(), text(), text()),
        json_value(),
    )
        .prop_map(
            |((id, parent, ts, rv, sync, ty), (src, dst, grp, op, res), content)| {
                let mut m = Message::default();
                m.header.id = id.into();
                m.header.parent_id = parent.into();
                m.header.timestamp = ts;
                m.header.resource_version = rv.into();
                m.header.sync = sync;
                m.header.message_type = ty.into();
                m.route.source = src.into();
                m.route.destination = dst.into();
                m.route.group = grp.into();
                m.route.operation = op.into();
                m.route.resource = res.into();
                m.content = Content::json(&content).expect("a JSON value serializes");
                m
            },
        )
}

#[test]
fn captured_hub_messages_re_encode_byte_for_byte() {
    for p in MESSAGES.iter() {
        let m = wire::decode_json(p).expect("seed decodes");
        assert_eq!(
            String::from_utf8_lossy(&wire::encode_json(&m)),
            String::from_utf8_lossy(p),
            "Go's encoding survives decode and encode"
        );
    }
}

/// An edge announces a frame larger than the limit, then streams its payload: the hub refuses
/// it from its header, without buffering what follows.
#[test]
fn hub_refuses_an_oversized_frame_from_its_header() {
    let limit = 64 * KIB;
    // FIN + binary, masked, 64-bit length 16 MiB, mask key.
    let mut header = vec![0x82, 0xff, 0, 0, 0, 0, 0x01, 0, 0, 0];
    header.extend_from_slice(&[1, 2, 3, 4]);
    let mut r = Reassembler::server(limit);
    let mut buf = BytesMut::from(&header[..]);
    let mut fed = 0;
    let refused = loop {
        match r.next(&mut buf) {
            Err(e) => break Some(e),
            Ok(Some(item)) => panic!("unexpected {item:?}"),
            Ok(None) if fed >= 4 * limit => break None,
            Ok(None) => {
                buf.extend_from_slice(&[0u8; 4096]);
                fed += 4096;
            }
        }
    };
    assert!(
        matches!(refused, Some(wire::WireError::TooLarge { .. })),
        "{} bytes buffered for a frame over the {limit} byte limit",
        buf.len()
    );
}

// ---------------------------------------------------------------------------------------------
// The Rust edge: server frames over a real TLS socket, as cloudhub would send them.

/// A TLS WebSocket server on loopback that answers one upgrade per case with fuzzed bytes.
struct FakeHub {
    rt: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    client_tls: Arc<rustls::ClientConfig>,
}

impl FakeHub {
    fn new() -> FakeHub {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let server = CA
            .issue_server_cert(&["127.0.0.1".to_owned()], &[])
            .expect("a server certificate");
        let config = pki::tls::server_config_optional_client(&server.cert_der, &server.key_der)
            .expect("a server TLS config");
        let client_tls =
            Arc::new(pki::tls::client_config(CA.cert_der(), None).expect("client TLS"));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        FakeHub {
            rt,
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            client_tls,
        }
    }

    /// Runs one edge session whose server sends `bytes` after the upgrade and then closes;
    /// returns the edge's events up to its disconnect.
    fn session(&self, node: &str, bytes: &[u8]) -> Result<Vec<edge::hub::HubEvent>, String> {
        use beehive::Backoff;
        use edge::hub::{HubClient, HubClientConfig, HubEvent};
        self.rt.block_on(async {
            let addr = self.listener.local_addr().map_err(|e| e.to_string())?;
            let mut config = HubClientConfig::new(node, addr.to_string());
            // One connection per case: the next dial would come long after the case ends.
            config.backoff = Backoff {
                initial: Duration::from_secs(600),
                max: Duration::from_secs(600),
            };
            let (client, mut events) = HubClient::start(config, self.client_tls.clone());
            let serve = self.serve_one(node, bytes);
            let collect = async {
                let mut seen = Vec::new();
                loop {
                    match events.recv().await {
                        Some(HubEvent::Disconnected { reason }) => {
                            seen.push(HubEvent::Disconnected { reason });
                            return Ok(seen);
                        }
                        Some(ev) => seen.push(ev),
                        None => return Err(format!("the hub client ended without a disconnect (panicked?) after {seen:?}")),
                    }
                }
            };
            let out = tokio::time::timeout(Duration::from_secs(20), async {
                let (served, seen) = tokio::join!(serve, collect);
                served?;
                seen
            })
            .await
            .map_err(|_| "the edge session did not end within 20 s".to_owned())?;
            client.stop();
            out
        })
    }

    async fn serve_one(&self, node: &str, bytes: &[u8]) -> Result<(), String> {
        loop {
            let (tcp, _) = self.listener.accept().await.map_err(|e| e.to_string())?;
            let mut tls = self.acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 1];
                if tls.read(&mut b).await.map_err(|e| e.to_string())? == 0 {
                    break;
                }
                head.push(b[0]);
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            if !text.contains(&format!("/{node}/events")) {
                // A late dial of an earlier case's client.
                continue;
            }
            let key = text
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-key"))
                })
                .map(|(_, v)| v.trim().to_owned())
                .ok_or("no Sec-WebSocket-Key")?;
            let answer = ws::switching_protocols(&ws::accept_key(key.as_bytes()), &[]);
            tls.write_all(answer.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            tls.write_all(bytes).await.map_err(|e| e.to_string())?;
            tls.shutdown().await.map_err(|e| e.to_string())?;
            // Read until the edge hangs up, so that its writes (keepalive, acks) never meet a
            // reset that would discard bytes it has not read yet.
            let mut sink = [0u8; 4096];
            while tls.read(&mut sink).await.unwrap_or(0) > 0 {}
            return Ok(());
        }
    }
}

#[test]
fn edge_client_reads_server_frames_without_panic() {
    let hub = FakeHub::new();
    let mut runner = TestRunner::new(cases(16));
    let case = std::cell::Cell::new(0u64);
    let strategy = prop_oneof![bytes(2 * KIB), mutated(&SERVER_STREAMS)];
    let result = runner.run(&strategy, |input| {
        case.set(case.get() + 1);
        let node = format!("fuzz-{}", case.get());
        let (events, peak) = peak_of(|| hub.session(&node, &input));
        let events = events.map_err(TestCaseError::fail)?;
        prop_assert!(
            matches!(events.first(), Some(edge::hub::HubEvent::Connected)),
            "{events:?}"
        );
        // A session holds TLS and WebSocket buffers; no frame may reserve more than it carries.
        prop_assert!(
            peak <= 6 * input.len() + 2 * KIB * KIB,
            "{peak} bytes for {} input bytes",
            input.len()
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn edge_client_delivers_every_server_message() {
    let hub = FakeHub::new();
    let mut runner = TestRunner::new(cases(16));
    let case = std::cell::Cell::new(0u64);
    let result = runner.run(&vec(message(), 1..4), |msgs| {
        case.set(case.get() + 1);
        let node = format!("round-{}", case.get());
        let mut stream = Vec::new();
        for m in &msgs {
            stream.extend(fragmented(&wire::encode_json(m), 2, unmasked));
        }
        let events = hub.session(&node, &stream).map_err(TestCaseError::fail)?;
        let got: Vec<Message> = events
            .into_iter()
            .filter_map(|e| match e {
                edge::hub::HubEvent::Message(m) => Some(m),
                _ => None,
            })
            .collect();
        let want: Vec<Message> = msgs
            .into_iter()
            .map(|mut m| {
                m.header.sync = false;
                m
            })
            .collect();
        prop_assert_eq!(got, want);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// cloudstream: tunnel messages, CONNECT JSON, the tunnel WebSocket codec.

/// Decodes a tunnel payload as both ends do: the frame, then CONNECT JSON and its URL.
fn consume_tunnel(payload: &[u8]) -> Option<TunnelMessage> {
    let m = TunnelMessage::decode(Bytes::copy_from_slice(payload)).ok()?;
    if m.kind.is_connect() {
        consume_connect(&m.data);
    }
    let _ = m.to_string();
    Some(m)
}

fn consume_connect(json: &[u8]) -> Option<ConnectRequest> {
    let req = ConnectRequest::from_json(json).ok()?;
    let _ = req.url.request_target();
    let _ = req.url.to_go_string();
    let _ = req.to_go_json();
    Some(req)
}

#[derive(Debug)]
struct WsRun {
    messages: Vec<WsMessage>,
    error: Option<String>,
}

fn run_ws(role: Role, max: usize, input: &[u8], sizes: &[usize]) -> WsRun {
    let mut d = Decoder::new(role, max);
    let mut buf = BytesMut::new();
    let mut messages = Vec::new();
    for chunk in split(input, sizes) {
        buf.extend_from_slice(chunk);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(m)) => {
                    if let WsMessage::Text(t) | WsMessage::Binary(t) = &m {
                        consume_tunnel(t);
                    }
                    messages.push(m);
                }
                Ok(None) => break,
                Err(e) => {
                    return WsRun {
                        messages,
                        error: Some(e.to_string()),
                    };
                }
            }
        }
    }
    WsRun {
        messages,
        error: None,
    }
}

/// Tunnel codec: like the hub's, one reserved frame and one pending message up to the limit.
fn ws_bound(n: usize, max: usize) -> usize {
    2 * max + 6 * n + 16 * KIB
}

/// CONNECT JSON is parsed into a `serde_json::Value` first: a few dozen bytes per element of
/// the input (`[0,0,…]` is two input bytes for a 32-byte value in a growing vector).
fn value_bound(n: usize) -> usize {
    48 * n + 16 * KIB
}

proptest! {
    #![proptest_config(cases(1))]

    #[test]
    fn tunnel_messages_decode_without_panic_and_without_copying(
        input in prop_oneof![bytes(2 * KIB), mutated(&TUNNEL_MESSAGES), Just(vec![0xff; 11])],
    ) {
        check_tunnel_message(&input)?;
    }

    #[test]
    fn tunnel_messages_round_trip(id in any::<u64>(), code in prop_oneof![0u64..8, any::<u64>()], data in bytes(512)) {
        let m = TunnelMessage::new(id, MessageType::from_code(code), data);
        let encoded = m.encode();
        prop_assert_eq!(encoded.len(), m.encoded_len());
        prop_assert_eq!(TunnelMessage::decode(encoded).expect("decodes"), m);
    }

    #[test]
    fn connect_json_decodes_without_panic_within_bound(
        input in prop_oneof![bytes(2 * KIB), json_like(), mutated(&CONNECTS), json_mutated(&CONNECTS), nested("{\"url\":", "}", 20_000)],
    ) {
        check_connect_json(&input)?;
    }

    #[test]
    fn connect_requests_round_trip(req in connect_request()) {
        let json = req.to_go_json();
        prop_assert_eq!(ConnectRequest::from_json(json.as_bytes()).expect("decodes"), req);
    }

    #[test]
    fn tunnel_frames_decode_without_panic_within_the_limit(
        server_side in any::<bool>(),
        streams in (input(&TUNNEL_STREAMS, 8 * KIB), input(&TUNNEL_SERVER_STREAMS, 8 * KIB)),
        sizes in splits(),
        max in prop_oneof![Just(64usize), Just(4 * KIB), Just(64 * KIB)],
    ) {
        let (role, input) = if server_side { (Role::Server, streams.0) } else { (Role::Client, streams.1) };
        check_tunnel_frames(role, &input, &sizes, max)?;
    }

    #[test]
    fn tunnel_frames_round_trip(
        payloads in vec((prop_oneof![Just(OpCode::Text), Just(OpCode::Binary)], bytes(300), 1usize..4), 1..4),
        client in any::<bool>(),
        sizes in splits(),
    ) {
        let frame: fn(OpCode, bool, &[u8]) -> Vec<u8> = if client { masked } else { unmasked };
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (op, data, pieces) in &payloads {
            let mut one = fragmented(data, *pieces, frame);
            if *op == OpCode::Binary {
                // The first frame's opcode carries the message type.
                one[0] = (one[0] & 0xf0) | 0x2;
                want.push(WsMessage::Binary(Bytes::from(data.clone())));
            } else {
                want.push(WsMessage::Text(Bytes::from(data.clone())));
            }
            stream.extend(one);
        }
        let role = if client { Role::Server } else { Role::Client };
        let run = run_ws(role, 1 << 20, &stream, &sizes);
        prop_assert!(run.error.is_none(), "{:?}", run.error);
        let data: Vec<WsMessage> = run.messages.into_iter().filter(|m| !matches!(m, WsMessage::Ping(_))).collect();
        prop_assert_eq!(data, want);
    }
}

fn check_tunnel_message(input: &[u8]) -> Result<(), TestCaseError> {
    let bytes = Bytes::copy_from_slice(input);
    let (decoded, peak) = peak_of(|| TunnelMessage::decode(bytes));
    // The data is a slice of the message: decoding copies nothing.
    prop_assert!(peak <= 256, "{peak} bytes to decode {} bytes", input.len());
    if let Ok(m) = decoded {
        prop_assert!(m.data.len() <= MAX_DATA_LEN);
        prop_assert!(input.ends_with(&m.data));
        prop_assert_eq!(
            TunnelMessage::decode(m.encode()).expect("re-encoded decodes"),
            m
        );
    }
    consume_tunnel(input);
    Ok(())
}

fn check_connect_json(input: &[u8]) -> Result<(), TestCaseError> {
    let (req, peak) = peak_of(|| consume_connect(input));
    prop_assert!(
        peak <= value_bound(input.len()),
        "{peak} bytes for {} input bytes",
        input.len()
    );
    if let Some(req) = req {
        let again = ConnectRequest::from_json(req.to_go_json().as_bytes())
            .expect("re-encoded CONNECT decodes");
        prop_assert_eq!(again, req);
    }
    Ok(())
}

fn check_tunnel_frames(
    role: Role,
    input: &[u8],
    sizes: &[usize],
    max: usize,
) -> Result<(), TestCaseError> {
    let (run, peak) = peak_of(|| run_ws(role, max, input, sizes));
    for m in &run.messages {
        if let WsMessage::Text(t) | WsMessage::Binary(t) = m {
            prop_assert!(t.len() <= max);
        }
    }
    prop_assert!(
        peak <= ws_bound(input.len(), max),
        "{peak} bytes for {} input bytes, limit {max}",
        input.len()
    );
    let whole = run_ws(role, max, input, &[usize::MAX]);
    prop_assert_eq!(whole.messages, run.messages, "split reads decode alike");
    prop_assert_eq!(whole.error, run.error);
    Ok(())
}

fn connect_request() -> impl Strategy<Value = ConnectRequest> {
    let text = || prop_oneof![Just(String::new()), ".{0,16}"];
    let url = (
        (text(), text(), text(), text(), text()),
        (text(), any::<bool>(), text(), text(), any::<bool>()),
    )
        .prop_map(
            |(
                (scheme, opaque, host, path, raw_path),
                (raw_query, force_query, fragment, raw_fragment, omit_host),
            )| {
                GoUrl {
                    scheme,
                    opaque,
                    host,
                    path,
                    raw_path,
                    raw_query,
                    force_query,
                    fragment,
                    raw_fragment,
                    omit_host,
                }
            },
        );
    let header = vec((".{0,12}", vec(".{0,12}", 0..3)), 0..4)
        .prop_map(|kv| kv.into_iter().collect::<BTreeMap<_, _>>());
    (any::<u64>(), url, header, proptest::option::of(text())).prop_map(
        |(mess_id, url, header, method)| ConnectRequest {
            mess_id,
            url,
            header,
            method,
        },
    )
}

/// An edge that announces a tunnel frame as large as the limit makes the decoder reserve that
/// much before any payload arrives; the limit is what bounds it.
#[test]
fn tunnel_codec_reserves_no_more_than_its_limit_for_an_announced_frame() {
    let header = [0x81, 0xff, 0, 0, 0, 0, 0, 0x40, 0, 0, 1, 2, 3, 4];
    let (run, peak) = peak_of(|| run_ws(Role::Server, ws::MAX_MESSAGE_LEN, &header, &[usize::MAX]));
    assert!(run.error.is_none() && run.messages.is_empty());
    assert!(peak <= ws::MAX_MESSAGE_LEN + 64 * KIB, "{peak} bytes");
    // One byte more than the limit is refused from the header alone.
    let over = [0x81, 0xff, 0, 0, 0, 0, 0, 0x40, 0, 1, 1, 2, 3, 4];
    let (run, peak) = peak_of(|| run_ws(Role::Server, ws::MAX_MESSAGE_LEN, &over, &[usize::MAX]));
    assert!(run.error.is_some_and(|e| e.contains("larger than")));
    assert!(peak <= 16 * KIB, "{peak} bytes");
}

// ---------------------------------------------------------------------------------------------
// HTTP/1: request heads (stream server, tunnel and cert server upgrades, the edge's kubelet),
// response heads and bodies (the kubelet's answers relayed by the edge).

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

fn consume_request_head(input: &[u8], sizes: &[usize]) -> Result<http1::RequestHead, HttpError> {
    let mut io = Trickle::new(input, sizes);
    let mut buf = BytesMut::new();
    let head = block_on(http1::read_request_head(&mut io, &mut buf))?;
    let _ = head.path();
    let _ = head.keep_alive();
    let _ = head.content_length();
    let _ = ws::check_upgrade_request(&head);
    let _ = head.headers.contains_ci("Upgrade", "spdy");
    if let Ok(url) = GoUrl::from_request_target(&head.target, "http", "127.0.0.1:10350") {
        let _ = url.request_target();
    }
    Ok(head)
}

/// Reads a response and its whole body; fails if the reader stops making progress.
fn consume_response(input: &[u8], sizes: &[usize], max: usize) -> Result<Vec<u8>, String> {
    let mut io = Trickle::new(input, sizes);
    let mut buf = BytesMut::new();
    block_on(async {
        let head = http1::read_response_head(&mut io, &mut buf)
            .await
            .map_err(|e| e.to_string())?;
        let mut body = BodyReader::new(&head);
        let mut out = Vec::new();
        // Every call consumes input or ends: more calls than bytes means a loop.
        for _ in 0..=input.len() + 8 {
            match body.next(&mut io, &mut buf, max).await {
                Ok(Some(piece)) => {
                    if piece.len() > max {
                        return Err(format!("a {} byte piece over max {max}", piece.len()));
                    }
                    out.extend_from_slice(&piece);
                }
                Ok(None) => return Ok(out),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the body reader stopped making progress".to_owned())
    })
}

/// HTTP heads: the buffer grows by reads of at most 8 KiB past what arrived, and the parsed
/// head owns copies of its parts.
fn head_bound(n: usize) -> usize {
    4 * n.min(http1::MAX_HEAD_LEN + 8 * KIB) + 64 * KIB
}

proptest! {
    #![proptest_config(cases(1))]

    #[test]
    fn request_heads_parse_without_panic_within_bound(
        input in prop_oneof![bytes(2 * KIB), mutated(&HEADS)],
        sizes in splits(),
    ) {
        check_request_head(&input, &sizes)?;
    }

    #[test]
    fn responses_and_bodies_read_without_panic_within_bound(
        input in prop_oneof![bytes(2 * KIB), mutated(&BODIES)],
        sizes in splits(),
        max in 1usize..4096,
    ) {
        check_response(&input, &sizes, max)?;
    }

    #[test]
    fn chunked_bodies_round_trip(pieces in vec(bytes(300), 0..6), sizes in splits(), max in 1usize..512) {
        let mut raw = BytesMut::from(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..]);
        for p in &pieces {
            http1::put_chunk(&mut raw, p);
        }
        raw.extend_from_slice(http1::LAST_CHUNK);
        let body = consume_response(&raw, &sizes, max).map_err(TestCaseError::fail)?;
        prop_assert_eq!(body, pieces.concat());
    }

    #[test]
    fn go_urls_parse_without_panic_and_round_trip(
        target in prop_oneof![
            ".{0,64}".prop_map(String::into_bytes),
            vec(prop::sample::select(&b"/%?#aZ09-._~!$&'()*+,;=:@ \r\n\x7f\xc3\xa9"[..]), 0..48),
            mutated(&TARGETS),
        ],
    ) {
        check_go_url(&target)?;
    }
}

fn check_request_head(input: &[u8], sizes: &[usize]) -> Result<(), TestCaseError> {
    let (head, peak) = peak_of(|| consume_request_head(input, sizes));
    prop_assert!(
        peak <= head_bound(input.len()),
        "{peak} bytes for {} input bytes",
        input.len()
    );
    let whole = consume_request_head(input, &[usize::MAX]);
    prop_assert_eq!(head.ok(), whole.ok(), "split reads parse alike");
    Ok(())
}

fn check_response(input: &[u8], sizes: &[usize], max: usize) -> Result<(), TestCaseError> {
    let (body, peak) = peak_of(|| consume_response(input, sizes, max));
    prop_assert!(
        !matches!(&body, Err(e) if e.contains("progress") || e.contains("piece over")),
        "{body:?}"
    );
    prop_assert!(
        peak <= 4 * input.len() + 4 * max + 64 * KIB,
        "{peak} bytes for {} input bytes",
        input.len()
    );
    let whole = consume_response(input, &[usize::MAX], max);
    prop_assert_eq!(body.ok(), whole.ok(), "split reads give the same body");
    Ok(())
}

fn check_go_url(target: &[u8]) -> Result<(), TestCaseError> {
    let target = String::from_utf8_lossy(target).into_owned();
    let (url, peak) = peak_of(|| {
        let url = GoUrl::from_request_target(&target, "http", "127.0.0.1:10350");
        if let Ok(u) = &url {
            let _ = u.escaped_path();
            let _ = u.to_go_string();
        }
        url
    });
    prop_assert!(
        peak <= 8 * target.len() + 4 * KIB,
        "{peak} bytes for {} bytes",
        target.len()
    );
    if let Ok(url) = url
        && let Ok(line) = url.request_target()
    {
        // What the edge sends on its request line parses back to the same URL.
        prop_assert!(!line.bytes().any(|b| b <= b' ' || b == 0x7f));
        let again = GoUrl::from_request_target(&line, "http", "127.0.0.1:10350")
            .expect("the request target parses");
        prop_assert_eq!(&again.path, &url.path);
        prop_assert_eq!(&again.raw_query, &url.raw_query);
        prop_assert_eq!(again.escaped_path(), url.escaped_path());
    }
    Ok(())
}

/// A peer that never ends its head is cut off at the head limit.
#[test]
fn an_endless_request_head_is_refused_at_the_limit() {
    let (result, peak) = peak_of(|| {
        let mut io = tokio::io::repeat(b'a');
        let mut buf = BytesMut::new();
        block_on(http1::read_request_head(&mut io, &mut buf))
    });
    assert!(matches!(result, Err(HttpError::TooLarge)), "{result:?}");
    assert!(peak <= 3 * http1::MAX_HEAD_LEN, "{peak} bytes");
}

/// A chunk-size line that never ends is refused, not buffered.
#[test]
fn an_endless_chunk_size_line_is_refused() {
    let (result, peak) = peak_of(|| {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut io = tokio::io::AsyncReadExt::chain(&head[..], tokio::io::repeat(b'f'));
        let mut buf = BytesMut::new();
        block_on(async {
            let head = http1::read_response_head(&mut io, &mut buf).await?;
            let mut body = BodyReader::new(&head);
            body.next(&mut io, &mut buf, 1024).await
        })
    });
    assert!(matches!(result, Err(HttpError::BadChunk(_))), "{result:?}");
    assert!(peak <= 64 * KIB, "{peak} bytes");
}

// ---------------------------------------------------------------------------------------------
// PKI: CSRs (the body of /edge.crt), client certificates, keys and certificates from files,
// bootstrap tokens.

/// DER is parsed in place; what is kept are names and a re-encoded certificate.
fn der_bound(n: usize) -> usize {
    8 * n + 64 * KIB
}

proptest! {
    #![proptest_config(cases(2))]

    #[test]
    fn csrs_are_refused_or_signed_without_panic(
        input in input(&DER_SEEDS, KIB),
        requested in vec(prop_oneof![-1i64..12, any::<i64>()], 0..3),
    ) {
        let policy = pki::SignPolicy::default();
        let (signed, peak) = peak_of(|| CA.sign_edge_csr(&input, CAPTURED_NODE, &requested, &policy));
        prop_assert!(peak <= der_bound(input.len()), "{peak} bytes for {} input bytes", input.len());
        if let Ok(cert) = signed {
            // Only a CSR for this node gets a certificate, and it names exactly this node.
            let id = CA.verify_client_cert(&cert, &[]).expect("what the CA signs verifies");
            prop_assert!(id.is_node(CAPTURED_NODE), "{id:?}");
            prop_assert!(pki::ext_key_usages(&cert).expect("EKUs parse").contains(&2));
        }
    }

    #[test]
    fn certificates_parse_without_panic(input in input(&DER_SEEDS, KIB)) {
        let (_, peak) = peak_of(|| {
            let id = pki::parse_identity(&input);
            let _ = pki::ext_key_usages(&input);
            let _ = pki::Revocations::new().check(&input);
            let _ = CA.verify_client_cert(&input, &[]);
            if let Ok(id) = id {
                let _ = id.node_name();
            }
        });
        prop_assert!(peak <= der_bound(input.len()), "{peak} bytes for {} input bytes", input.len());
    }

    #[test]
    fn pem_and_der_files_load_without_panic(
        input in prop_oneof![input(&PEM_SEEDS, KIB), input(&DER_SEEDS, KIB)],
    ) {
        let (_, peak) = peak_of(|| {
            let _ = pki::load_certificates_pem_or_der(&input);
            let _ = pki::load_private_key_pem_or_der(&input);
            let _ = pki::load_private_key(&input);
            if let Ok(text) = std::str::from_utf8(&input) {
                let _ = pki::pem_blocks(text);
                let _ = pki::load_private_key_pem(text);
                let _ = pki::first_pem_der(text);
            }
        });
        prop_assert!(peak <= der_bound(input.len()), "{peak} bytes for {} input bytes", input.len());
    }

    #[test]
    fn tokens_verify_only_unchanged(input in prop_oneof![input(&TOKENS, 512), json_like()]) {
        let text = String::from_utf8_lossy(&input).into_owned();
        let (verified, peak) = peak_of(|| {
            let _ = pki::split_token(&text);
            pki::verify_jwt(&text, CA.key_der())
        });
        prop_assert!(peak <= value_bound(text.len()), "{peak} bytes for {} bytes", text.len());
        if verified.is_ok() {
            // The MAC covers the header and claims as written: only the signature's padding
            // may differ from a token the CA issued.
            let text = text.trim_end_matches('=');
            prop_assert!(VALID_JWTS.iter().any(|good| text == good), "{text:?} verified");
        }
    }
}

#[test]
fn the_captured_edgecore_csr_is_signed_for_its_node_only() {
    let policy = pki::SignPolicy::default();
    let cert = CA
        .sign_edge_csr(EDGE_CSR, CAPTURED_NODE, &[], &policy)
        .expect("edgecore's CSR is signed");
    assert!(pki::parse_identity(&cert).unwrap().is_node(CAPTURED_NODE));
    assert!(
        CA.sign_edge_csr(EDGE_CSR, "other-node", &[], &policy)
            .is_err()
    );
    assert!(
        pki::parse_identity(EDGE_CERT)
            .unwrap()
            .is_node(CAPTURED_NODE)
    );
}

// ---------------------------------------------------------------------------------------------
// The cloudcore configuration file.

/// One edit of a YAML file at the level of its lines and scalars.
#[derive(Debug, Clone)]
enum YamlEdit {
    /// Replaces the value after the key on a line.
    Value(Index, &'static str),
    DeleteLine(Index),
    DuplicateLine(Index),
    /// Moves a line by two spaces in or out.
    Indent(Index, bool),
    SwapLines(Index, Index),
    Bytes(Edit),
}

const YAML_SCALARS: &[&str] = &[
    "~",
    "null",
    "''",
    "\"\"",
    "-1",
    "0",
    "65536",
    "70000",
    "4294967296",
    "18446744073709551616",
    "1e999",
    "-1e999",
    ".nan",
    ".inf",
    "-.inf",
    "0x1F",
    "0o17",
    "1_000",
    "true",
    "yes",
    "[]",
    "{}",
    "[1, 2",
    "{a: 1}",
    "&anchor 5",
    "*anchor",
    "!!binary aGVsbG8=",
    "!!str 10000",
    "!!int x",
    "!custom x",
    "\"\\u0000\"",
    "\"\\xff\"",
    "|-\n  text",
    "'it''s'",
    "0.0.0.0:99999",
    "[::1]:9091",
    "cloudcore.config.kubeedge.io/v1alpha3",
];

fn yaml_edit() -> impl Strategy<Value = YamlEdit> {
    prop_oneof![
        4 => (any::<Index>(), prop::sample::select(YAML_SCALARS)).prop_map(|(i, s)| YamlEdit::Value(i, s)),
        1 => any::<Index>().prop_map(YamlEdit::DeleteLine),
        1 => any::<Index>().prop_map(YamlEdit::DuplicateLine),
        1 => (any::<Index>(), any::<bool>()).prop_map(|(i, b)| YamlEdit::Indent(i, b)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| YamlEdit::SwapLines(a, b)),
        1 => edit().prop_map(YamlEdit::Bytes),
    ]
}

fn yaml_mutated() -> impl Strategy<Value = Vec<u8>> {
    (any::<Index>(), vec(yaml_edit(), 1..6)).prop_map(|(i, edits)| {
        let seeds: &'static [Vec<u8>] = &YAML_SEEDS;
        let mut text = seeds[i.index(seeds.len())].clone();
        for e in edits {
            let s = String::from_utf8_lossy(&text).into_owned();
            let mut lines: Vec<String> = s.lines().map(str::to_owned).collect();
            if lines.is_empty() {
                lines.push(String::new());
            }
            let n = lines.len();
            match e {
                YamlEdit::Value(i, v) => {
                    let line = &mut lines[i.index(n)];
                    if let Some(colon) = line.find(':') {
                        line.truncate(colon + 1);
                        line.push(' ');
                        line.push_str(v);
                    } else {
                        line.push_str(v);
                    }
                }
                YamlEdit::DeleteLine(i) => {
                    lines.remove(i.index(n));
                }
                YamlEdit::DuplicateLine(i) => {
                    let at = i.index(n);
                    lines.insert(at, lines[at].clone());
                }
                YamlEdit::Indent(i, deeper) => {
                    let line = &mut lines[i.index(n)];
                    if deeper {
                        line.insert_str(0, "  ");
                    } else if line.starts_with("  ") {
                        line.drain(..2);
                    }
                }
                YamlEdit::SwapLines(a, b) => lines.swap(a.index(n), b.index(n)),
                YamlEdit::Bytes(edit) => {
                    text = apply(text, &[edit], seeds);
                    continue;
                }
            }
            text = lines.join("\n").into_bytes();
        }
        text
    })
}

/// A YAML file whose aliases expand to 9^8 nodes (about 43 million): "billion laughs".
fn alias_bomb(under: &str) -> String {
    let mut s = format!("{under}\n");
    s.push_str("    a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let p = i - 1;
        s.push_str(&format!(
            "    a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    s
}

/// The YAML parser keeps a stack entry per nesting level and records anchored events to replay
/// them; the bound allows 512 bytes per input byte (set when serde_yaml, which held the whole
/// event stream, measured about 400 at worst on `- - - -`). The loader caps alias replay at a
/// few events per input byte, so expanded documents stay within the same multiple.
fn yaml_bound(n: usize) -> usize {
    512 * n + 512 * KIB
}

proptest! {
    #![proptest_config(cases(4))]

    #[test]
    fn config_yaml_loads_or_names_the_problem_without_panic(
        // Nesting past the parser's depth limits adds nothing but parse time.
        input in prop_oneof![bytes(KIB), yaml_mutated(), nested("[", "]", 2_000), nested("- ", "", 2_000)],
    ) {
        check_config_yaml(&input)?;
    }
}

fn check_config_yaml(input: &[u8]) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(input).into_owned();
    let (config, peak) = peak_of(|| CloudCoreConfig::from_yaml(&text));
    prop_assert!(
        peak <= yaml_bound(text.len()),
        "{peak} bytes for {} bytes",
        text.len()
    );
    if let Ok(config) = config {
        // Whatever loads is written back (`--defaultconfig` style) to a file that loads the same.
        let yaml = serde_saphyr::to_string(&config).expect("a loaded config serializes");
        let again = CloudCoreConfig::from_yaml(&yaml).expect("a written config loads");
        prop_assert_eq!(again, config);
    }
    Ok(())
}

#[test]
fn config_alias_bombs_are_refused_within_bound() {
    for under in [
        "modules:\n  router:",
        "modules:\n  cloudHub:\n    unknownKey:",
        "featureGates:\n  x:",
    ] {
        let text = alias_bomb(under);
        let (result, peak) = peak_of(|| CloudCoreConfig::from_yaml(&text));
        assert!(result.is_err(), "{under}: {result:?}");
        assert!(
            peak <= yaml_bound(text.len()),
            "{under}: {peak} bytes for {} bytes",
            text.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Cases proptest shrank to while these properties were written, kept as inputs (the seeds in
// `tests/fuzz_decoders.proptest-regressions` regenerate them only while the strategies stay
// the same).

const REGRESSIONS: &[(&str, &[u8])] = &[
    (
        "nested_brackets",
        include_bytes!("fuzz_seeds/regressions/nested_brackets.txt"),
    ),
    (
        "url_target",
        include_bytes!("fuzz_seeds/regressions/url_target.txt"),
    ),
    (
        "message_subnormal_float",
        include_bytes!("fuzz_seeds/regressions/message_subnormal_float.json"),
    ),
    (
        "tunnel_stream_server",
        include_bytes!("fuzz_seeds/regressions/tunnel_stream_server.ws"),
    ),
    (
        "hub_bad_opcode_huge_length",
        include_bytes!("fuzz_seeds/regressions/hub_bad_opcode_huge_length.ws"),
    ),
    (
        "random_1650",
        include_bytes!("fuzz_seeds/regressions/random_1650.bin"),
    ),
];

#[test]
fn regression_cases_pass_every_byte_decoder() {
    for (name, input) in REGRESSIONS {
        let run = || -> Result<(), TestCaseError> {
            check_hub_json(input)?;
            check_connect_json(input)?;
            check_tunnel_message(input)?;
            check_config_yaml(input)?;
            check_go_url(input)?;
            for sizes in [&[usize::MAX][..], &[48, 22, 31], &[1]] {
                check_request_head(input, sizes)?;
                check_response(input, sizes, 1024)?;
                for role in [Role::Server, Role::Client] {
                    check_tunnel_frames(role, input, sizes, 64 * KIB)?;
                }
                let hub = run_hub(input, sizes, 64 * KIB);
                prop_assert!(
                    peak_of(|| run_hub(input, sizes, 64 * KIB)).1
                        <= hub_bound(input.len(), 64 * KIB)
                );
                let whole = run_hub(input, &[usize::MAX], 64 * KIB);
                prop_assert_eq!(hub.items, whole.items);
                prop_assert_eq!(
                    hub.error.map(|e| e.close_code()),
                    whole.error.map(|e| e.close_code())
                );
            }
            Ok(())
        };
        if let Err(e) = run() {
            panic!("{name}: {e}");
        }
    }
}
