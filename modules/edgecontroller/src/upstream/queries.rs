//! Queries: configmap, secret, node (caches), persistentvolume(claim), volumeattachment,
//! certificatesigningrequest (API) and serviceaccounttoken (TokenRequest).
//!
//! A node may read only the ConfigMaps, Secrets and PVCs its pods use (what the Node
//! authorizer enforces for kubelets): anything else is answered `403 Forbidden`. Cache-backed
//! queries wait for their cache's first list, then fall back to a direct GET.

use beehive::Message;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, ServiceAccount};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Resource;
use kube::api::{GetParams, PostParams};
use kubeedge_api::NodeResource;
use kubeedge_api::client::Identity;
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::Cache;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Kind, Outcome, Upstream, api, body, content, parts};
use crate::authz::{NodeAuthorizer, Refusal};
use crate::reply;

type Found = Result<(Value, String), StatusError>;

fn found(v: Value) -> Found {
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok((v, rv))
}

fn encode<K: Serialize>(obj: &K) -> Found {
    serde_json::to_value(obj)
        .map_err(|e| StatusError::internal(e.to_string()))
        .and_then(found)
}

fn kind_for(resource_type: &str) -> Kind {
    match resource_type {
        "configmap" => Kind::QueryConfigMap,
        "secret" => Kind::QuerySecret,
        "persistentvolume" => Kind::QueryPersistentVolume,
        "persistentvolumeclaim" => Kind::QueryPersistentVolumeClaim,
        "volumeattachment" => Kind::QueryVolumeAttachment,
        "node" => Kind::QueryNode,
        _ => Kind::CertificateSigningRequest,
    }
}

impl Upstream {
    /// Answers a `query` with the object (header RV = its RV) or a raw `{"ErrStatus"}`.
    pub(crate) async fn query(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::QueryConfigMap, msg, e).await,
        };
        self.answer_raw(msg, &r, async {
            let ns = Some(r.namespace.as_str());
            let node = Identity::Node(&r.node);
            match kind_for(&r.resource_type) {
                Kind::QueryConfigMap => self.cached(&self.configmaps, &r, node).await,
                Kind::QuerySecret => self.cached(&self.secrets, &r, node).await,
                Kind::QueryNode => match self.nodes.get(&r.name) {
                    // The cache holds edge nodes only: a miss is not a NotFound.
                    Some(n) => encode(&*n),
                    None => self.get::<Node>(None, &r.name, node).await,
                },
                Kind::QueryPersistentVolume => {
                    let found = self.get::<PersistentVolume>(None, &r.name, node).await?;
                    self.allowed(Kind::QueryPersistentVolume, msg, &found, |a, n, v| {
                        a.persistent_volume(n, v)
                    })
                    .await?;
                    Ok(found)
                }
                Kind::QueryPersistentVolumeClaim => {
                    self.get::<PersistentVolumeClaim>(ns, &r.name, node).await
                }
                Kind::QueryVolumeAttachment => {
                    let found = self.get::<VolumeAttachment>(None, &r.name, node).await?;
                    self.allowed(Kind::QueryVolumeAttachment, msg, &found, |a, n, v| {
                        a.volume_attachment(n, v)
                    })
                    .await?;
                    Ok(found)
                }
                _ => {
                    let found = self
                        .get::<CertificateSigningRequest>(None, &r.name, Identity::Cloudcore)
                        .await?;
                    self.allowed(Kind::CertificateSigningRequest, msg, &found, |a, n, v| {
                        a.certificate_request(n, v)
                    })
                    .await?;
                    Ok(found)
                }
            }
        })
        .await
    }

    /// `serviceaccounttoken`/`query`: the content is a TokenRequest; POSTed to the service
    /// account's `token` subresource as the node. Answered with the TokenRequest (no RV).
    pub(crate) async fn service_account_token(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::ServiceAccountToken, msg, e).await,
        };
        self.answer_raw(msg, &r, async {
            let tr: TokenRequest = content(msg, "a TokenRequest")?;
            let request = api::<ServiceAccount>(Some(&r.namespace)).create_subresource(
                "token",
                &r.name,
                &PostParams::default(),
                body(&tr)?,
            );
            let token: TokenRequest = self.kube.request(Identity::Node(&r.node), request).await?;
            Ok((token, String::new()))
        })
        .await
    }

    /// Answers the raw object the body finds (header RV as found) or a raw `{"ErrStatus"}`,
    /// both at the request's resource rebuilt from `r`.
    async fn answer_raw<T: Serialize>(
        &self,
        msg: &Message,
        r: &NodeResource,
        body: impl Future<Output = Result<(T, String), StatusError>>,
    ) -> Outcome {
        let resource = r.build().unwrap_or_else(|_| msg.route.resource.to_string());
        match body.await {
            Ok((object, rv)) => {
                self.send(reply::object(msg, resource, &object, &rv), Outcome::Ok)
                    .await
            }
            Err(e) => {
                self.send(reply::raw_error(msg, resource, &e), Outcome::Failed)
                    .await
            }
        }
    }

    async fn get<K>(&self, ns: Option<&str>, name: &str, who: Identity<'_>) -> Found
    where
        K: Resource<DynamicType = ()>,
    {
        let request = api::<K>(ns).get(name, &GetParams::default());
        self.kube
            .request::<Value>(who, request)
            .await
            .and_then(found)
    }

    /// From the cache once it has listed (waiting at most `cache_wait` for that); a miss, or a
    /// cache that has not listed yet, is asked of the API (a watch may lag behind a fresh
    /// object). NotFound names the singular type, as Go's lister error does.
    async fn cached<K>(&self, cache: &Cache<K>, r: &NodeResource, who: Identity<'_>) -> Found
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        if cache.wait_ready_for(self.settings.cache_wait).await
            && let Some(obj) = cache.get_by(Some(&r.namespace), &r.name)
        {
            return encode(&*obj);
        }
        match self.get::<K>(Some(&r.namespace), &r.name, who).await {
            Err(e) if e.code() == 404 => Err(StatusError::not_found(&r.resource_type, &r.name)),
            other => other,
        }
    }

    /// The node authorizer's decision on an object fetched for `msg`; a refusal is logged
    /// and counted like any other, and the object is not returned.
    async fn allowed(
        &self,
        kind: Kind,
        msg: &Message,
        found: &(Value, String),
        rule: impl Fn(&NodeAuthorizer, &str, &Value) -> Result<(), Refusal>,
    ) -> Result<(), StatusError> {
        let node = kubeedge_api::node_of(&msg.route.resource).unwrap_or_default();
        match rule(&self.authz, node, &found.0) {
            Ok(()) => Ok(()),
            Err(refusal) => {
                let status = refusal.status(node);
                self.refused(kind, msg, &refusal);
                Err(status)
            }
        }
    }
}
