//! The iptables manager runs the real `iptables` inside a network namespace the test makes.

use std::process::{Command, Stdio};
use std::sync::Arc;

use cloudstream::TunnelPortRecord;
use cloudstream::iptables::{IptablesError, IptablesManager, SystemRunner};

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

    m.reconcile(&record(&[("10.0.0.5", 10351)])).await.unwrap();
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
            "-A TUNNEL-PORT -p tcp -m tcp --dport 10351 -j DNAT --to-destination 10.0.0.5:10003"
        ),
        "{rules}"
    );

    // Idempotent: a second pass adds nothing.
    m.reconcile(&record(&[("10.0.0.5", 10351)])).await.unwrap();
    assert_eq!(ns.nat_rules(), rules);

    // An IP that leaves the record loses its rule; a new one gets its own; a changed port
    // replaces the old rule (upstream keeps it).
    m.reconcile(&record(&[("10.0.0.6", 10352), ("10.0.0.7", 10353)]))
        .await
        .unwrap();
    m.reconcile(&record(&[("10.0.0.6", 10352), ("10.0.0.7", 10354)]))
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
