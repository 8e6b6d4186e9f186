//! WebSocket for the tunnel and the hub client: `actix_http::ws::Codec` (RFC 6455, no
//! extensions) over any tokio `AsyncRead`/`AsyncWrite`, the HTTP/1.1 upgrade on both ends, and
//! the two halves of a connection: a reader that yields whole messages and a writer that
//! batches queued frames into few socket writes, each within a deadline. Its [`Decoder`] and
//! [`put_frame`] are also the hub's (`hub` adds the hub's error mapping and message types).
//!
//! The tunnel carries binary data in Text frames (edgecore's gorilla never validates UTF-8).
//! actix-http's `Frame::Text` is raw bytes and `Parser::write_message` writes raw bytes, so
//! neither end checks UTF-8; actix-web-actors' `ws::Message::Text` (a `ByteString`) would.

mod handshake;
mod socket;

pub use handshake::{
    Refusal, accept_key, check_upgrade_request, check_upgrade_response, client_handshake,
    client_request, new_client_key, switching_protocols,
};
pub(crate) use socket::Refused;
pub use socket::{
    Decoder, MAX_CLOSE_REASON, MAX_MESSAGE_LEN, Outgoing, Role, WsMessage, WsReader, WsWriter, cut,
    put_close, put_frame, write_loop,
};

/// Errors of the WebSocket layer.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke RFC 6455.
    #[error("websocket protocol error: {0}")]
    Protocol(String),
    /// A message or frame over the limit.
    #[error("websocket message larger than {0} bytes")]
    TooLarge(usize),
    /// The upgrade was malformed.
    #[error("websocket handshake failed: {0}")]
    Handshake(String),
    /// The server answered the upgrade with another status than 101.
    #[error("websocket upgrade refused: status {status}: {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// Nothing arrived, or a write did not finish, in time.
    #[error("websocket {0} timed out")]
    Timeout(&'static str),
}
