//! `TunnelPortRecord`: which advertised kubelet port each cloudcore instance owns, kept in
//! the annotation of ConfigMap `kubeedge/tunnelport`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// The ConfigMap's name.
pub const TUNNEL_PORT_CONFIGMAP: &str = "tunnelport";
/// Its namespace.
pub const TUNNEL_PORT_NAMESPACE: &str = "kubeedge";
/// The annotation holding the record's JSON.
pub const TUNNEL_PORT_ANNOTATION: &str = "tunnelportrecord.kubeedge.io";
/// Ports are handed out above this one (the first instance gets 10351).
pub const TUNNEL_PORT_BASE: u16 = 10350;
/// How many ports above [`TUNNEL_PORT_BASE`] the iptables manager accepts by default
/// (10351–10414): far more than cloudcore replicas, and nothing that other services on the
/// API server hosts commonly listen on.
pub const TUNNEL_PORT_LIMIT: u16 = 64;

/// Go's `map` fields decode `null` as empty.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Upstream `TunnelPortRecord` (`cloud/pkg/cloudstream/iptables/iptables.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelPortRecord {
    /// cloudcore IP → its advertised port.
    #[serde(rename = "ipTunnelPort", default, deserialize_with = "nullable")]
    pub ip_tunnel_port: BTreeMap<String, u16>,
    /// Ports ever handed out (never freed upstream).
    #[serde(rename = "port", default, deserialize_with = "nullable")]
    pub port: BTreeMap<u16, bool>,
}

impl TunnelPortRecord {
    /// Parses the annotation; an absent or empty one is an empty record.
    pub fn from_annotation(text: Option<&str>) -> Result<Self, serde_json::Error> {
        match text.map(str::trim) {
            None | Some("") => Ok(TunnelPortRecord::default()),
            Some(t) => serde_json::from_str(t),
        }
    }

    /// The JSON for the annotation.
    pub fn to_annotation(&self) -> String {
        // A map of strings and numbers always serialises.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// The port of `ip`: its old one if known, else the first port above 10350 that no
    /// other IP uses. Returns the port and whether the record changed.
    ///
    /// Upstream never hands a released port out again, so every cloudcore pod that restarts
    /// with a new IP takes the next port and the numbers climb without end; reusing them keeps
    /// every port within `10350 + replicas` (plus those of pods not yet released), a range
    /// the iptables manager can insist on ([`TUNNEL_PORT_LIMIT`]).
    pub fn assign(&mut self, ip: &str) -> (u16, bool) {
        if let Some(p) = self.ip_tunnel_port.get(ip) {
            return (*p, false);
        }
        let used: std::collections::BTreeSet<u16> = self.ip_tunnel_port.values().copied().collect();
        let port = (TUNNEL_PORT_BASE + 1..=u16::MAX)
            .find(|p| !used.contains(p))
            .unwrap_or(u16::MAX);
        self.ip_tunnel_port.insert(ip.to_owned(), port);
        self.port.insert(port, true);
        (port, true)
    }

    /// Forgets `ip` (its port stays reserved, as upstream); true if it was there.
    pub fn release(&mut self, ip: &str) -> bool {
        self.ip_tunnel_port.remove(ip).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_should_read_and_write_upstream_json() {
        let r = TunnelPortRecord::from_annotation(Some(
            r#"{"ipTunnelPort":{"192.168.0.139":10351},"port":{"10351":true}}"#,
        ))
        .unwrap();
        assert_eq!(r.ip_tunnel_port["192.168.0.139"], 10351);
        assert!(r.port[&10351]);
        assert_eq!(
            r.to_annotation(),
            r#"{"ipTunnelPort":{"192.168.0.139":10351},"port":{"10351":true}}"#
        );
        let n = TunnelPortRecord::from_annotation(Some(r#"{"ipTunnelPort":null,"port":null}"#))
            .unwrap();
        assert_eq!(n, TunnelPortRecord::default());
    }

    #[test]
    fn assign_should_hand_out_10351_then_10352_and_keep_known_ips() {
        let mut r = TunnelPortRecord::default();
        assert_eq!(r.assign("10.0.0.1"), (10351, true));
        assert_eq!(r.assign("10.0.0.2"), (10352, true));
        assert_eq!(r.assign("10.0.0.1"), (10351, false));
        assert!(r.release("10.0.0.1"));
        // A released port is handed out again (upstream keeps it reserved for ever).
        assert_eq!(r.assign("10.0.0.3"), (10351, true));
        assert_eq!(r.assign("10.0.0.4"), (10353, true));
    }
}
