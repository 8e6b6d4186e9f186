//! The stream server: the kubelet API the API server calls, relayed through the tunnels.

mod authz;
mod exec;
mod locate;
mod metrics;
mod relay;
mod route;
mod server;

pub(crate) use authz::{Authorizer, Webhook};
pub use locate::{KubePodLocator, LocateError, PodLocator, StaticPods};
pub(crate) use server::{StreamContext, run};

/// What a handled request leaves the connection fit for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The response is complete; another request may follow.
    KeepAlive,
    /// Close the connection.
    Close,
}
