//! What edgecore stored: its metaManager table `meta` (key `<namespace>/<type>/<name>`, the
//! trimmed resource of the downstream message; value the object's JSON), read from its sqlite
//! database with the `sqlite3` command, read-only, while edgecore runs.
//!
//! Its metaServer (127.0.0.1:10550) serves the same objects, but it first asks the cloud's
//! dynamiccontroller (disabled in KubeEdge by default, absent here) and answers from the local
//! store only after a 10 s timeout, so tests poll the database instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::error::{Error, Result};

/// One stored object.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// `<namespace>/<type>/<name>` (`null` namespace for cluster objects).
    pub key: String,
    /// The resource type (`pod`, `configmap`, `secret`, `node`, …).
    pub kind: String,
    /// The object as stored.
    pub value: Value,
}

impl Stored {
    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.value["metadata"]["resourceVersion"].as_str()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.value["metadata"]["uid"].as_str()
    }
}

/// edgecore's database, read on each call (no connection is held, so edgecore never waits on
/// us for longer than one query).
#[derive(Debug, Clone)]
pub struct EdgeStore {
    db: PathBuf,
}

impl EdgeStore {
    /// The store in `db` (`database.dataSource`).
    pub fn new(db: &Path) -> EdgeStore {
        EdgeStore {
            db: db.to_path_buf(),
        }
    }

    fn query(&self, sql: &str) -> Result<Vec<Value>> {
        if !self.db.is_file() {
            return Ok(Vec::new());
        }
        let out = Command::new("sqlite3")
            .arg("-readonly")
            // edgecore writes concurrently: wait out its locks instead of failing.
            .arg("-cmd")
            .arg(".timeout 5000")
            .arg("-json")
            .arg(&self.db)
            .arg(sql)
            .output()
            .map_err(|e| {
                Error::Store(format!("sqlite3 is missing (apt-get install sqlite3): {e}"))
            })?;
        if !out.status.success() {
            return Err(Error::Store(format!(
                "sqlite3 {}: {}",
                self.db.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        // No rows print nothing at all.
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| Error::Store(format!("sqlite3 output is not JSON: {e}")))
    }

    /// Every row of `meta`, by key.
    pub fn all(&self) -> Result<BTreeMap<String, Stored>> {
        let rows = self.query("SELECT key, type, value FROM meta ORDER BY key")?;
        rows.into_iter()
            .map(|row| {
                let key = row["key"].as_str().unwrap_or_default().to_owned();
                let kind = row["type"].as_str().unwrap_or_default().to_owned();
                let text = row["value"].as_str().unwrap_or_default();
                let value = serde_json::from_str(text)
                    .map_err(|e| Error::Store(format!("{key}: value is not JSON: {e}")))?;
                Ok((key.clone(), Stored { key, kind, value }))
            })
            .collect()
    }

    /// The objects stored under `<namespace>/`.
    pub fn namespace(&self, namespace: &str) -> Result<BTreeMap<String, Stored>> {
        let prefix = format!("{namespace}/");
        Ok(self
            .all()?
            .into_iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect())
    }

    /// The object stored under `key` (`<namespace>/<type>/<name>`).
    pub fn get(&self, key: &str) -> Result<Option<Stored>> {
        Ok(self.all()?.remove(key))
    }
}

/// The store key of a namespaced object.
pub fn key(namespace: &str, kind: &str, name: &str) -> String {
    format!("{namespace}/{kind}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_sqlite_holds_and_nothing_when_the_file_is_absent() {
        test_tiers::require!(Edgecore);
        let dir = std::env::temp_dir().join(format!("edgecore-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("edge.db");
        let store = EdgeStore::new(&db);
        assert!(store.all().unwrap().is_empty());
        let status = Command::new("sqlite3")
            .arg(&db)
            .arg(
                "CREATE TABLE `meta` (`key` text,`type` text,`value` text,PRIMARY KEY (`key`));\
                 INSERT INTO meta VALUES ('ns/configmap/a','configmap','{\"metadata\":{\"resourceVersion\":\"7\",\"uid\":\"u\"}}');",
            )
            .status()
            .unwrap();
        assert!(status.success());
        let got = store.get(&key("ns", "configmap", "a")).unwrap().unwrap();
        assert_eq!(got.kind, "configmap");
        assert_eq!(got.resource_version(), Some("7"));
        assert_eq!(got.uid(), Some("u"));
        assert_eq!(store.namespace("ns").unwrap().len(), 1);
        assert!(store.namespace("other").unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
