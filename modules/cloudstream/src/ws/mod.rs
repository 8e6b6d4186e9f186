//! The tunnel's WebSocket layer (RFC 6455, no extensions): frames, the HTTP upgrade on both
//! ends, and the reader/writer halves with keepalive.

mod codec;
mod handshake;
mod io;

pub use codec::{Decoder, OpCode, Role, WsMessage, encode_frame};
pub use handshake::{
    Refusal, accept_key, check_upgrade_request, check_upgrade_response, client_request,
    new_client_key, switching_protocols,
};
pub use io::{MAX_MESSAGE_LEN, Outgoing, WsReader, write_loop};

/// Errors of the WebSocket layer.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke RFC 6455.
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
    /// A message or frame over the limit.
    #[error("websocket message larger than {0} bytes")]
    TooLarge(usize),
    /// The upgrade was refused or malformed.
    #[error("websocket handshake failed: {0}")]
    Handshake(String),
    /// Nothing arrived, or a write did not finish, in time.
    #[error("websocket {0} timed out")]
    Timeout(&'static str),
}
