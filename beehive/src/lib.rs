//! A beehive-style message bus on actix, wire-compatible with KubeEdge's Go beehive.
//!
//! Modules are actix actors registered by name and group on a [`Bus`]. Each has a bounded
//! mailbox (1024 by default) with real back-pressure; anyone holding an [`Endpoint`] can send
//! to a module, to every module of a group, or send synchronously and wait for the response
//! whose parent id matches.
//!
//! ```text
//! controller ─send──► [mailbox 1024] ─► cloudhub actor
//!     ▲                                       │
//!     └──── send_resp (parent id) ◄───────────┘  (matched through the waiter table)
//! ```
//!
//! Start with [`Bus`] and [`Module`]; messages are [`Message`] (Go's `model.Message`). Without
//! the default `bus` feature the crate is only the message model and its JSON, with no actix.
//!
//! ```
//! use std::time::Duration;
//! use beehive::{Bus, Message, constants::operation};
//!
//! # actix_rt::System::new().block_on(async {
//! let bus = Bus::new();
//! let mut inbox = bus.register_inbox("hub", "hub", 16).unwrap();
//! bus.start().unwrap();
//!
//! let controller = bus.endpoint("controller");
//! let msg = Message::new().with_route("controller", "resource", "node/n1/default/pod/p", operation::INSERT);
//! controller.send("hub", msg).await.unwrap();
//! assert_eq!(inbox.recv().await.unwrap().route.operation, "insert");
//! bus.shutdown().await;
//! # });
//! ```

/// Items of the bus itself, compiled with the `bus` feature (on by default).
macro_rules! cfg_bus {
    ($($item:item)*) => {
        $(
            #[cfg(feature = "bus")]
            #[cfg_attr(docsrs, doc(cfg(feature = "bus")))]
            $item
        )*
    };
}

// The message model: what travels, and its Go-compatible JSON; and the retry back-off every
// module shares.
mod backoff;
pub mod constants;
pub mod json;
mod message;
mod message_text;
mod sender;

pub use backoff::Backoff;
pub use message::{Content, Header, Message, Route, new_id, now_millis};
pub use message_text::{Id, IdText, Str};
pub use sender::Sender;

// The bus: leaves first (config, error, stats, mailbox, waiters), then the registry every
// endpoint shares, then endpoints, modules and the bus that starts and stops them.
cfg_bus! {
    mod bus;
    mod config;
    mod endpoint;
    mod error;
    mod mailbox;
    mod module;
    mod registry;
    mod stats;
    mod waiters;

    pub use bus::Bus;
    pub use config::BusConfig;
    pub use endpoint::{Endpoint, GroupDelivery};
    pub use error::{Error, Result};
    pub use mailbox::{DEFAULT_MAILBOX_CAPACITY, Inbox};
    pub use module::{Module, RestartPolicy};
    pub use stats::{BusStats, ModuleStatsSnapshot, SYNC_BUCKETS};
    pub use waiters::RespOutcome;

    /// The concurrent maps of the bus (modules, groups, counters, waiting requests): keys are
    /// hashed with foldhash, seeded at random per map, several times faster than SipHash on the
    /// 36-character request ids every sync round trip looks up twice.
    type FastMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;
}

/// The crate README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "bus"))]
pub struct ReadmeDoctests;
