//! The stream server: the kubelet API the API server calls, relayed through the tunnels.

mod authz;
mod client_io;
mod exec;
mod locate;
mod relay;
mod route;
mod server;
mod session_key;

pub(crate) use authz::{Authorizer, Webhook};
pub use locate::{KubePodLocator, LocateError, PodLocator, StaticPods};
pub(crate) use server::{StreamContext, run};
