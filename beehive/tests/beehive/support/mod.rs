//! Test modules shared by the bus tests.
#![allow(dead_code, unreachable_pub)]

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use actix::{Actor, Context, Handler};
use beehive::{Content, Endpoint, Message, Module};

/// What a [`Probe`] does with each message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Only record.
    Record,
    /// Record, and answer sync requests with `send_resp` from its own endpoint.
    Answer,
    /// Panic when the content is the string "panic".
    PanicOnRequest,
}

/// An actor module that records what it receives (in order) and what hooks ran.
pub struct Probe {
    pub name: String,
    pub group: String,
    pub enabled: bool,
    pub capacity: usize,
    pub behaviour: Behaviour,
    pub endpoint: Option<Endpoint>,
    pub seen: Arc<Mutex<Vec<Message>>>,
    pub log: Rc<RefCell<Vec<String>>>,
}

impl Probe {
    pub fn new(name: &str, group: &str) -> Self {
        Probe {
            name: name.into(),
            group: group.into(),
            enabled: true,
            capacity: beehive::DEFAULT_MAILBOX_CAPACITY,
            behaviour: Behaviour::Record,
            endpoint: None,
            seen: Arc::default(),
            log: Rc::default(),
        }
    }

    pub fn answering(mut self, endpoint: Endpoint) -> Self {
        self.behaviour = Behaviour::Answer;
        self.endpoint = Some(endpoint);
        self
    }

    pub fn with_log(mut self, log: Rc<RefCell<Vec<String>>>) -> Self {
        self.log = log;
        self
    }

    pub fn with_seen(mut self, seen: Arc<Mutex<Vec<Message>>>) -> Self {
        self.seen = seen;
        self
    }
}

impl Actor for Probe {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        self.log.borrow_mut().push(format!("start {}", self.name));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.log.borrow_mut().push(format!("stopped {}", self.name));
    }
}

impl Handler<Message> for Probe {
    type Result = ();

    fn handle(&mut self, msg: Message, _ctx: &mut Self::Context) {
        if self.behaviour == Behaviour::PanicOnRequest
            && msg.content.as_string().as_deref() == Some("panic")
        {
            panic!("probe {} asked to panic", self.name);
        }
        if self.behaviour == Behaviour::Answer
            && msg.header.sync
            && let Some(ep) = &self.endpoint
        {
            ep.send_resp(msg.response(Content::string(&self.name)));
        }
        self.seen.lock().unwrap().push(msg);
    }
}

impl Module for Probe {
    fn name(&self) -> &str {
        &self.name
    }
    fn group(&self) -> &str {
        &self.group
    }
    fn enabled(&self) -> bool {
        self.enabled
    }
    fn mailbox_capacity(&self) -> usize {
        self.capacity
    }
    fn shutdown(&mut self, _ctx: &mut Self::Context) {
        self.log
            .borrow_mut()
            .push(format!("shutdown {}", self.name));
    }
}

/// A message whose content names its sender and sequence number.
/// Makes a [`Behaviour::PanicOnRequest`] probe named `module` panic.
#[allow(dead_code)] // not every test binary kills a module
pub async fn make_panic(ep: &Endpoint, module: &str) {
    let msg = Message::new().with_content(Content::string("panic"));
    ep.send(module, msg)
        .await
        .expect("the panic request is queued");
}

pub fn numbered(sender: usize, seq: usize) -> Message {
    Message::new().with_content(Content::string(format!("{sender}:{seq}")))
}

/// Parses what [`numbered`] wrote.
pub fn number_of(msg: &Message) -> (usize, usize) {
    let s = msg.content.as_string().expect("numbered content");
    let (a, b) = s.split_once(':').expect("sender:seq");
    (a.parse().unwrap(), b.parse().unwrap())
}

/// Yields to the actix system until `cond` holds (bounded: 5 s).
pub async fn until(mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "condition not reached in 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}
