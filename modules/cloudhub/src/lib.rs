//! The hub edge nodes connect to: WebSocket sessions, reliable delivery, certificate server
