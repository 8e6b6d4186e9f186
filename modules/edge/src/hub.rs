//! The hub client: certificate bootstrap, WebSocket session to cloudhub, keepalive, reconnect.
