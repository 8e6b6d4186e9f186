//! The tunnel between cloudstream and an edge's stream agent: its messages
//! (`uvarint connect id ‖ uvarint type ‖ data` in WebSocket Text frames), the CONNECT JSON
//! that opens a stream, the table of open streams (inbound queues, send credit) both ends
//! keep. The TLS both ends use is `pki::stream_tls`.
//!
//! ```
//! use kubeedge_wire::tunnel::{MessageType, TunnelMessage};
//!
//! let bytes = TunnelMessage::remove(300).encode();
//! assert_eq!(&bytes[..], &[0xac, 0x02, 0x04]);
//! let back = TunnelMessage::decode(bytes).unwrap();
//! assert_eq!(back.kind, MessageType::RemoveConnect);
//! ```

mod connect;
mod frame;
mod queue;
mod streams;

pub use connect::{ConnectError, ConnectRequest, GoHeader, canonical_header_key};
pub use frame::{
    FrameError, INPUT_WINDOW_HEADER, MAX_DATA_LEN, MessageType, TunnelMessage, WINDOW_HEADER,
    put_uvarint,
};
pub use queue::{Inbound, PushError, QueueReceiver, QueueSender, StreamEnd, stream_queue};
pub use streams::{Credit, CreditClosed, OPENING_BYTES, Pushed, StreamTable};
