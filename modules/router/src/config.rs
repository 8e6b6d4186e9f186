//! `modules.router` of CloudCoreConfig: KubeEdge's keys and defaults, and this router's limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `modules.router`. KubeEdge's keys (`enable`, `address`, `port`, `restTimeout`) keep their
/// meaning and defaults; the others are this router's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RouterConfig {
    /// Whether the module runs (default `false`, as KubeEdge).
    pub enable: bool,
    /// Where the REST listener binds (default `0.0.0.0`, as KubeEdge).
    pub address: String,
    /// The REST listener's port, plain HTTP (default 9443, as KubeEdge; 0 or below: 9443).
    pub port: i32,
    /// Seconds a REST call may take, the edge's answer included (default 60; 0 or below: 60).
    /// KubeEdge spends it per attempt and tries three times; here it bounds the whole call.
    pub rest_timeout: i32,
    /// Largest request body a REST call may carry, and largest answer passed back (default
    /// 12 MiB, KubeEdge's fixed limit). A larger body is refused with `413`.
    pub max_body_bytes: u64,
    /// Deliveries of one rule in progress at once, REST calls and edge messages alike (default
    /// 64). One more REST call is refused with `429`; one more edge message is dropped and
    /// counted as a failure.
    pub max_concurrent_per_rule: u32,
    /// Deliveries in progress at once, all rules together (default 1024), refused the same way.
    pub max_concurrent: u32,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            enable: false,
            address: "0.0.0.0".into(),
            port: DEFAULT_PORT,
            rest_timeout: DEFAULT_REST_TIMEOUT,
            max_body_bytes: 12 << 20,
            max_concurrent_per_rule: 64,
            max_concurrent: 1024,
        }
    }
}

const DEFAULT_PORT: i32 = 9443;
const DEFAULT_REST_TIMEOUT: i32 = 60;

impl RouterConfig {
    /// `address:port` of the REST listener (KubeEdge's fallback for a port of 0 or below).
    pub fn listen_address(&self) -> String {
        let port = if self.port <= 0 {
            DEFAULT_PORT
        } else {
            self.port
        };
        if self.address.contains(':') && !self.address.starts_with('[') {
            format!("[{}]:{port}", self.address)
        } else {
            format!("{}:{port}", self.address)
        }
    }

    /// The time bound of one REST call (KubeEdge's fallback for 0 or below).
    pub fn rest_timeout(&self) -> Duration {
        let secs = if self.rest_timeout <= 0 {
            DEFAULT_REST_TIMEOUT
        } else {
            self.rest_timeout
        };
        Duration::from_secs(secs as u64)
    }

    /// The values that cannot work, by field name.
    pub fn validate(&self) -> Result<(), String> {
        if self.port > i32::from(u16::MAX) {
            return Err(format!("port: {} is not a TCP port", self.port));
        }
        if self.max_body_bytes == 0 {
            return Err("maxBodyBytes: must be > 0".into());
        }
        if self.max_concurrent_per_rule == 0 || self.max_concurrent == 0 {
            return Err("maxConcurrentPerRule and maxConcurrent must be > 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeedge_keys_and_defaults() {
        let c = RouterConfig::default();
        assert!(!c.enable);
        assert_eq!(c.listen_address(), "0.0.0.0:9443");
        assert_eq!(c.rest_timeout(), Duration::from_secs(60));
        assert_eq!(c.max_body_bytes, 12 * 1024 * 1024);
        let c: RouterConfig = serde_saphyr::from_str(
            "enable: true\naddress: 127.0.0.1\nport: 0\nrestTimeout: -1\nmaxConcurrentPerRule: 2\n",
        )
        .unwrap();
        assert!(c.enable);
        assert_eq!(c.listen_address(), "127.0.0.1:9443", "port 0 means 9443");
        assert_eq!(c.rest_timeout(), Duration::from_secs(60));
        assert_eq!(c.max_concurrent_per_rule, 2);
        assert!(c.validate().is_ok());
        let c = RouterConfig {
            port: 70000,
            ..RouterConfig::default()
        };
        assert!(c.validate().unwrap_err().starts_with("port:"));
        let v6 = RouterConfig {
            address: "::1".into(),
            port: 1,
            ..RouterConfig::default()
        };
        assert_eq!(v6.listen_address(), "[::1]:1");
    }
}
