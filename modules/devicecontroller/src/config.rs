//! `modules.deviceController` of CloudCoreConfig: keys and defaults exactly as KubeEdge's.

use serde::{Deserialize, Serialize};

/// `modules.deviceController`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DeviceControllerConfig {
    /// Whether the module runs (default `true`).
    #[serde(alias = "Enable")]
    pub enable: bool,
    /// Queue and channel sizes.
    #[serde(alias = "Buffer")]
    pub buffer: DeviceControllerBuffer,
    /// Concurrency.
    #[serde(alias = "Load")]
    pub load: DeviceControllerLoad,
}

impl Default for DeviceControllerConfig {
    fn default() -> Self {
        DeviceControllerConfig {
            enable: true,
            buffer: DeviceControllerBuffer::default(),
            load: DeviceControllerLoad::default(),
        }
    }
}

/// `modules.deviceController.buffer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceControllerBuffer {
    /// Twin report queue (default 1024).
    #[serde(rename = "updateDeviceTwins", alias = "UpdateDeviceTwins")]
    pub update_device_twins: i32,
    /// State report queue (default 1024; Go's field is `UpdateDeviceStates`, the key
    /// `updateDeviceStatus`). Also sizes the membership detail queue.
    #[serde(rename = "updateDeviceStatus", alias = "UpdateDeviceStatus")]
    pub update_device_states: i32,
    /// Go's device informer channel. Accepted for compatibility: the watch streams are polled
    /// directly by the processing loop.
    #[serde(rename = "deviceEvent", alias = "DeviceEvent")]
    pub device_event: i32,
    /// Go's device model informer channel (accepted, unused: see `deviceEvent`).
    #[serde(rename = "deviceModelEvent", alias = "DeviceModelEvent")]
    pub device_model_event: i32,
    /// Go's device status informer channel (accepted, unused: see `deviceEvent`).
    #[serde(rename = "deviceStatusEvent", alias = "DeviceStatusEvent")]
    pub device_status_event: i32,
}

impl Default for DeviceControllerBuffer {
    fn default() -> Self {
        DeviceControllerBuffer {
            update_device_twins: 1024,
            update_device_states: 1024,
            device_event: 1,
            device_model_event: 1,
            device_status_event: 1,
        }
    }
}

/// `modules.deviceController.load`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceControllerLoad {
    /// Maximum concurrent twin/state/membership handlers, across the three queues (default 1).
    #[serde(
        rename = "updateDeviceStatusWorkers",
        alias = "UpdateDeviceStatusWorkers"
    )]
    pub update_device_status_workers: i32,
}

impl Default for DeviceControllerLoad {
    fn default() -> Self {
        DeviceControllerLoad {
            update_device_status_workers: 1,
        }
    }
}

/// A configured count as a usable size: at least 1.
pub(crate) fn at_least_one(v: i32) -> usize {
    v.max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_real_keys() {
        let c = DeviceControllerConfig::default();
        assert_eq!(
            (
                c.buffer.update_device_twins,
                c.buffer.update_device_states,
                c.load.update_device_status_workers
            ),
            (1024, 1024, 1)
        );
        let c: DeviceControllerConfig =
            serde_saphyr::from_str("buffer:\n  updateDeviceStatus: 8\n  UpdateDeviceTwins: 9\nload:\n  updateDeviceStatusWorkers: 3\n").unwrap();
        assert_eq!(
            (
                c.buffer.update_device_states,
                c.buffer.update_device_twins,
                c.load.update_device_status_workers
            ),
            (8, 9, 3)
        );
        assert!(
            serde_saphyr::to_string(&c)
                .unwrap()
                .contains("updateDeviceStatus: 8")
        );
    }
}
