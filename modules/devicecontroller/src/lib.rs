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

mod authz;
mod config;
mod controller;
mod downstream;
mod shared;
mod twins;
mod upstream;

pub use config::{DeviceControllerBuffer, DeviceControllerConfig, DeviceControllerLoad};
pub use controller::{DeviceController, DeviceControllerMetrics, DeviceControllerSnapshot};
