//! The table of child kinds: every kind of object a ModelService owns is
//! declared here once.
//!
//! A row ([`Child`]) says what the rest of the operator needs to know about a
//! kind: what its cache keeps, whether its API may be missing from a
//! cluster, and whether a stale one is deleted. The [`child_table!`] line
//! then gives it a cache in [`Stores`], a watch, a place in readiness, in
//! forgetting and in the RBAC rules. `apply` destructures the desired
//! `core::Children` without `..`, so a child that is built but never applied
//! does not compile.
//!
//! Adding a kind: its builder in `core`, its field in `core::Children`, its
//! row below and its line in `child_table!`. Its RBAC follows from the row.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, PersistentVolumeClaimStatus, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Resource;
use kube::core::NamespaceResourceScope;
use kube::runtime::reflector;
use serde::Serialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use super::context::{Cache, synced};
use super::freshness::Freshness;
use super::lean::Lean;
use super::pods::{PodIndex, PodView, PodWriter};
use crate::api::gateway::HttpRoute;
use crate::api::inference::InferencePool;
use crate::api::keda::ScaledObject;
use crate::api::lws::{LeaderWorkerSet, LeaderWorkerSetStatus};
use crate::permissions::{Rule, Verb};

/// One row of the table.
pub trait Child: 'static {
    /// The object as the builders produce it and the operator applies it.
    type Object: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Serialize
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;
    /// What of its status the cache keeps (`IgnoredAny`: none).
    type Status: Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static;
    /// Its API is another project's CRD, which a cluster may not have. Such
    /// a kind is discovered (see `runtime::discovery`), its watch runs only
    /// while the API is served, and it never holds back readiness.
    const OPTIONAL: bool;
    /// A ModelService may stop wanting one (an autoscaler removed from the
    /// spec): then the operator deletes the one it controls. Also grants the
    /// `delete` verb.
    const DELETED_WHEN_UNWANTED: bool;
    /// Why the operator writes it: the comment on its RBAC rule.
    const WHY: &'static str;
    /// Its cache among the [`Stores`] (written by [`child_table!`]).
    fn cache(stores: &Stores) -> &Cache<Cached<Self>>;
}

/// What the cache of row `C` holds.
pub type Cached<C> = Lean<<C as Child>::Object, <C as Child>::Status>;

/// The Deployments: the stable one, always there, and the canary
/// `<name>-canary` with `rollout.canary`. Their status says how the rollout
/// goes.
pub struct DeploymentChild;
impl Child for DeploymentChild {
    const WHY: &'static str = "the serving pods, with their GPU requests; a canary's is deleted when rollout.canary is removed (and the stable track has rolled out), the stable one once a LeaderWorkerSet that replaces it is ready.";
    type Object = Deployment;
    type Status = super::lean::RolloutStatus;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.deployments
    }
}

/// The LeaderWorkerSet: with `parallelism.pipeline` above 1, in place of
/// the stable Deployment. Its status counts ready groups.
pub struct LeaderWorkerSetChild;
impl Child for LeaderWorkerSetChild {
    const WHY: &'static str = "the serving groups, with parallelism.pipeline above 1 (a replica over several nodes); deleted once the Deployment that replaces it is ready. Discovering leaderworkerset.x-k8s.io/v1 needs no permission.";
    type Object = LeaderWorkerSet;
    type Status = LeaderWorkerSetStatus;
    const OPTIONAL: bool = true;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.leader_worker_sets
    }
}

/// The Services: `<name>`, always there, and one per track with
/// `rollout.canary`.
pub struct ServiceChild;
impl Child for ServiceChild {
    const WHY: &'static str = "the in-cluster address of the model, and one per track with a canary; those go with the canary.";
    type Object = Service;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.services
    }
}

/// The HorizontalPodAutoscaler: with `autoscaling.engine: HPA`.
pub struct HpaChild;
impl Child for HpaChild {
    const WHY: &'static str =
        "with autoscaling.engine HPA; deleted when the engine changes or autoscaling is removed.";
    type Object = HorizontalPodAutoscaler;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.hpas
    }
}

/// KEDA's ScaledObject: with `autoscaling.engine: KEDA`. Its status says
/// whether KEDA is scaling and whether the trigger works.
pub struct ScaledObjectChild;
impl Child for ScaledObjectChild {
    const WHY: &'static str = "KEDA, with autoscaling.engine KEDA; deleted when the engine changes or autoscaling is removed. Discovering keda.sh/v1alpha1 needs no permission.";
    type Object = ScaledObject;
    type Status = serde_json::Value;
    const OPTIONAL: bool = true;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.scaled_objects
    }
}

/// Gateway API's HTTPRoute: with `route`. Its status says whether its
/// Gateways accepted it.
pub struct HttpRouteChild;
impl Child for HttpRouteChild {
    const WHY: &'static str = "Gateway API, with route; deleted when route is removed. Discovering gateway.networking.k8s.io/v1 needs no permission.";
    type Object = HttpRoute;
    type Status = serde_json::Value;
    const OPTIONAL: bool = true;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.routes
    }
}

/// The Inference Extension's InferencePool: with `route.backend:
/// InferencePool`, one per track. Its status says whether its Gateways
/// accepted it.
pub struct InferencePoolChild;
impl Child for InferencePoolChild {
    const WHY: &'static str = "Gateway API Inference Extension, with route.backend InferencePool (one per track); deleted when the route, the canary or that backend is removed. The endpoint pickers' Role grants get, list and watch on it, so the operator holds them too. Discovering inference.networking.k8s.io/v1 needs no permission.";
    type Object = InferencePool;
    type Status = serde_json::Value;
    const OPTIONAL: bool = true;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.pools
    }
}

/// The endpoint pickers' ServiceAccount, `<name>-epp`.
pub struct ServiceAccountChild;
impl Child for ServiceAccountChild {
    const WHY: &'static str = "the identity of an InferencePool's endpoint picker, with route.backend InferencePool; deleted with that backend.";
    type Object = ServiceAccount;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.service_accounts
    }
}

/// The endpoint pickers' Role, `<name>-epp`: read pods and pools.
pub struct RoleChild;
impl Child for RoleChild {
    const WHY: &'static str = "what an endpoint picker reads in its namespace (pods, inferencepools, inferenceobjectives, inferencemodelrewrites: get, list, watch), with route.backend InferencePool; deleted with that backend. Kubernetes lets the operator grant only what it holds itself.";
    type Object = Role;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.roles
    }
}

/// The endpoint pickers' RoleBinding, `<name>-epp`.
pub struct RoleBindingChild;
impl Child for RoleBindingChild {
    const WHY: &'static str = "binds the endpoint picker's Role to its ServiceAccount and nothing else, with route.backend InferencePool; deleted with that backend.";
    type Object = RoleBinding;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.role_bindings
    }
}

/// The endpoint pickers' plugin configuration, `<name>-epp`.
pub struct ConfigMapChild;
impl Child for ConfigMapChild {
    const WHY: &'static str = "the endpoint picker's plugin configuration, with route.backend InferencePool; deleted with that backend.";
    type Object = ConfigMap;
    type Status = IgnoredAny;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.config_maps
    }
}

/// The claim `<name>-weights` a downloaded `model.source` is kept in.
pub struct ClaimChild;
impl Child for ClaimChild {
    const WHY: &'static str = "the weights cache, with a downloaded model.source (hf://, http(s)://); deleted when model.source is removed or becomes a pvc:// path.";
    type Object = PersistentVolumeClaim;
    type Status = PersistentVolumeClaimStatus;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.claims
    }
}

/// The Job `<name>-fetch-<hash>` that downloads one source into the claim.
/// Its status says whether the download is complete or failed.
pub struct JobChild;
impl Child for JobChild {
    const WHY: &'static str = "downloads a model.source into the weights cache, once per source, with the operator's own image; the previous source's Job is deleted once the pods no longer read it.";
    type Object = Job;
    type Status = JobStatus;
    const OPTIONAL: bool = false;
    const DELETED_WHEN_UNWANTED: bool = true;
    fn cache(stores: &Stores) -> &Cache<Cached<Self>> {
        &stores.jobs
    }
}

/// Something done once per row, in table order (see [`each_child`]).
pub trait ForEachChild {
    fn visit<C: Child>(&mut self);
}

/// The writing end of each cache, handed to its watch.
pub trait ForEachWriter {
    fn visit<C: Child>(
        &mut self,
        writer: reflector::store::Writer<Cached<C>>,
        fresh: Arc<Freshness>,
    );
}

/// The table: one line per row, `field: Row`, in apply order.
macro_rules! child_table {
    ($($field:ident: $row:ty),* $(,)?) => {
        /// Reflector caches of the children, labelled by the operator, one
        /// per row of the table: observe reads them instead of the API
        /// server. They hold lean objects (see `lean`).
        #[derive(Clone)]
        pub struct Stores {
            $(pub $field: Cache<Cached<$row>>,)*
            /// The pods of every ModelService, as diagnosis reads them (not
            /// a child: the operator never writes pods; see `pods`).
            pub pods: Cache<PodView>,
            /// Which cached pods are whose (see `pods::PodIndex`).
            pub pod_index: Arc<PodIndex>,
        }

        /// The writing ends of the [`Stores`], consumed by the watches.
        pub struct Writers {
            $($field: reflector::store::Writer<Cached<$row>>,)*
            pods: PodWriter,
        }

        impl Stores {
            /// Empty caches and their writers.
            pub fn new() -> (Stores, Writers) {
                $(let $field = reflector::store::<Cached<$row>>();)*
                let pods = reflector::store::<PodView>();
                let pod_index = Arc::new(PodIndex::default());
                (
                    Stores {
                        $($field: Cache::new($field.0, <$row>::OPTIONAL),)*
                        pods: Cache::new(pods.0, false),
                        pod_index: pod_index.clone(),
                    },
                    Writers {
                        $($field: $field.1,)*
                        pods: PodWriter { writer: pods.1, index: pod_index },
                    },
                )
            }
        }

        impl Writers {
            /// Hands each child's writer to `v`, with its cache's freshness;
            /// returns the pods' writer, for their own watch.
            pub fn each(
                self,
                stores: &Stores,
                v: &mut impl ForEachWriter,
            ) -> PodWriter {
                $(v.visit::<$row>(self.$field, stores.$field.fresh.clone());)*
                self.pods
            }
        }

        /// Calls `v` once per row, in table order.
        pub fn each_child(v: &mut impl ForEachChild) {
            $(v.visit::<$row>();)*
        }
    };
}

child_table! {
    deployments: DeploymentChild,
    leader_worker_sets: LeaderWorkerSetChild,
    services: ServiceChild,
    hpas: HpaChild,
    scaled_objects: ScaledObjectChild,
    routes: HttpRouteChild,
    pools: InferencePoolChild,
    service_accounts: ServiceAccountChild,
    roles: RoleChild,
    role_bindings: RoleBindingChild,
    config_maps: ConfigMapChild,
    claims: ClaimChild,
    jobs: JobChild,
}

impl Stores {
    /// Waits until every cache whose API is always there has done its first
    /// list, so that a reconcile never mistakes "not cached yet" for
    /// "missing". True once synced; false if a reflector stopped. Optional
    /// kinds are not waited for: a cluster without them is a normal cluster.
    pub async fn wait_ready(&self) -> bool {
        struct Required<'a>(&'a Stores, Vec<futures::future::BoxFuture<'a, bool>>);
        impl<'a> ForEachChild for Required<'a> {
            fn visit<C: Child>(&mut self) {
                if !C::OPTIONAL {
                    self.1.push(Box::pin(synced(&C::cache(self.0).store)));
                }
            }
        }
        let mut required = Required(self, Vec::new());
        each_child(&mut required);
        // Without the pods, a reconcile would report a problem as gone.
        required.1.push(Box::pin(synced(&self.pods.store)));
        futures::future::join_all(required.1)
            .await
            .into_iter()
            .all(|ok| ok)
    }
}

/// The RBAC rules of every row, in table order: watch and cache (get, list,
/// watch), server-side apply (create, patch; field manager
/// modelservice-operator), and delete where a stale one is deleted.
pub fn rules() -> Vec<Rule> {
    struct Rules(Vec<Rule>);
    impl ForEachChild for Rules {
        fn visit<C: Child>(&mut self) {
            let mut verbs = vec![
                Verb::Get,
                Verb::List,
                Verb::Watch,
                Verb::Create,
                Verb::Patch,
            ];
            if C::DELETED_WHEN_UNWANTED {
                verbs.push(Verb::Delete);
            }
            self.0.push(Rule::new(
                format!("Child {}: {}", C::Object::kind(&()), C::WHY),
                C::Object::group(&()),
                C::Object::plural(&()),
                &verbs,
            ));
        }
    }
    let mut r = Rules(Vec::new());
    each_child(&mut r);
    r.0
}

/// The kind names of every row, in table order.
pub fn kinds() -> Vec<String> {
    struct Kinds(Vec<String>);
    impl ForEachChild for Kinds {
        fn visit<C: Child>(&mut self) {
            self.0.push(C::Object::kind(&()).into_owned());
        }
    }
    let mut k = Kinds(Vec::new());
    each_child(&mut k);
    k.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_gets_rules_and_only_removable_ones_may_delete() {
        let r = rules();
        let by = |res: &str| r.iter().find(|x| x.resource == res).cloned();
        assert_eq!(
            r.iter().map(|x| x.resource.as_str()).collect::<Vec<_>>(),
            [
                "deployments",
                "leaderworkersets",
                "services",
                "horizontalpodautoscalers",
                "scaledobjects",
                "httproutes",
                "inferencepools",
                "serviceaccounts",
                "roles",
                "rolebindings",
                "configmaps",
                "persistentvolumeclaims",
                "jobs"
            ]
        );
        // A canary's Deployment and the track Services go with the canary.
        assert!(by("deployments").is_some_and(|d| d.verbs.contains(&Verb::Delete)));
        assert!(by("services").is_some_and(|d| d.verbs.contains(&Verb::Delete)));
        assert!(by("horizontalpodautoscalers").is_some_and(|d| d.verbs.contains(&Verb::Delete)));
        assert_eq!(
            by("scaledobjects").map(|d| d.api_group),
            Some("keda.sh".to_string())
        );
    }

    #[test]
    fn the_stores_have_one_cache_per_row_and_optional_ones_start_unavailable() {
        let (stores, _writers) = Stores::new();
        assert!(stores.deployments.available());
        assert!(!stores.scaled_objects.available());
        assert!(!stores.leader_worker_sets.available());
        assert!(!stores.routes.available());
        assert!(!stores.pools.available());
        assert!(stores.roles.available());
        assert_eq!(
            kinds(),
            [
                "Deployment",
                "LeaderWorkerSet",
                "Service",
                "HorizontalPodAutoscaler",
                "ScaledObject",
                "HTTPRoute",
                "InferencePool",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "PersistentVolumeClaim",
                "Job"
            ]
        );
    }
}
