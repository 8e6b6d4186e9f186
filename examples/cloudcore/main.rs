//! The cloudcore binary: cloudhub, the edge, device and sync controllers and cloudstream,
//! configured by a KubeEdge CloudCore YAML file.
//!
//! ```text
//! cargo run --example cloudcore -- --demo                      # whole system, no cluster needed
//! cargo run --example cloudcore -- --defaultconfig > cloudcore.yaml
//! cargo run --example cloudcore -- --config cloudcore.yaml     # against a real cluster
//! ```

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use cloudcore::config::CloudCoreConfig;
use tracing_subscriber::EnvFilter;

/// KubeEdge cloudcore in Rust.
#[derive(Debug, Parser)]
#[command(name = "cloudcore", version)]
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
    /// Run the embedded demo: cloudcore plus simulated edge nodes in one process, no cluster.
    #[arg(long)]
    demo: bool,
    /// Simulated edge nodes in the demo.
    #[arg(long, default_value_t = 3)]
    demo_nodes: usize,
}

fn main() -> ExitCode {
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
        .unwrap_or_else(|| if cli.demo { "warn" } else { "info" }.into());
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(&level));
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("invalid --log-level {level:?}: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();

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
            eprintln!("invalid configuration {}: {e}", cli.config.display());
            return ExitCode::FAILURE;
        }
    };
    match actix_rt::System::new().block_on(cloudcore::app::run(config, cloudcore::app::signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cloudcore failed: {e}");
            ExitCode::FAILURE
        }
    }
}
