//! The first message about an object: with the record cache another module's watch keeps
//! (`HubOptions::records`), it is written at once and its record created beside the write;
//! without it (or before the cache has listed) the record is read from the store first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;
use cloudhub::{Created, MemoryStore, ObjectSyncStore, StoreError, SyncKey, SyncSpec};
use futures::future::BoxFuture;
use kube::runtime::watcher::Event;
use kubeedge_api::reliablesyncs::{
    ObjectSync, ObjectSyncSpec, ObjectSyncStatus, RecordCacheWriter, record_cache,
};

/// A store whose reads never answer (an API server that does not respond to GETs); writes go
/// to memory.
#[derive(Debug, Clone, Default)]
struct StalledReads {
    memory: MemoryStore,
    reads: Arc<AtomicUsize>,
}

impl ObjectSyncStore for StalledReads {
    fn get(&self, _key: &SyncKey) -> BoxFuture<'static, Result<Option<String>, StoreError>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Box::pin(futures::future::pending())
    }
    fn create(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
    ) -> BoxFuture<'static, Result<Created, StoreError>> {
        self.memory.create(key, spec)
    }
    fn set_acked(
        &self,
        key: &SyncKey,
        spec: &SyncSpec,
        rv: &str,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        self.memory.set_acked(key, spec, rv)
    }
    fn delete(&self, key: &SyncKey) -> BoxFuture<'static, Result<(), StoreError>> {
        self.memory.delete(key)
    }
}

fn key(uid: &str) -> SyncKey {
    SyncKey {
        node: "edge-1".into(),
        namespace: "default".into(),
        uid: uid.into(),
    }
}

/// Lists the cache's two watches: `records` (name, status rv) in namespace `default`.
fn list(w: &mut RecordCacheWriter, records: &[(&str, &str)]) {
    w.namespaced.apply(Event::Init);
    for (name, rv) in records {
        let mut os = ObjectSync::new(name, ObjectSyncSpec::default());
        os.metadata.namespace = Some("default".into());
        os.metadata.resource_version = Some("1".into());
        os.status = Some(ObjectSyncStatus {
            object_resource_version: (*rv).into(),
        });
        w.namespaced.apply(Event::InitApply(os));
    }
    w.namespaced.apply(Event::InitDone);
    w.cluster.apply(Event::Init);
    w.cluster.apply(Event::InitDone);
}

#[actix_rt::test]
async fn with_the_record_cache_the_first_message_is_written_without_asking_the_store() {
    let (mut writer, cache) = record_cache();
    list(&mut writer, &[("edge-1.uid-acked", "30")]);
    let store = StalledReads::default();
    let h = Harness::with_store(
        Arc::new(store.clone()),
        cloudhub::HubOptions {
            records: Some(cache),
            ..Default::default()
        },
    )
    .await;
    let mut edge = h.connect("edge-1").await;
    h.wait_nodes(1).await;

    h.downstream(pod("edge-1", "web", "uid-new", "17", "insert"))
        .await;
    let m = edge
        .recv_within(Duration::from_secs(5))
        .await
        .expect("written without waiting for the store");
    assert_eq!(m.route.resource, "default/pod/web");
    // Its record is created beside the write, at "0", and the acknowledgement recorded after.
    wait_until(|| store.memory.record(&key("uid-new")).is_some()).await;
    edge.ack(&m).await;
    wait_until(|| store.memory.record(&key("uid-new")).map(|r| r.1).as_deref() == Some("17")).await;

    // A version the cached record shows acknowledged already is not written; a newer one is.
    h.downstream(pod("edge-1", "old", "uid-acked", "25", "update"))
        .await;
    h.downstream(pod("edge-1", "old", "uid-acked", "31", "update"))
        .await;
    let m = edge
        .recv_within(Duration::from_secs(5))
        .await
        .expect("rv 31");
    assert_eq!(m.header.resource_version, "31");
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        0,
        "the store was never read"
    );
    assert_eq!(
        store.memory.record(&key("uid-acked")),
        None,
        "a record that exists is not created again"
    );
}

#[actix_rt::test]
async fn before_the_record_cache_has_listed_the_record_is_read_first() {
    let (_writer, cache) = record_cache();
    let store = StalledReads::default();
    let h = Harness::with_store(
        Arc::new(store.clone()),
        cloudhub::HubOptions {
            records: Some(cache),
            ..Default::default()
        },
    )
    .await;
    let mut edge = h.connect("edge-1").await;
    h.wait_nodes(1).await;
    h.downstream(pod("edge-1", "web", "uid-new", "17", "insert"))
        .await;
    // The read never answers, so nothing is written.
    assert!(
        edge.recv_within(Duration::from_millis(500)).await.is_none(),
        "written before its record was read"
    );
    assert_eq!(store.reads.load(Ordering::SeqCst), 1);
}
