//! Devices and models → edge nodes (docs/controllers.md#devicecontroller): model edits pushed,
//! DeviceStatus creation retried, start-up ordered by cache barriers.
//!
//! One task owns the three watches. DeviceModels and DeviceStatuses are listed first; Devices
//! are watched only once both have (a cache barrier instead of Go's sleeps), so a device's
//! model and status are known when the device is first handled. Without permission to list
//! DeviceStatuses (KubeEdge's own ClusterRole has none) the controller says so once and works
//! without them: Devices and models still reach their nodes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use beehive::Backoff;
use beehive::constants::operation;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use kubeedge_api::devices::{Device, DeviceModel, DeviceStatus};
use kubeedge_api::lifecycle::CancellationToken;
use kubeedge_api::watch::{self, CacheWriter, Change, key, key_of};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::shared::{Shared, member, membership, object_message};

/// Back-off of a device whose DeviceStatus could not be made (KubeEdge never sends it).
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

pub(crate) struct Downstream {
    client: kube::Client,
    shared: Arc<Shared>,
    devices: CacheWriter<Device>,
    models: CacheWriter<DeviceModel>,
    statuses: CacheWriter<DeviceStatus>,
    /// Devices waiting for their DeviceStatus: when to try again, and how many tries failed.
    retries: HashMap<String, (Instant, u32)>,
    watch_timeout: Option<Duration>,
}

type Events<K> = BoxStream<'static, Event<K>>;

async fn next<K>(s: &mut Option<Events<K>>) -> Option<Event<K>> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

fn node_of(d: &Device) -> &str {
    &d.spec.node_name
}

fn model_of(d: &Device) -> Option<&str> {
    d.spec
        .device_model_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty())
}

impl Downstream {
    pub(crate) fn new(
        client: kube::Client,
        shared: Arc<Shared>,
        devices: CacheWriter<Device>,
        models: CacheWriter<DeviceModel>,
        statuses: CacheWriter<DeviceStatus>,
        watch_timeout: Option<Duration>,
    ) -> Self {
        Downstream {
            client,
            shared,
            devices,
            models,
            statuses,
            retries: HashMap::new(),
            watch_timeout,
        }
    }

    fn config(&self) -> watcher::Config {
        let mut c = watcher::Config::default();
        if let Some(t) = self.watch_timeout {
            c = c.timeout(t.as_secs().clamp(1, u64::from(u32::MAX)) as u32);
        }
        c
    }

    pub(crate) async fn run(mut self, stop: CancellationToken) {
        let mut models: Option<Events<DeviceModel>> =
            Some(watch::events(Api::all(self.client.clone()), self.config()).boxed());
        let mut statuses: Option<Events<DeviceStatus>> = if self.may_list_statuses().await {
            Some(watch::events(Api::all(self.client.clone()), self.config()).boxed())
        } else {
            self.shared
                .statuses_permitted
                .store(false, std::sync::atomic::Ordering::Relaxed);
            self.statuses.mark_ready();
            None
        };
        let mut devices: Option<Events<Device>> = None;
        loop {
            let due = self.retries.values().map(|(at, _)| *at).min();
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(e) = next(&mut models) => self.on_model_event(e).await,
                Some(e) = next(&mut statuses) => { self.statuses.apply(e); }
                Some(e) = next(&mut devices) => self.on_device_event(e).await,
                _ = sleep_until(due) => self.retry_due().await,
            }
            if devices.is_none()
                && self.models.reader().is_ready()
                && self.statuses.reader().is_ready()
            {
                info!(
                    models = self.models.reader().len(),
                    "device models and statuses listed, watching devices"
                );
                devices = Some(watch::events(Api::all(self.client.clone()), self.config()).boxed());
            }
        }
        info!("device downstream stopped");
    }

    /// False only when the API server forbids listing DeviceStatuses; any other failure is
    /// left to the watch, which retries.
    async fn may_list_statuses(&self) -> bool {
        let api = Api::<DeviceStatus>::all(self.client.clone());
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Err(kube::Error::Api(s)) if s.code == 403 => {
                warn!(
                    reason = %s.message,
                    "cannot list devicestatuses.devices.kubeedge.io: devices are sent without DeviceStatus; grant get, list, watch, create and patch on devicestatuses to enable device status"
                );
                false
            }
            _ => true,
        }
    }

    async fn on_device_event(&mut self, event: Event<Device>) {
        for change in self.devices.apply(event) {
            match change {
                Change::Added(d) => self.added(&d).await,
                Change::Modified { old, new } => {
                    if old.spec == new.spec {
                        continue; // labels, annotations, status: nothing for the edge
                    }
                    if node_of(&old) != node_of(&new) {
                        self.deleted(&old).await;
                        self.added(&new).await;
                    } else if !node_of(&new).is_empty() {
                        self.send_model(&new, operation::UPDATE).await;
                        self.send_device(&new, operation::UPDATE).await;
                    }
                }
                Change::Deleted(d) => {
                    self.retries.remove(&key_of(&*d));
                    self.shared.forget(&key_of(&*d));
                    self.deleted(&d).await;
                }
            }
        }
    }

    /// Another cached device (not `d`) on the same node and namespace uses the same model.
    fn model_shared(&self, d: &Device) -> bool {
        let (this, ns, node, model) = (key_of(d), d.namespace(), node_of(d), model_of(d));
        self.devices
            .reader()
            .filter(|o| {
                key_of(o) != this
                    && o.namespace() == ns
                    && !node_of(o).is_empty()
                    && node_of(o) == node
                    && model_of(o) == model
            })
            .into_iter()
            .next()
            .is_some()
    }

    async fn added(&mut self, d: &Device) {
        let k = key_of(d);
        let status = match self.shared.statuses_permitted() {
            true => self.shared.ensure_status(d).await.map(drop),
            false => Ok(()),
        };
        if let Err(error) = status {
            // Nothing is sent until the DeviceStatus exists; retried with back-off.
            let failures = self.retries.get(&k).map_or(1, |(_, n)| n.saturating_add(1));
            let backoff = RETRY.delay(failures);
            warn!(device = %k, %error, retry_in_s = backoff.as_secs(), "cannot ensure DeviceStatus");
            self.retries.insert(k, (Instant::now() + backoff, failures));
            return;
        }
        self.retries.remove(&k);
        let node = node_of(d);
        if node.is_empty() {
            return;
        }
        self.shared
            .send(membership(node, Some(vec![member(d)]), None))
            .await;
        if !self.model_shared(d) {
            self.send_model(d, operation::INSERT).await;
        }
        self.send_device(d, operation::INSERT).await;
    }

    async fn deleted(&mut self, d: &Device) {
        let node = node_of(d);
        if node.is_empty() {
            return;
        }
        self.shared
            .send(membership(node, None, Some(vec![member(d)])))
            .await;
        if !self.model_shared(d) {
            self.send_model(d, operation::DELETE).await;
        }
        self.send_device(d, operation::DELETE).await;
    }

    async fn retry_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .retries
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            match self.devices.reader().get(&k) {
                Some(d) => self.added(&d).await,
                None => {
                    self.retries.remove(&k);
                }
            }
        }
    }

    async fn send_device(&self, d: &Device, op: &str) {
        if let Some(m) = object_message(node_of(d), "device", d, op) {
            self.shared.send(m).await;
        }
    }

    async fn send_model(&mut self, d: &Device, op: &str) {
        let Some(name) = model_of(d) else { return };
        let ns = d.namespace();
        let mut model = self.models.reader().get(&key(ns.as_deref(), name));
        if model.is_none() && op == operation::INSERT {
            // The model's watch event may not have arrived yet (two watches, no common order):
            // read it, so the edge gets the model before the device; cached, so its watch
            // event sends nothing twice.
            let api: Api<DeviceModel> = match ns.as_deref() {
                Some(ns) => Api::namespaced(self.client.clone(), ns),
                None => Api::all(self.client.clone()),
            };
            if let Ok(Some(fetched)) = api.get_opt(name).await {
                self.models.upsert(fetched);
                model = self.models.reader().get(&key(ns.as_deref(), name));
            }
        }
        match model {
            Some(model) => {
                if let Some(m) = object_message(node_of(d), "devicemodel", &*model, op) {
                    self.shared.send(m).await;
                }
            }
            // Sent when the model appears.
            None => debug!(device = %key_of(d), model = name, "model not known yet"),
        }
    }

    /// Model edits reach every node with a device using the model (KubeEdge never pushes them); a
    /// model created after its devices reaches them too.
    async fn on_model_event(&mut self, event: Event<DeviceModel>) {
        for change in self.models.apply(event) {
            let (model, op) = match &change {
                Change::Added(m) => (m.clone(), operation::INSERT),
                Change::Modified { old, new } if old.spec != new.spec => {
                    (new.clone(), operation::UPDATE)
                }
                _ => continue,
            };
            let (ns, name) = (model.namespace(), model.name_any());
            let mut nodes: Vec<String> = self
                .devices
                .reader()
                .filter(|d| {
                    d.namespace() == ns
                        && model_of(d) == Some(name.as_str())
                        && !node_of(d).is_empty()
                })
                .iter()
                .map(|d| node_of(d).to_owned())
                .collect();
            nodes.sort();
            nodes.dedup();
            for node in nodes {
                if let Some(m) = object_message(&node, "devicemodel", &*model, op) {
                    self.shared.send(m).await;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
