//! Queries: configmap, secret, node (caches), persistentvolume(claim), volumeattachment,
//! certificatesigningrequest (API) and serviceaccounttoken (TokenRequest).
//!
//! A node may read only the ConfigMaps, Secrets and PVCs its pods use (what the Node
//! authorizer enforces for kubelets): anything else is answered `403 Forbidden`, the same for
//! a name that does not exist. Cache-backed queries wait for their cache's first list, then
//! fall back to a direct GET.

use beehive::Message;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Secret, ServiceAccount,
};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Resource;
use kube::api::{GetParams, PostParams};
use kubeedge_api::NodeResource;
use kubeedge_api::authz::Authorized;
use kubeedge_api::status::StatusError;
use kubeedge_api::watch::Cache;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Kind, Outcome, Upstream, api, body, content, parts};
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
    /// Answers a `query` with the object (header RV = its RV) or a raw `{"ErrStatus"}`. The
    /// GET is decided by the policy first; ConfigMaps, Secrets and Nodes are then answered
    /// from the cache under the name the decision was taken on.
    pub(crate) async fn query(&self, msg: &Message) -> Outcome {
        let r = match parts(msg, true, true) {
            Ok(r) => r,
            Err(e) => return self.fail(Kind::QueryConfigMap, msg, e).await,
        };
        self.answer_raw(msg, &r, async {
            let ns = Some(r.namespace.as_str());
            let kind = kind_for(&r.resource_type);
            let get = |request| self.authorized(kind, msg, &r.node, request);
            match kind {
                Kind::QueryConfigMap => {
                    let a = get(api::<ConfigMap>(ns).get(&r.name, &GetParams::default())).await?;
                    self.cached(&self.configmaps, &r.resource_type, a).await
                }
                Kind::QuerySecret => {
                    let a = get(api::<Secret>(ns).get(&r.name, &GetParams::default())).await?;
                    self.cached(&self.secrets, &r.resource_type, a).await
                }
                Kind::QueryNode => {
                    let a = get(api::<Node>(None).get(&r.name, &GetParams::default())).await?;
                    match self.nodes.get(&a.info().name) {
                        // The cache holds edge nodes only: a miss is not a NotFound.
                        Some(n) => encode(&*n),
                        None => self.sent(a).await,
                    }
                }
                Kind::QueryPersistentVolume => {
                    self.sent(
                        get(api::<PersistentVolume>(None).get(&r.name, &GetParams::default()))
                            .await?,
                    )
                    .await
                }
                Kind::QueryPersistentVolumeClaim => {
                    self.sent(
                        get(api::<PersistentVolumeClaim>(ns).get(&r.name, &GetParams::default()))
                            .await?,
                    )
                    .await
                }
                Kind::QueryVolumeAttachment => {
                    self.sent(
                        get(api::<VolumeAttachment>(None).get(&r.name, &GetParams::default()))
                            .await?,
                    )
                    .await
                }
                _ => {
                    let csr = api::<CertificateSigningRequest>(None);
                    self.sent(get(csr.get(&r.name, &GetParams::default())).await?)
                        .await
                }
            }
        })
        .await
    }

    /// `serviceaccounttoken`/`query`: the content is a TokenRequest; POSTed to the service
    /// account's `token` subresource as the node once the policy found it bound to a pod of
    /// the node that runs as that account. Answered with the TokenRequest (no RV).
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
            let token: TokenRequest = self
                .call(Kind::ServiceAccountToken, msg, &r.node, request)
                .await?;
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

    /// Sends an authorized GET; the object found.
    async fn sent(&self, request: Authorized) -> Found {
        self.kube.send::<Value>(request).await.and_then(found)
    }

    /// The object `request` was allowed to read, from the cache once it has listed (waiting
    /// at most `cache_wait` for that); a miss, or a cache that has not listed yet, is sent to
    /// the API (a watch may lag behind a fresh object). NotFound names the singular type, as
    /// Go's lister error does.
    async fn cached<K>(&self, cache: &Cache<K>, singular: &str, request: Authorized) -> Found
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let (ns, name) = (
            request.info().namespace.clone(),
            request.info().name.clone(),
        );
        if cache.wait_ready_for(self.settings.cache_wait).await
            && let Some(obj) = cache.get_by(Some(&ns), &name)
        {
            return encode(&*obj);
        }
        match self.sent(request).await {
            Err(e) if e.code() == 404 => Err(StatusError::not_found(singular, &name)),
            other => other,
        }
    }
}
