//! Authorization of the API requests cloudcore makes for edge nodes: the request executed is
//! the request authorized.
//!
//! ```text
//! handler ─http::Request─► authorize(policy, node, request) ─► RequestInfo (as the API server reads it)
//!                                  │                                   │
//!                                  └──────── Policy::decide ◄──────────┘
//!                                                 │ Act (as the node / as cloudcore)
//!                          NodeClient::send(Authorized) ◄─ Authorized { request, decision }
//! ```
//!
//! [`NodeClient`](crate::client::NodeClient) sends nothing but an [`Authorized`], which only
//! [`authorize`] makes: a handler cannot reach the API server for an edge without a decision,
//! and the decision is taken on the attributes read from the very request that is then sent
//! (verb, resource, namespace, name, subresource, selectors; the body for rules that read
//! it). [`restriction`] holds the Node authorizer's and NodeRestriction's rules on bodies, for
//! the policies that apply them in process.

mod authorized;
mod request_info;
pub mod restriction;

pub use authorized::{Act, Authorized, EdgeRequest, Policy, authorize};
pub use request_info::{InvalidRequest, RequestInfo, URI_MAX, field_selector_requires};
