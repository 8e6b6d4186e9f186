//! Two modules on a beehive bus: a controller pushes pod updates to a hub, which acknowledges
//! each one; the controller also asks the hub a question and waits for the answer.
//!
//! `cargo run --example two_modules`

use std::time::Duration;

use actix::{Actor, Context, Handler};
use beehive::constants::operation;
use beehive::{Bus, Content, Endpoint, Message, Module};

/// Stands in for cloudhub: counts updates and answers sync requests.
struct Hub {
    endpoint: Endpoint,
    updates: usize,
}

impl Actor for Hub {
    type Context = Context<Self>;
}

impl Handler<Message> for Hub {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Context<Self>) {
        if msg.header.sync {
            let answer = format!("{} updates so far", self.updates);
            self.endpoint
                .send_resp(msg.response(Content::string(answer)));
        } else {
            self.updates += 1;
            println!(
                "hub: {} {} (rv {})",
                msg.route.operation, msg.route.resource, msg.header.resource_version
            );
        }
    }
}

impl Module for Hub {
    fn name(&self) -> &str {
        "hub"
    }
    fn group(&self) -> &str {
        "hub"
    }
    fn shutdown(&mut self, _ctx: &mut Context<Self>) {
        println!("hub: shutting down after {} updates", self.updates);
    }
}

fn main() -> anyhow::Result<()> {
    actix_rt::System::new().block_on(async {
        let bus = Bus::new();
        bus.register(Hub {
            endpoint: bus.endpoint("hub"),
            updates: 0,
        })?;
        bus.start()?;

        let controller = bus.endpoint("controller");
        for rv in 1..=3 {
            let update = Message::new()
                .with_route(
                    "controller",
                    "resource",
                    "node/edge-1/default/pod/web",
                    operation::UPDATE,
                )
                .with_resource_version(rv.to_string())
                .with_content(Content::json(
                    &serde_json::json!({"metadata": {"name": "web"}}),
                )?);
            controller.send("hub", update).await?;
        }
        let question =
            Message::new().with_route("controller", "resource", "hub/status", operation::QUERY);
        let answer = controller
            .send_sync("hub", question, Duration::from_secs(1))
            .await?;
        println!(
            "controller: hub says {:?}",
            answer.content.as_string().unwrap_or_default()
        );

        bus.shutdown().await;
        for m in bus.stats().modules {
            println!(
                "stats: {} sent={} received={} depth={}",
                m.name, m.sent, m.received, m.depth
            );
        }
        Ok(())
    })
}
