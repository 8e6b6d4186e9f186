//! The request kinds devicetwin sends, one queue each.

/// The request kinds devicetwin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Twin,
    State,
    MembershipDetail,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Twin, Kind::State, Kind::MembershipDetail];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Twin => "updateDeviceTwins",
            Kind::State => "updateDeviceStatus",
            Kind::MembershipDetail => "membershipDetail",
        }
    }

    /// The `kind` label of `cloudcore_node_authorization_denied_total`.
    pub(crate) fn metric_name(self) -> &'static str {
        match self {
            Kind::Twin => "twinUpdate",
            Kind::State => "deviceStateUpdate",
            Kind::MembershipDetail => "membershipDetail",
        }
    }
}

/// The metric label of requests whose shape is not one devicetwin sends.
pub(crate) const UNKNOWN_KIND: &str = "unknown";
