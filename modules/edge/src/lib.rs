//! The edge side: a hub client and a stream agent, for tests, load tools and Rust edge applications
