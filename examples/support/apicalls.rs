//! API server calls the load tools make while the API server is loaded too (each includes this
//! file with `#[path]`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

/// Runs `op` up to 5 times, 500 ms apart.
pub(crate) async fn retry<T, F, Fut>(mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 4 => return Err(e),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// A pod's resource version as a number (0 when absent or not a number).
pub(crate) fn rv_of(pod: &Pod) -> u64 {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
