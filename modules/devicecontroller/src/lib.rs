//! Syncs Device and DeviceModel objects to edge nodes and writes device status back
