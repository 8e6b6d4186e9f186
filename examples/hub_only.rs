//! Embedding: a cloudhub plus one application module of your own, no Kubernetes and no
//! controllers. Edge nodes bootstrap with the printed token and connect; the `app` module hears
//! about connections and answers every query an edge sends.
//!
//! `cargo run --example hub_only -- --dir /tmp/hub --ws-port 10000 --https-port 10002`
//! then point an edge (edgecore, or `edge::hub::HubClient`) at 127.0.0.1. Ctrl-C stops it.

use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, Context, Handler};
use beehive::{Bus, Content, Endpoint, Message, Module};
use clap::Parser;
use cloudhub::{CloudHub, CloudHubConfig, ListenerConfig, MemoryStore};
use kubeedge_api::names;

#[derive(Debug, Parser)]
struct Args {
    /// Where the CA, server certificate and token are kept (created on first start).
    #[arg(long, default_value = "/tmp/cloudcore-hub-only")]
    dir: PathBuf,
    /// WebSocket port edges connect to.
    #[arg(long, default_value_t = 10000)]
    ws_port: u16,
    /// Certificate server port edges bootstrap from.
    #[arg(long, default_value_t = 10002)]
    https_port: u16,
}

/// The application: it takes the place of the edgecontroller in group `edgecontroller`, so
/// cloudhub publishes edge traffic and connection events to it.
struct App {
    endpoint: Endpoint,
}

impl Actor for App {
    type Context = Context<Self>;
}

impl Handler<Message> for App {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Context<Self>) {
        println!(
            "app: {} {} from {}",
            msg.route.operation, msg.route.resource, msg.route.source
        );
        if msg.route.operation == beehive::constants::operation::QUERY {
            let answer = msg
                .response(Content::string(format!(
                    "hello from the cloud, you asked for {}",
                    msg.route.resource
                )))
                .with_route(
                    names::EDGECONTROLLER,
                    names::GROUP_RESOURCE,
                    msg.route.resource.clone(),
                    "response",
                );
            let endpoint = self.endpoint.clone();
            actix_rt::spawn(async move {
                if let Err(e) = endpoint.send(names::CLOUDHUB, answer).await {
                    eprintln!("app: answer not sent: {e}");
                }
            });
        }
    }
}

impl Module for App {
    fn name(&self) -> &str {
        "app"
    }
    fn group(&self) -> &str {
        names::EDGECONTROLLER
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt().with_env_filter("warn").init();
    actix_rt::System::new().block_on(async {
        let listener = |port| ListenerConfig {
            address: "127.0.0.1".into(),
            port,
            ..ListenerConfig::default()
        };
        let config = CloudHubConfig {
            advertise_address: vec!["127.0.0.1".into()],
            websocket: listener(args.ws_port),
            https: listener(args.https_port),
            tls_ca_file: args.dir.join("ca/rootCA.crt"),
            tls_ca_key_file: args.dir.join("ca/rootCA.key"),
            tls_cert_file: args.dir.join("certs/server.crt"),
            tls_private_key_file: args.dir.join("certs/server.key"),
            ..CloudHubConfig::default()
        };
        let bus = Bus::new();
        let hub = CloudHub::new(
            config,
            bus.endpoint(names::CLOUDHUB),
            None,
            Arc::new(MemoryStore::new()),
        )
        .await?;
        let handle = hub.handle();
        bus.register(hub)?;
        bus.register(App {
            endpoint: bus.endpoint("app"),
        })?;
        bus.start()?;
        let addrs = handle.start_servers()?;
        println!(
            "cloudhub: websocket {:?}, certificates {:?}",
            addrs.websocket, addrs.https
        );
        println!("token: {}", handle.token());
        bus.run_until_signal().await?;
        handle.shutdown().await;
        Ok(())
    })
}
