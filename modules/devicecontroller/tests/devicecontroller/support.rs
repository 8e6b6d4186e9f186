//! What the topics share.

/// Every test's controller watches devices cluster-wide and creates a DeviceStatus for each,
/// so a test that counts its own controller's status writes, or checks that none were
/// written, must run alone: it takes this lock for writing, every other test that runs a
/// controller for reading.
pub(crate) static ALONE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
