//! The iptables manager runs the real `iptables` inside a network namespace the test makes.

use std::process::{Command, Stdio};
use std::sync::Arc;

use cloudstream::TunnelPortRecord;
use std::collections::BTreeSet;

use cloudstream::iptables::{IptablesError, IptablesManager, RecordPolicy, SystemRunner};

/// Fails, naming the package to install, when `tool` is not on `PATH`: these tests run the
/// real one.
fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    assert!(
        found,
        "`{tool}` is not installed; these tests run the real one (apt-get install {package})"
    );
}

/// A network namespace that is deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        require("ip", "iproute2");
        require("iptables", "iptables");
        let name = format!("cs-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("run ip netns add");
        assert!(
            ok.success(),
            "cannot create network namespace {name} (root and iproute2 are needed)"
        );
        Netns(name)
    }

    /// `iptables -t nat -S` inside the namespace.
    fn nat_rules(&self) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "iptables", "-t", "nat", "-S"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The IPs of live cloudcore pods in these tests.
fn cloudcores() -> BTreeSet<String> {
    ["10.0.0.5", "10.0.0.6", "10.0.0.7", "fd00::5"]
        .map(str::to_owned)
        .into()
}

fn record(entries: &[(&str, u16)]) -> TunnelPortRecord {
    let mut r = TunnelPortRecord::default();
    for (ip, port) in entries {
        r.ip_tunnel_port.insert((*ip).to_owned(), *port);
        r.port.insert(*port, true);
    }
    r
}

#[tokio::test]
async fn iptables_manager_should_keep_the_tunnel_port_chain_equal_to_the_record() {
    test_tiers::require!(Root);
    let ns = Netns::new("ipt");
    let mut m = IptablesManager::new(Arc::new(SystemRunner::in_netns(&ns.0)), 10003);
    m.probe().await.unwrap();
    m.flush().await.unwrap();

    m.reconcile(&record(&[("10.0.0.5", 10351)]), &cloudcores())
        .await
        .unwrap();
    let rules = ns.nat_rules();
    assert!(rules.contains("-N TUNNEL-PORT"), "{rules}");
    assert!(
        rules.contains("-A OUTPUT -m comment --comment \"kubeedge tunnel port\" -j TUNNEL-PORT"),
        "{rules}"
    );
    assert!(
        rules
            .contains("-A PREROUTING -m comment --comment \"kubeedge tunnel port\" -j TUNNEL-PORT"),
        "{rules}"
    );
    assert!(
        rules.contains(
            "-A TUNNEL-PORT -p tcp -m addrtype ! --dst-type LOCAL -m tcp --dport 10351 -j DNAT --to-destination 10.0.0.5:10003"
        ),
        "{rules}"
    );

    // Idempotent: a second pass adds nothing.
    m.reconcile(&record(&[("10.0.0.5", 10351)]), &cloudcores())
        .await
        .unwrap();
    assert_eq!(ns.nat_rules(), rules);

    // An IP that leaves the record loses its rule; a new one gets its own; a changed port
    // replaces the old rule (upstream keeps it).
    m.reconcile(
        &record(&[("10.0.0.6", 10352), ("10.0.0.7", 10353)]),
        &cloudcores(),
    )
    .await
    .unwrap();
    m.reconcile(
        &record(&[("10.0.0.6", 10352), ("10.0.0.7", 10354)]),
        &cloudcores(),
    )
    .await
    .unwrap();
    let rules = ns.nat_rules();
    assert!(!rules.contains("10.0.0.5"), "{rules}");
    assert!(
        rules.contains("--dport 10352 -j DNAT --to-destination 10.0.0.6:10003"),
        "{rules}"
    );
    assert!(
        rules.contains("--dport 10354 -j DNAT --to-destination 10.0.0.7:10003"),
        "{rules}"
    );
    assert!(!rules.contains("--dport 10353"), "{rules}");
    assert_eq!(rules.matches("-j TUNNEL-PORT").count(), 2, "{rules}");

    m.cleanup().await.unwrap();
    let rules = ns.nat_rules();
    assert!(!rules.contains("TUNNEL-PORT"), "{rules}");
}

#[tokio::test]
async fn only_live_cloudcores_in_the_port_range_get_rules_and_a_sweeping_record_is_refused() {
    let ns = Netns::new("iptpol");
    let mut m = IptablesManager::new(Arc::new(SystemRunner::in_netns(&ns.0)), 10003).with_policy(
        RecordPolicy {
            own_ip: Some("10.0.0.9".into()),
            max_changes: 3,
            ..RecordPolicy::default()
        },
    );
    m.probe().await.unwrap();
    m.flush().await.unwrap();
    // What a writer of the ConfigMap could put there: the API server's port, etcd's, a
    // kubelet's, an address that is no cloudcore's, a port beyond the range.
    m.reconcile(
        &record(&[
            ("10.0.0.5", 6443),
            ("10.0.0.6", 2379),
            ("10.0.0.7", 10250),
            ("10.9.9.9", 10352),
            ("fd00::5", 10415),
            ("10.0.0.9", 10351),
        ]),
        &cloudcores(),
    )
    .await
    .unwrap();
    let rules = ns.nat_rules();
    for port in ["6443", "2379", "10250", "10352", "10415"] {
        assert!(
            !rules.contains(&format!("--dport {port} ")),
            "{port}: {rules}"
        );
    }
    assert!(!rules.contains("10.9.9.9"), "{rules}");
    // This cloudcore's own entry is programmed, and never for local destinations.
    assert!(
        rules.contains(
            "-A TUNNEL-PORT -p tcp -m addrtype ! --dst-type LOCAL -m tcp --dport 10351 -j DNAT --to-destination 10.0.0.9:10003"
        ),
        "{rules}"
    );
    // A record that would change more than max_changes rules at once changes none.
    let sweeping = record(&[
        ("10.0.0.5", 10352),
        ("10.0.0.6", 10353),
        ("10.0.0.7", 10354),
        ("fd00::5", 10355),
    ]);
    let err = m.reconcile(&sweeping, &cloudcores()).await.unwrap_err();
    assert!(
        matches!(
            err,
            IptablesError::TooManyChanges {
                changes: 5,
                limit: 3
            }
        ),
        "{err}"
    );
    assert_eq!(ns.nat_rules(), rules, "nothing changed");
    m.cleanup().await.unwrap();
}

#[tokio::test]
async fn iptables_manager_should_say_it_is_unavailable_without_a_binary_or_root() {
    test_tiers::require!(Root);
    let mut missing = IptablesManager::new(Arc::new(SystemRunner::new()), 10003)
        .with_programs("/nonexistent/iptables", "/nonexistent/ip6tables");
    assert!(matches!(
        missing.probe().await,
        Err(IptablesError::Unavailable(_))
    ));

    let ns = Netns::new("nonroot");
    require("setpriv", "util-linux");
    let unprivileged = SystemRunner::with_prefix([
        "ip",
        "netns",
        "exec",
        ns.0.as_str(),
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ]);
    let mut m = IptablesManager::new(Arc::new(unprivileged), 10003);
    let err = m.probe().await.unwrap_err();
    assert!(matches!(err, IptablesError::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn standalone_manager_should_fail_when_iptables_is_unavailable() {
    // Redirecting is the standalone manager's only job: it must not idle without iptables.
    // The probe comes before any API call, so an unreachable API server is never dialed.
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let runner = Arc::new(SystemRunner::with_prefix(["/nonexistent/prefix"]));
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        cloudstream::iptables::run_standalone(
            client,
            runner,
            10003,
            "kubeedge".into(),
            Default::default(),
            std::future::pending(),
        ),
    )
    .await
    .expect("returns at once");
    assert!(
        matches!(result, Err(IptablesError::Unavailable(_))),
        "{result:?}"
    );
}
