//! Names as URL path segments. kube-core writes an object's name into the request path as it
//! is (`{collection}/{name}`), so a name holding `/`, `?`, `#` or `%` would address another
//! object or add query parameters. [`Request`] (kube-core's request builder) and [`Api`]
//! (kube's typed client) wrap the originals and percent-encode every name and namespace they
//! are given with [`segment`]; a name that is a dot segment (`.`, `..`) is refused.
//!
//! Names that passed [`crate::validation`] encode to themselves, so the wrappers change no
//! valid request; they are the second line for a name that reached a path unchecked.
//!
//! ```
//! use k8s_openapi::api::core::v1::Node;
//! use kube::api::GetParams;
//! use kubeedge_api::escaped::Request;
//! let nodes = Request::of::<Node>(None);
//! let r = nodes.get("victim?x=1", &GetParams::default()).unwrap();
//! assert_eq!(r.uri(), "/api/v1/nodes/victim%3Fx%3D1");
//! assert!(nodes.get("..", &GetParams::default()).is_err());
//! ```

use std::borrow::Cow;
use std::fmt::Debug;

use kube::Resource;
use kube::api::{DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::request::Error;
use kube::core::{ObjectList, PartialObjectMeta};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`) is encoded.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `name` as one path segment: percent-encoded unless it holds only unreserved characters
/// (then borrowed unchanged). Refuses an empty name and the dot segments `.` and `..`, which
/// a path normaliser would resolve against the collection.
pub fn segment(name: &str) -> Result<Cow<'_, str>, Error> {
    match name {
        "" => Err(Error::Validation("a non-empty name is required".into())),
        "." | ".." => Err(Error::Validation(format!(
            "{name:?} cannot be a name in a path"
        ))),
        _ => Ok(utf8_percent_encode(name, PATH_SEGMENT).into()),
    }
}

/// kube-core's [`kube::core::Request`] with every name percent-encoded ([`segment`]).
#[derive(Debug, Clone)]
pub struct Request {
    inner: kube::core::Request,
}

impl Request {
    /// Requests under `url_path` (a collection path built by the caller, e.g.
    /// `K::url_path`; it is used as given).
    pub fn new(url_path: impl Into<String>) -> Self {
        Request {
            inner: kube::core::Request::new(url_path),
        }
    }

    /// Requests for the collection of `K` in `namespace` (cluster-wide when `None`), the
    /// namespace encoded as one segment. A namespace that cannot be one yields requests that
    /// all fail with the reason.
    pub fn of<K: Resource<DynamicType = ()>>(namespace: Option<&str>) -> Self {
        match namespace.map(segment).transpose() {
            Ok(ns) => Request::new(K::url_path(&(), ns.as_deref())),
            // An empty path never reaches an object; every builder below checks it.
            Err(_) => Request::new(String::new()),
        }
    }

    fn path(&self) -> Result<(), Error> {
        if self.inner.url_path.is_empty() {
            return Err(Error::Validation(
                "the namespace cannot be a path segment".into(),
            ));
        }
        Ok(())
    }

    /// The underlying kube-core request (its collection path).
    pub fn inner(&self) -> &kube::core::Request {
        &self.inner
    }

    /// `GET` the collection.
    pub fn list(&self, lp: &ListParams) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.list(lp)
    }

    /// `GET ?watch` the collection.
    pub fn watch(&self, wp: &WatchParams, ver: &str) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.watch(wp, ver)
    }

    /// `POST` to the collection.
    pub fn create(&self, pp: &PostParams, data: Vec<u8>) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.create(pp, data)
    }

    /// `GET` one object.
    pub fn get(&self, name: &str, gp: &GetParams) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.get(&segment(name)?, gp)
    }

    /// `GET` one object's metadata.
    pub fn get_metadata(
        &self,
        name: &str,
        gp: &GetParams,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.get_metadata(&segment(name)?, gp)
    }

    /// `DELETE` one object.
    pub fn delete(&self, name: &str, dp: &DeleteParams) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.delete(&segment(name)?, dp)
    }

    /// `PATCH` one object.
    pub fn patch<P: Serialize>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.patch(&segment(name)?, pp, patch)
    }

    /// `PUT` one object.
    pub fn replace(
        &self,
        name: &str,
        pp: &PostParams,
        data: Vec<u8>,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner.replace(&segment(name)?, pp, data)
    }

    /// `GET` a subresource of one object.
    pub fn get_subresource(
        &self,
        subresource: &str,
        name: &str,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner
            .get_subresource(&segment(subresource)?, &segment(name)?)
    }

    /// `POST` to a subresource of one object.
    pub fn create_subresource(
        &self,
        subresource: &str,
        name: &str,
        pp: &PostParams,
        data: Vec<u8>,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner
            .create_subresource(&segment(subresource)?, &segment(name)?, pp, data)
    }

    /// `PATCH` a subresource of one object.
    pub fn patch_subresource<P: Serialize>(
        &self,
        subresource: &str,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner
            .patch_subresource(&segment(subresource)?, &segment(name)?, pp, patch)
    }

    /// `PUT` a subresource of one object.
    pub fn replace_subresource(
        &self,
        subresource: &str,
        name: &str,
        pp: &PostParams,
        data: Vec<u8>,
    ) -> Result<http::Request<Vec<u8>>, Error> {
        self.path()?;
        self.inner
            .replace_subresource(&segment(subresource)?, &segment(name)?, pp, data)
    }
}

/// kube's typed [`kube::Api`] for the calls that take a name, each name percent-encoded
/// ([`segment`]); [`Api::inner`] gives the original for calls without one (list, watch,
/// create).
#[derive(Clone)]
pub struct Api<K> {
    inner: kube::Api<K>,
}

impl<K> Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("escaped::Api").finish_non_exhaustive()
    }
}

fn build(e: Error) -> kube::Error {
    kube::Error::BuildRequest(e)
}

impl<K> Api<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    /// Cluster-scoped objects (or every namespace).
    pub fn all(client: kube::Client) -> Self {
        Api {
            inner: kube::Api::all(client),
        }
    }

    /// Objects in `namespace`, encoded as one segment (a namespace that cannot be one is
    /// refused).
    pub fn namespaced(client: kube::Client, namespace: &str) -> Result<Self, kube::Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Ok(Api {
            inner: kube::Api::namespaced(client, &segment(namespace).map_err(build)?),
        })
    }

    /// The wrapped client, for calls that take no name.
    pub fn inner(&self) -> &kube::Api<K> {
        &self.inner
    }

    /// [`kube::Api::get`].
    pub async fn get(&self, name: &str) -> Result<K, kube::Error> {
        self.inner.get(&segment(name).map_err(build)?).await
    }

    /// [`kube::Api::get_opt`].
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>, kube::Error> {
        self.inner.get_opt(&segment(name).map_err(build)?).await
    }

    /// [`kube::Api::get_metadata_opt`].
    pub async fn get_metadata_opt(
        &self,
        name: &str,
    ) -> Result<Option<PartialObjectMeta<K>>, kube::Error> {
        self.inner
            .get_metadata_opt(&segment(name).map_err(build)?)
            .await
    }

    /// [`kube::Api::patch`].
    pub async fn patch<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.inner
            .patch(&segment(name).map_err(build)?, pp, patch)
            .await
    }

    /// [`kube::Api::patch_status`].
    pub async fn patch_status<P: Serialize + Debug>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.inner
            .patch_status(&segment(name).map_err(build)?, pp, patch)
            .await
    }

    /// [`kube::Api::replace`].
    pub async fn replace(&self, name: &str, pp: &PostParams, data: &K) -> Result<K, kube::Error>
    where
        K: Serialize,
    {
        self.inner
            .replace(&segment(name).map_err(build)?, pp, data)
            .await
    }

    /// [`kube::Api::delete`]; `Ok` whether the object went at once or deletion started.
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<(), kube::Error> {
        self.inner
            .delete(&segment(name).map_err(build)?, dp)
            .await
            .map(drop)
    }

    /// [`kube::Api::list`] (no name to encode).
    pub async fn list(&self, lp: &ListParams) -> Result<ObjectList<K>, kube::Error> {
        self.inner.list(lp).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};

    #[test]
    fn valid_names_pass_unchanged_and_others_stay_one_segment() {
        assert!(matches!(
            segment("edge-1.example").unwrap(),
            Cow::Borrowed(_)
        ));
        assert_eq!(segment("victim?x=1").unwrap(), "victim%3Fx%3D1");
        assert_eq!(segment("a/b").unwrap(), "a%2Fb");
        assert_eq!(segment("a%2fb").unwrap(), "a%252fb");
        assert_eq!(segment("a#b").unwrap(), "a%23b");
        assert_eq!(segment("ü").unwrap(), "%C3%BC");
        for bad in ["", ".", ".."] {
            assert!(segment(bad).is_err(), "{bad:?}");
        }
        // Dots inside a name are ordinary characters.
        assert_eq!(segment("...").unwrap(), "...");
    }

    #[test]
    fn every_builder_encodes_the_name_and_the_namespace() {
        let nodes = Request::of::<Node>(None);
        let pp = PatchParams::default();
        let patch = Patch::Merge(serde_json::json!({}));
        let r = nodes
            .patch_subresource("status", "victim?", &pp, &patch)
            .unwrap();
        assert_eq!(r.uri().path(), "/api/v1/nodes/victim%3F/status");
        let r = nodes.delete("a/b", &DeleteParams::default()).unwrap();
        assert_eq!(r.uri().path(), "/api/v1/nodes/a%2Fb");
        let cms = Request::of::<ConfigMap>(Some("kube-system/../x"));
        let r = cms.get("c", &GetParams::default()).unwrap();
        assert_eq!(
            r.uri().path(),
            "/api/v1/namespaces/kube-system%2F..%2Fx/configmaps/c"
        );
        let broken = Request::of::<ConfigMap>(Some(".."));
        assert!(broken.list(&ListParams::default()).is_err());
        assert!(broken.get("c", &GetParams::default()).is_err());
    }
}
