//! KubeEdge's devicecontroller on the beehive bus: Devices and DeviceModels down to the node
//! a device is bound to, twin and state reports up into DeviceStatus.
//!
//! ```text
//!  Device/DeviceModel watch ─► membership, devicemodel, device ─► cloudhub ─► edge devicetwin
//!  DeviceStatus ◄─ merge patch ◄─ node authorization ◄─ twin / state reports ◄─ cloudhub
//! ```
//!
//! Start with [`DeviceController`] and [`DeviceControllerConfig`] (`modules.deviceController`).
//! Membership detail requests are answered, an extension over KubeEdge (see the README).
//! An edge reports only on Devices bound to its own node: every upstream request is authorized
//! from the Device watch cache before anything is written.
//!
//! Modules, leaves first: `config`, `request_kind` (what devicetwin asks), `twins` (twin and
//! state report shapes), `metrics`, `authz` (which Devices a node reaches), `policy` (the decision on each
//! DeviceStatus write made for a node), `shared` (the
//! caches and client every task shares), `downstream` (watches → edges), `upstream`
//! (reports → DeviceStatus), `controller` (the beehive module).

mod authz;
mod config;
mod controller;
mod downstream;
mod metrics;
mod policy;
mod request_kind;
mod shared;
mod twins;
mod upstream;

pub use config::{DeviceControllerBuffer, DeviceControllerConfig, DeviceControllerLoad};
pub use controller::DeviceController;
pub use metrics::{DeviceControllerMetrics, DeviceControllerSnapshot};
