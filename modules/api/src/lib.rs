//! The KubeEdge API every module shares: names, resource paths, CRDs and the error shapes the
//! edge decodes.
//!
//! ```text
//! edge ⇄ cloudhub ⇄ beehive ⇄ controllers ⇄ apiserver
//!          └──── resource paths, names, ObjectSync: kubeedge-api ────┘
//! ```
//!
//! Start with [`NodeResource`] for `node/<id>/<ns>/<type>/<name>` paths and [`names`] for the
//! module and group names messages are routed by.
//!
//! ```
//! use kubeedge_api::{NodeResource, trim_node};
//! let r = NodeResource::new("edge-1", "default", "pod", "web").build().unwrap();
//! assert_eq!(trim_node(&r), "default/pod/web");
//! ```

pub mod crds;
pub mod names;
pub mod reliablesyncs;
mod resource;
pub mod status;
pub mod version;

pub use resource::{NodeResource, ResourceError, node_of, trim_node, with_node};
