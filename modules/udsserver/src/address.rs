//! Where the server listens: `unix://<path>` or `tcp://<host:port>`, read as KubeEdge reads
//! `modules.cloudHub.unixsocket.address`.

use std::net::SocketAddr;
use std::path::PathBuf;

/// A listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A Unix socket file (KubeEdge puts a `/` in front of what follows `unix://`).
    Unix(PathBuf),
    /// A TCP address; only loopback is accepted (the socket carries no authentication).
    Tcp(SocketAddr),
}

/// Why an address cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Neither `unix://` nor `tcp://`, or nothing after it.
    #[error("{0:?} is not unix://<path> or tcp://<host:port>")]
    Invalid(String),
    /// A TCP address that is not on loopback: anyone reaching it could send volume requests
    /// to any edge node.
    #[error("{0} is not a loopback address (the socket has no authentication)")]
    NotLoopback(String),
}

impl std::str::FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || AddressError::Invalid(s.to_owned());
        let (proto, rest) = s.split_once("://").ok_or_else(invalid)?;
        if rest.is_empty() {
            return Err(invalid());
        }
        match proto.to_ascii_lowercase().as_str() {
            "unix" => Ok(Address::Unix(PathBuf::from(format!(
                "/{}",
                rest.trim_start_matches('/')
            )))),
            "tcp" => {
                let addr: SocketAddr = rest.parse().map_err(|_| invalid())?;
                if !addr.ip().is_loopback() {
                    return Err(AddressError::NotLoopback(rest.to_owned()));
                }
                Ok(Address::Tcp(addr))
            }
            _ => Err(invalid()),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix://{}", p.display()),
            Address::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_kubeedge_reads_them() {
        assert_eq!(
            "unix:///var/lib/kubeedge/kubeedge.sock".parse(),
            Ok(Address::Unix("/var/lib/kubeedge/kubeedge.sock".into()))
        );
        assert_eq!(
            "UNIX://tmp/x.sock".parse(),
            Ok(Address::Unix("/tmp/x.sock".into()))
        );
        assert_eq!(
            "tcp://127.0.0.1:7001".parse(),
            Ok(Address::Tcp("127.0.0.1:7001".parse().unwrap()))
        );
        assert!(matches!(
            "tcp://0.0.0.0:7001".parse::<Address>(),
            Err(AddressError::NotLoopback(_))
        ));
        for bad in ["/var/lib/x.sock", "unix://", "http://x", "tcp://nope"] {
            assert!(
                matches!(bad.parse::<Address>(), Err(AddressError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
