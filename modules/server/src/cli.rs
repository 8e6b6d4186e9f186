//! The `cloudcore` command line: cloudhub, the edge, device and sync controllers and
//! cloudstream, configured by a KubeEdge CloudCore YAML file. [`main`] is the whole binary; the
//! `cloudcore` binary of this crate and the root crate's `cloudcore` example both call it.
//!
//! ```text
//! cloudcore --demo                      # whole system, no cluster needed
//! cloudcore --defaultconfig > cloudcore.yaml
//! cloudcore --config cloudcore.yaml     # against a real cluster
//! cloudcore iptables-manager --forward-port 10003   # external iptables mode
//! cloudcore diagnose edge-1   # why kubectl logs/exec fails for edge-1
//! ```
//!
//! (`cargo run --example cloudcore -- <flags>` from the repository, or `cargo install --path
//! modules/server` for the binary.)

mod demo;
mod iptables_manager;
mod logging;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::CloudCoreConfig;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// KubeEdge cloudcore in Rust.
#[derive(Debug, Parser)]
#[command(name = "cloudcore", version = crate::build_info::LONG_VERSION)]
struct Cli {
    /// The configuration file.
    #[arg(long, default_value = "/etc/kubeedge/config/cloudcore.yaml")]
    config: PathBuf,
    /// Print the full default configuration and exit.
    #[arg(long)]
    defaultconfig: bool,
    /// Print a minimal configuration and exit.
    #[arg(long)]
    minconfig: bool,
    /// Log level or filter (`info`, `debug`, `cloudhub=debug,info`); `RUST_LOG` wins when set.
    /// Default `info` (`warn` for the demo, whose own output tells the story).
    #[arg(long)]
    log_level: Option<String>,
    /// klog's verbosity, as KubeEdge's guides use it (`-v 4`, `--v=4`): 0–2 info, 3 debug for
    /// cloudcore's own crates, 4–5 debug, 6 and above trace. `--log-level` wins when both are
    /// given.
    #[arg(short = 'v', long = "v", value_name = "N")]
    verbosity: Option<u8>,
    /// Log format, as Kubernetes components name it: `text` (colour only on a terminal, and
    /// never with `NO_COLOR` set) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = logging::Format::Text)]
    logging_format: logging::Format,
    /// Run the embedded demo: cloudcore plus simulated edge nodes in one process, no cluster.
    #[arg(long)]
    demo: bool,
    /// Simulated edge nodes in the demo.
    #[arg(long, default_value_t = 3)]
    demo_nodes: usize,
    /// Run something other than cloudcore itself.
    #[command(subcommand)]
    command: Option<Command>,
}

/// Other modes of the binary.
#[derive(Debug, Subcommand)]
enum Command {
    /// Keep the tunnel-port DNAT rules for `modules.iptablesManager.mode: external` (KubeEdge's
    /// iptables-manager DaemonSet).
    IptablesManager(iptables_manager::IptablesManagerArgs),
    /// Ask a running cloudcore's monitor server why `kubectl logs/exec` would fail for a node;
    /// exits 0 when every check passes, 1 otherwise.
    Diagnose(DiagnoseArgs),
}

/// `cloudcore diagnose`.
#[derive(Debug, clap::Args)]
struct DiagnoseArgs {
    /// The node.
    node: String,
    /// The monitor server (`commonConfig.monitorServer.bindAddress`).
    #[arg(long, default_value = "127.0.0.1:9091")]
    monitor: String,
    /// Print the JSON report instead.
    #[arg(long)]
    json: bool,
    /// A file holding the bearer token the monitor server reviews (its
    /// `authorization.mode` Webhook). Default: the pod's ServiceAccount token when there is
    /// one (`kubectl exec deploy/cloudcore -- cloudcore diagnose NODE`).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// Where a pod's ServiceAccount token is mounted.
const POD_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

fn diagnose(args: DiagnoseArgs) -> ExitCode {
    let token = match &args.token_file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(token) => Some(token),
            Err(e) => {
                eprintln!("diagnose: token file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => std::fs::read_to_string(POD_TOKEN).ok(),
    };
    let fetched = actix_rt::System::new().block_on(crate::diagnose::fetch_report(
        &args.monitor,
        &args.node,
        token.as_deref(),
    ));
    match fetched {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => eprintln!("{e}"),
                }
            } else {
                print!("{}", report.render());
            }
            if report.status == crate::diagnose::Status::Ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("diagnose {}: {}", args.node, causes(&e));
            ExitCode::from(2)
        }
    }
}

/// Parses the process's arguments and runs what they ask for; the exit code says how it went
/// (0 success; 1 a failure, or a diagnosis that found a problem; 2 a usage error or a monitor
/// server that could not be asked).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.defaultconfig {
        print!("{}", CloudCoreConfig::default_yaml());
        return ExitCode::SUCCESS;
    }
    if cli.minconfig {
        print!("{}", CloudCoreConfig::min_yaml());
        return ExitCode::SUCCESS;
    }
    let level = cli
        .log_level
        .clone()
        .or_else(|| cli.verbosity.map(klog_level))
        .unwrap_or_else(|| if cli.demo { "warn" } else { "info" }.into());
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(&level));
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("invalid --log-level {level:?}: {e}");
            return ExitCode::from(2);
        }
    };
    logging::init(filter, cli.logging_format);

    match cli.command {
        Some(Command::IptablesManager(args)) => return iptables_manager::run(args),
        Some(Command::Diagnose(args)) => return diagnose(args),
        None => {}
    }
    if cli.demo {
        return match actix_rt::System::new().block_on(demo::run(cli.demo_nodes)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo failed: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match CloudCoreConfig::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "invalid configuration {}: {}",
                cli.config.display(),
                causes(&e)
            );
            return ExitCode::FAILURE;
        }
    };
    match actix_rt::System::new().block_on(crate::app::run(config, crate::app::signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cloudcore failed: {}", causes(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and every cause under it, each said once: `cloudhub: listener 0.0.0.0:10000:
/// Address already in use (os error 98)`. A cause whose text its parent already shows (an
/// error that prints its source as well as returning it) is not repeated.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

/// The tracing filter for klog verbosity `v`.
fn klog_level(v: u8) -> String {
    const OURS: [&str; 12] = [
        "cloudcore_server",
        "beehive",
        "cloudhub",
        "cloudstream",
        "edgecontroller",
        "devicecontroller",
        "synccontroller",
        "dynamiccontroller",
        "kubeedge_api",
        "kubeedge_wire",
        "pki",
        "edge",
    ];
    match v {
        0..=2 => "info".into(),
        3 => std::iter::once("info".to_owned())
            .chain(OURS.iter().map(|c| format!("{c}=debug")))
            .collect::<Vec<_>>()
            .join(","),
        4 | 5 => "debug".into(),
        _ => "trace".into(),
    }
}
