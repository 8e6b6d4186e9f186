//! The cloudcore binary, run from the repository: the same program as the `cloudcore-server`
//! crate's `cloudcore` binary (see `cloudcore_server::cli`).
//!
//! ```text
//! cargo run --example cloudcore -- --demo                      # whole system, no cluster needed
//! cargo run --example cloudcore -- --defaultconfig > cloudcore.yaml
//! cargo run --example cloudcore -- --config cloudcore.yaml     # against a real cluster
//! cargo run --example cloudcore -- iptables-manager --forward-port 10003   # external iptables mode
//! cargo run --example cloudcore -- diagnose edge-1   # why kubectl logs/exec fails for edge-1
//! ```

fn main() -> std::process::ExitCode {
    cloudcore_server::cli::main()
}
