//! The full desired set of children for one ModelService.
//!
//! Reconcile applies exactly this, and `render` prints exactly this.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use super::canary_wait::{self, CanaryWaiting};
use super::rollback::{self, RolledBack};
use super::route::{self, Backend};
use super::subset::is_subset;
use super::tracks::{self, CANARY, Readiness, STABLE, Weights};
use super::{
    ValidSpec, deployment, endpoint_picker, hpa, keda, leader_worker_set, pool, service, weights,
};
use crate::api::gateway::HttpRoute;
use crate::api::inference::InferencePool;
use crate::api::keda::ScaledObject;
use crate::api::lws::LeaderWorkerSet;

/// What should exist for one ModelService. `None` means that child must
/// not exist (it is deleted if it does). One field per row of the child
/// table (`controller::children`); every use destructures it without `..`,
/// so a new child that is not applied or rendered does not compile.
///
/// The children most models do without are boxed: a reconcile holds its
/// `Children` across its writes, so their size is in every reconcile's
/// future; inline, the absent ones made it 27 KiB of a 34 KiB future
/// (BENCHMARKS.md, issue 36, tenth round).
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// The pods, one per replica: with `parallelism.pipeline` 1.
    pub deployment: Option<Deployment>,
    /// The groups of pods, one per replica: with `parallelism.pipeline`
    /// above 1, in place of the Deployment.
    pub groups: Option<Box<LeaderWorkerSet>>,
    pub service: Service,
    pub hpa: Option<HorizontalPodAutoscaler>,
    pub scaled_object: Option<Box<ScaledObject>>,
    /// The canary Deployment `<name>-canary`, with `rollout.canary`.
    pub canary: Option<Box<Deployment>>,
    /// The canary LeaderWorkerSet `<name>-canary`, with `rollout.canary`
    /// and groups, in place of the canary Deployment.
    pub canary_groups: Option<Box<LeaderWorkerSet>>,
    /// The Services of each track, `<name>-stable` and `<name>-canary`,
    /// with `rollout.canary`: what a route weighs.
    pub stable_service: Option<Box<Service>>,
    pub canary_service: Option<Box<Service>>,
    /// The HTTPRoute, with `route`.
    pub route: Option<Box<HttpRoute>>,
    /// The InferencePools and their endpoint pickers, with `route.backend:
    /// InferencePool`.
    pub pools: Option<Box<Pools>>,
    /// The claim `<name>-weights` a downloaded `model.source` is kept in.
    /// Boxed, as the Job.
    pub weights_claim: Option<Box<PersistentVolumeClaim>>,
    /// The Job `<name>-fetch-<hash>` that downloads it.
    pub fetch: Option<Box<Job>>,
}

/// One InferencePool and its endpoint picker.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolChildren {
    pub pool: InferencePool,
    /// The picker's Deployment and Service, `<pool>-epp`.
    pub picker: Deployment,
    pub picker_service: Service,
}

/// The pools of one ModelService: `<name>`, and `<name>-canary` with
/// `rollout.canary`, with what their pickers share, all named `<name>-epp`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pools {
    pub stable: PoolChildren,
    pub canary: Option<PoolChildren>,
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub config: ConfigMap,
}

/// What the children depend on besides the spec: the world as the
/// operator's caches saw it before this reconcile.
#[derive(Clone, Debug, Default)]
pub struct Prior {
    /// The stable Deployment's pod template, when it exists.
    pub stable_template: Option<Value>,
    /// Ready pods of each track (`canary_rolled_back` is decided here).
    pub readiness: Readiness,
    /// The cached canary Deployment's pod template, when it exists.
    pub canary_template: Option<Value>,
    /// The rollback annotation on the cached canary Deployment.
    pub canary_kept: Option<String>,
    /// Why the canary cannot serve, when it cannot (see `rollback::cause`).
    pub canary_cause: Option<(String, String)>,
    /// The canary's pods wait for GPUs (see `canary_wait`).
    pub canary_waiting: Option<CanaryWaiting>,
    /// The count the cached canary Deployment is held at (its
    /// `canary_wait::ANNOTATION`).
    pub canary_held_before: Option<i32>,
    /// The cached stable Deployment has not finished rolling out.
    pub stable_rolling_out: bool,
    /// The workload of the other shape (a Deployment where groups are
    /// wanted, or the reverse) still serves until the new one is ready:
    /// the Service then selects both.
    pub switching: bool,
    /// The cache, with a downloaded `model.source`.
    pub weights: WeightsPrior,
}

/// What the cache and the pods say of the weights.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightsPrior {
    /// The spec's source is complete in the cache (its Job succeeded).
    pub complete: bool,
    /// The source the cached stable workload's pods read (its template's
    /// `weights::SERVED_ANNOTATION`), `None` when they read none.
    pub serving: Option<String>,
}

impl Prior {
    /// The world `render` assumes: nothing exists yet, and every track
    /// would be ready, so the route shows the weights the spec asks for.
    pub fn offline() -> Self {
        Prior {
            readiness: Readiness {
                stable_ready: 1,
                canary_ready: 1,
                canary_rolled_back: false,
            },
            weights: WeightsPrior {
                complete: true,
                serving: None,
            },
            ..Prior::default()
        }
    }
}

/// The children and the decisions they embody, for the status to report.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub children: Children,
    /// The route's weights, with a route and a canary.
    pub weights: Option<Weights>,
    /// The canary's rollback, when it is rolled back.
    pub rolled_back: Option<RolledBack>,
    /// The canary's replicas while it is held for the stable track's
    /// rollout (see `canary_wait::held`).
    pub canary_held: Option<i32>,
}

/// The pod template `d` gives the pods of `v`, as JSON: the Deployment's,
/// or with groups the leaders' (what is compared with the cached one).
fn pod_template(v: &ValidSpec, d: &Deployment) -> Value {
    let t = if v.spec.pipeline() > 1 {
        serde_json::to_value(
            leader_worker_set::build(v, d, None)
                .spec
                .leader_worker_template
                .leader_template,
        )
    } else {
        serde_json::to_value(&d.spec.template)
    };
    t.unwrap_or_default()
}

/// Nothing serves yet and the weights are not in: no pods may start (they
/// would hold GPUs waiting), so no workload, and no autoscaler with nothing
/// to scale. Out of line: a reconcile's stack (debug builds keep each
/// temporary of a function in its frame) pays for it only when it runs.
#[inline(never)]
fn before_the_weights(
    v: &ValidSpec,
    owner: Option<&OwnerReference>,
    weights_claim: Option<Box<PersistentVolumeClaim>>,
    fetch: Option<Box<Job>>,
) -> Plan {
    Plan {
        children: Children {
            deployment: None,
            groups: None,
            service: service::build(v, owner, v.spec.pipeline() > 1),
            hpa: None,
            scaled_object: None,
            canary: None,
            canary_groups: None,
            stable_service: None,
            canary_service: None,
            route: None,
            pools: None,
            weights_claim,
            fetch,
        },
        weights: None,
        rolled_back: None,
        canary_held: None,
    }
}

/// Builds every child of `v` as `render` shows them.
pub fn build_children(v: &ValidSpec, owner: Option<&OwnerReference>) -> Children {
    plan(v, owner, &Prior::offline()).children
}

/// Builds every child of `v`, each owned by `owner` when given, in the
/// world `prior` describes.
pub fn plan(v: &ValidSpec, owner: Option<&OwnerReference>, prior: &Prior) -> Plan {
    let fetch = weights::job(
        v,
        owner,
        prior
            .weights
            .serving
            .as_ref()
            .and_then(|u| weights::served(&v.name, u))
            .as_ref(),
        &v.fetch_image,
    )
    .map(Box::new);
    let weights_claim = weights::claim(v, owner).map(Box::new);
    let Some(served_now) = weights::serving_now(v, prior) else {
        return before_the_weights(v, owner, weights_claim, fetch);
    };
    let with_served;
    let v = if served_now == v.served {
        v
    } else {
        with_served = ValidSpec {
            served: served_now,
            ..v.clone()
        };
        &with_served
    };
    let grouped = v.spec.pipeline() > 1;
    let mut deployment = deployment::build(v, owner);
    let unlabelled = pod_template(v, &deployment);
    let stable_labelled = tracks::stable_labelled(&unlabelled, prior.stable_template.as_ref());
    if stable_labelled {
        tracks::label_track(&mut deployment, STABLE, false);
    }
    let stable_rolls = prior.stable_rolling_out
        || prior
            .stable_template
            .as_ref()
            .is_some_and(|t| !is_subset(&pod_template(v, &deployment), t));
    let mut canary_held = None;
    let (canary, rolled_back) = match tracks::canary_spec(v) {
        Some(c) => {
            let mut d = deployment::build(&c, owner);
            d.metadata.name = Some(tracks::canary_name(&v.name));
            tracks::label_track(&mut d, CANARY, true);
            // A failure counts against this template only if the pods that
            // failed run it: right after a new canary image is applied, the
            // pods seen are still the old template's.
            let runs_it = prior
                .canary_template
                .as_ref()
                .is_some_and(|t| is_subset(&pod_template(&c, &d), t));
            let cause = prior.canary_cause.clone().filter(|_| runs_it);
            let rb = rollback::decide(&d, prior.canary_kept.as_deref(), cause);
            if let Some(rb) = &rb {
                rollback::roll_back(&mut d, rb);
            } else {
                canary_held = canary_wait::held(
                    prior.canary_waiting.as_ref(),
                    stable_rolls,
                    c.spec.replicas,
                    prior.canary_held_before,
                );
                if let Some(n) = canary_held {
                    canary_wait::hold(&mut d, n);
                }
            }
            (Some(d), rb)
        }
        None => (None, None),
    };
    let with_canary = v.spec.rollout.canary.as_ref();
    let weights = with_canary.filter(|_| v.spec.route.is_some()).map(|c| {
        tracks::weights(
            c.weight,
            Readiness {
                canary_rolled_back: rolled_back.is_some(),
                ..prior.readiness
            },
        )
    });
    let pooled = pool::wanted(v);
    let backends = match &weights {
        Some(w) if pooled => {
            let pools = [
                Backend::pool(v.name.clone(), w.stable),
                Backend::pool(tracks::canary_name(&v.name), w.canary),
            ];
            // A gateway that cannot weigh two pools still serves the
            // stable one while the canary gets nothing.
            if pools.iter().any(|b| b.weight > 0) {
                pools.into_iter().filter(|b| b.weight > 0).collect()
            } else {
                pools.to_vec()
            }
        }
        None if pooled => vec![Backend::pool(v.name.clone(), 1)],
        // Stable pods made before tracks existed are only reachable through
        // the Service of both tracks, until their next rollout labels them.
        Some(w) => vec![
            Backend::service(
                if stable_labelled {
                    tracks::stable_service_name(&v.name)
                } else {
                    v.name.clone()
                },
                w.stable,
            ),
            Backend::service(tracks::canary_name(&v.name), w.canary),
        ],
        None => vec![Backend::service(v.name.clone(), 1)],
    };
    let pools = pooled.then(|| {
        let stable_track = (with_canary.is_some() && stable_labelled).then_some(STABLE);
        let one = |name: String, track: Option<&str>| PoolChildren {
            pool: pool::build(v, &name, track, owner),
            picker: endpoint_picker::deployment(v, &name, &v.endpoint_picker_image, owner),
            picker_service: endpoint_picker::service(v, &name, owner),
        };
        Pools {
            stable: one(v.name.clone(), stable_track),
            canary: with_canary.map(|_| one(tracks::canary_name(&v.name), Some(CANARY))),
            service_account: endpoint_picker::service_account(v, owner),
            role: endpoint_picker::role(v, owner),
            role_binding: endpoint_picker::role_binding(v, owner),
            config: endpoint_picker::config(v, owner),
        }
    });
    // With groups, the canary is a second LeaderWorkerSet, decided as
    // the Deployment would be (held, rolled back) and made from it.
    let (canary, canary_groups) = match (canary, tracks::canary_spec(v)) {
        (Some(d), Some(c)) if grouped => {
            let mut g = leader_worker_set::build(&c, &d, owner);
            g.metadata = d.metadata.clone();
            g.spec.replicas = d.spec.replicas;
            (None, Some(Box::new(g)))
        }
        (d, _) => (d.map(Box::new), None),
    };
    let (deployment, groups) = if grouped {
        let g = leader_worker_set::build(v, &deployment, owner);
        (None, Some(Box::new(g)))
    } else {
        (Some(deployment), None)
    };
    Plan {
        children: Children {
            deployment,
            groups,
            service: service::build(v, owner, grouped && !prior.switching),
            hpa: hpa::build(v, owner),
            scaled_object: keda::build(v, owner).map(Box::new),
            canary,
            canary_groups,
            stable_service: with_canary.map(|_| Box::new(tracks::track_service(v, owner, STABLE))),
            canary_service: with_canary.map(|_| Box::new(tracks::track_service(v, owner, CANARY))),
            route: route::build(v, owner, &backends).map(Box::new),
            pools: pools.map(Box::new),
            weights_claim,
            fetch,
        },
        weights,
        rolled_back,
        canary_held,
    }
}

impl Children {
    /// The children as a multi-document YAML stream, in apply order.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let Children {
            deployment,
            groups,
            service,
            hpa,
            scaled_object,
            canary,
            canary_groups,
            stable_service,
            canary_service,
            route,
            pools,
            weights_claim,
            fetch,
        } = self;
        let mut docs = Vec::new();
        if let Some(c) = weights_claim {
            docs.push(serde_yaml::to_string(c)?);
        }
        if let Some(j) = fetch {
            docs.push(serde_yaml::to_string(j)?);
        }
        if let Some(d) = deployment {
            docs.push(serde_yaml::to_string(d)?);
        }
        if let Some(g) = groups {
            docs.push(serde_yaml::to_string(g)?);
        }
        docs.push(serde_yaml::to_string(service)?);
        if let Some(h) = hpa {
            docs.push(serde_yaml::to_string(h)?);
        }
        if let Some(s) = scaled_object {
            docs.push(serde_yaml::to_string(s)?);
        }
        if let Some(c) = canary {
            docs.push(serde_yaml::to_string(c)?);
        }
        if let Some(c) = canary_groups {
            docs.push(serde_yaml::to_string(c)?);
        }
        for s in [stable_service, canary_service].into_iter().flatten() {
            docs.push(serde_yaml::to_string(s)?);
        }
        if let Some(p) = pools {
            let Pools {
                stable,
                canary,
                service_account,
                role,
                role_binding,
                config,
            } = &**p;
            docs.extend([
                serde_yaml::to_string(service_account)?,
                serde_yaml::to_string(role)?,
                serde_yaml::to_string(role_binding)?,
                serde_yaml::to_string(config)?,
            ]);
            for one in std::iter::once(stable).chain(canary) {
                let PoolChildren {
                    pool,
                    picker,
                    picker_service,
                } = one;
                docs.extend([
                    serde_yaml::to_string(picker)?,
                    serde_yaml::to_string(picker_service)?,
                    serde_yaml::to_string(pool)?,
                ]);
            }
        }
        if let Some(r) = route {
            docs.push(serde_yaml::to_string(r)?);
        }
        Ok(docs.iter().map(|d| format!("---\n{d}")).collect::<String>())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::ModelService;
    use k8s_openapi::api::apps::v1::Deployment;

    /// The full example of ../shared/API.md, used across the core's tests.
    pub fn sample() -> ModelService {
        serde_yaml::from_str(
            r#"
apiVersion: serving.modelservice.dev/v1
kind: ModelService
metadata: {name: llama, namespace: ml, uid: 0b7c6a6e-1111-2222-3333-444455556666, generation: 3}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct, version: "2024-07-23"}
  runtime:
    image: vllm/vllm-openai:v0.8.5
    args: ["--max-model-len", "8192"]
    env: [{name: HF_HOME, value: /cache}]
  replicas: 2
  resources: {gpus: 1, cpu: "4", memory: 32Gi}
  scheduling:
    nodeSelector: {gpu: a100}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  autoscaling: {minReplicas: 1, maxReplicas: 8, targetQueueLength: 5}
"#,
        )
        .expect("sample parses")
    }

    pub fn valid() -> ValidSpec {
        crate::core::validate(&sample(), "default").expect("sample is valid")
    }

    #[test]
    fn defaults_fill_in_what_the_document_omits() {
        let ms: ModelService = serde_yaml::from_str(
            "apiVersion: serving.modelservice.dev/v1\nkind: ModelService\nmetadata: {name: m}\nspec: {model: {name: m}, runtime: {image: i}}\n",
        )
        .expect("parses");
        assert_eq!(
            (
                ms.spec.replicas,
                ms.spec.runtime.port,
                ms.spec.resources.gpus,
                ms.spec.resources.gpu_resource.as_str()
            ),
            (1, 8000, 1, "nvidia.com/gpu")
        );
        assert_eq!(
            ms.spec.rollout.strategy,
            crate::api::RolloutStrategy::RollingUpdate
        );
        assert_eq!(ms.spec.runtime.preset, None);
    }

    #[test]
    fn every_child_is_owned_and_labelled() {
        let owner = OwnerReference {
            api_version: "serving.modelservice.dev/v1".into(),
            kind: "ModelService".into(),
            name: "llama".into(),
            uid: "u-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let c = build_children(&valid(), Some(&owner));
        let metas = [
            &c.deployment.as_ref().expect("a Deployment").metadata,
            &c.service.metadata,
            &c.hpa.as_ref().expect("hpa").metadata,
        ];
        for m in metas {
            assert_eq!(m.name.as_deref(), Some("llama"));
            assert_eq!(m.namespace.as_deref(), Some("ml"));
            assert_eq!(m.owner_references.as_deref(), Some(&[owner.clone()][..]));
            let l = m.labels.as_ref().expect("labels");
            assert_eq!(
                l.get("app.kubernetes.io/name").map(String::as_str),
                Some("modelservice")
            );
            assert_eq!(
                l.get("app.kubernetes.io/instance").map(String::as_str),
                Some("llama")
            );
            assert_eq!(
                l.get("app.kubernetes.io/managed-by").map(String::as_str),
                Some("modelservice-operator")
            );
        }
    }

    #[test]
    fn yaml_documents_carry_api_version_and_kind() {
        let y = build_children(&valid(), None).to_yaml().expect("yaml");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&y)
            .map(|d| serde::Deserialize::deserialize(d).expect("doc"))
            .collect();
        let kinds: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d["apiVersion"].as_str().unwrap_or(""),
                    d["kind"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("apps/v1", "Deployment"),
                ("v1", "Service"),
                ("autoscaling/v2", "HorizontalPodAutoscaler")
            ]
        );
    }

    fn canary_and_route() -> ValidSpec {
        let mut v = valid();
        v.spec.rollout.canary = Some(Box::new(crate::api::Canary {
            model: None,
            runtime: Some(crate::api::CanaryRuntime {
                image: Some("vllm/vllm-openai:v0.9.0".into()),
                args: None,
                env: None,
            }),
            replicas: 1,
            weight: 25,
        }));
        v.spec.route = Some(Box::new(crate::api::Route {
            parent_refs: vec![crate::api::ParentReference {
                name: "gw".into(),
                namespace: None,
                section_name: None,
                port: None,
                group: None,
                kind: None,
            }],
            hostnames: vec![],
            path: "/".into(),
            backend: None,
            inference_pool: None,
        }));
        v
    }

    fn backends(c: &Children) -> Vec<(String, i32)> {
        c.route
            .as_ref()
            .map(|r| {
                r.spec.rules[0]
                    .backend_refs
                    .iter()
                    .map(|b| (b.name.clone(), b.weight))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_canary_gets_its_deployment_track_services_and_a_weighted_route() {
        let ready = Prior {
            readiness: Readiness {
                stable_ready: 2,
                canary_ready: 1,
                canary_rolled_back: false,
            },
            ..Prior::default()
        };
        let p = plan(&canary_and_route(), None, &ready);
        let c = p.children.canary.as_ref().expect("canary");
        assert_eq!(c.metadata.name.as_deref(), Some("llama-canary"));
        assert_eq!(c.spec.replicas, Some(1));
        let track = |d: &Deployment| {
            d.spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default()
                .get(tracks::TRACK_LABEL)
                .cloned()
        };
        assert_eq!(track(c).as_deref(), Some("canary"));
        assert_eq!(
            track(p.children.deployment.as_ref().expect("a Deployment")).as_deref(),
            Some("stable")
        );
        assert_eq!(
            c.spec
                .selector
                .match_labels
                .as_ref()
                .and_then(|l| l.get(tracks::TRACK_LABEL))
                .map(String::as_str),
            Some("canary"),
            "the canary's ReplicaSets never adopt stable pods"
        );
        assert_eq!(
            p.children
                .deployment
                .as_ref()
                .expect("a Deployment")
                .spec
                .selector,
            deployment::build(&valid(), None).spec.selector,
            "the stable selector never changes: it is immutable"
        );
        assert!(p.children.stable_service.is_some() && p.children.canary_service.is_some());
        assert_eq!(
            backends(&p.children),
            [
                ("llama-stable".to_string(), 75),
                ("llama-canary".to_string(), 25)
            ]
        );
        assert_eq!(p.rolled_back, None);
    }

    #[test]
    fn a_canary_waiting_for_gpus_is_held_while_the_stable_track_rolls_out() {
        let waiting = CanaryWaiting {
            problem: crate::core::diagnosis::Problem {
                reason: crate::core::reasons::INSUFFICIENT_GPU,
                message: "no node has 1 free nvidia.com/gpu".into(),
            },
            placed: 0,
            past_grace: true,
        };
        let settled = Prior {
            stable_template: serde_json::to_value(
                &plan(&canary_and_route(), None, &Prior::default())
                    .children
                    .deployment
                    .as_ref()
                    .expect("a Deployment")
                    .spec
                    .template,
            )
            .ok(),
            canary_waiting: Some(waiting),
            ..Prior::default()
        };
        let p = plan(&canary_and_route(), None, &settled);
        assert_eq!(p.canary_held, None, "the stable track is not rolling out");
        let canary = |p: &Plan| p.children.canary.as_ref().and_then(|c| c.spec.replicas);
        assert_eq!(canary(&p), Some(1));
        assert_eq!(p.rolled_back, None, "waiting is no failure");
        let rolling = Prior {
            stable_rolling_out: true,
            ..settled.clone()
        };
        let p = plan(&canary_and_route(), None, &rolling);
        assert_eq!((p.canary_held, canary(&p)), (Some(0), Some(0)));
        assert_eq!(p.rolled_back, None);
        // A new stable template is a rollout too, before the cache shows it.
        let mut v = canary_and_route();
        v.spec.runtime.args.push("--max-model-len=4096".into());
        assert_eq!(plan(&v, None, &settled).canary_held, Some(0));
        // Its waiting pods gone, the hold on the canary keeps it.
        let after = Prior {
            canary_waiting: None,
            canary_held_before: Some(0),
            ..rolling.clone()
        };
        let p = plan(&canary_and_route(), None, &after);
        assert_eq!((p.canary_held, canary(&p)), (Some(0), Some(0)));
        // A canary at 0 without the hold (rolled back before) is not held.
        let unheld = Prior {
            canary_held_before: None,
            ..after
        };
        assert_eq!(canary(&plan(&canary_and_route(), None, &unheld)), Some(1));
    }

    #[test]
    fn a_failing_canary_is_rolled_back_to_zero_and_gets_no_traffic() {
        let failing = Prior {
            readiness: Readiness {
                stable_ready: 2,
                canary_ready: 1,
                canary_rolled_back: false,
            },
            canary_cause: Some(("CrashLooping".into(), "restarting".into())),
            ..Prior::default()
        };
        // The failing pods ran another template: no rollback of this one.
        let other = Prior {
            canary_template: Some(
                serde_json::json!({"spec": {"containers": [{"image": "old:1"}]}}),
            ),
            ..failing.clone()
        };
        assert_eq!(plan(&canary_and_route(), None, &other).rolled_back, None);
        let offline = plan(&canary_and_route(), None, &Prior::default());
        let running = offline.children.canary.as_ref().expect("canary");
        let failing = Prior {
            canary_template: Some(serde_json::to_value(&running.spec.template).expect("json")),
            ..failing
        };
        let p = plan(&canary_and_route(), None, &failing);
        assert_eq!(
            p.children.canary.as_ref().and_then(|c| c.spec.replicas),
            Some(0)
        );
        assert_eq!(
            backends(&p.children),
            [
                ("llama-stable".to_string(), 100),
                ("llama-canary".to_string(), 0)
            ]
        );
        let rb = p.rolled_back.expect("rolled back");
        // Next reconcile: the pods are gone, the annotation remembers.
        let kept = serde_json::to_string(&rb).expect("json");
        let later = Prior {
            canary_kept: Some(kept),
            ..Prior::default()
        };
        let p2 = plan(&canary_and_route(), None, &later);
        assert_eq!(p2.rolled_back, Some(rb));
        assert_eq!(
            p2.children.canary, p.children.canary,
            "the same rolled-back canary"
        );
        assert_eq!(
            p2.children.deployment, p.children.deployment,
            "the stable track is untouched"
        );
    }

    #[test]
    fn without_a_canary_the_route_sends_everything_to_the_service() {
        let mut v = canary_and_route();
        v.spec.rollout.canary = None;
        let p = plan(&v, None, &Prior::default());
        assert_eq!(backends(&p.children), [("llama".to_string(), 1)]);
        assert!(p.children.canary.is_none() && p.children.stable_service.is_none());
        assert_eq!(p.weights, None);
    }

    #[test]
    fn stable_pods_made_before_tracks_are_reached_through_the_shared_service() {
        let old = deployment::build(&valid(), None);
        let prior = Prior {
            stable_template: Some(serde_json::to_value(&old.spec.template).expect("json")),
            ..Prior::offline()
        };
        let p = plan(&canary_and_route(), None, &prior);
        assert_eq!(
            p.children.deployment,
            Some(old),
            "no restart of the stable pods"
        );
        assert_eq!(backends(&p.children)[0], ("llama".to_string(), 75));
    }

    fn pooled(v: &mut ValidSpec) {
        if let Some(r) = v.spec.route.as_mut() {
            r.backend = Some(crate::api::RouteBackend::InferencePool);
        }
    }

    fn kinds_of(c: &Children) -> Vec<(String, String)> {
        c.route
            .as_ref()
            .map(|r| {
                r.spec.rules[0]
                    .backend_refs
                    .iter()
                    .map(|b| (b.kind.clone().unwrap_or_default(), b.name.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn with_a_pool_backend_the_route_sends_to_the_pool_behind_its_picker() {
        let mut v = canary_and_route();
        v.spec.rollout.canary = None;
        pooled(&mut v);
        let p = plan(&v, None, &Prior::offline());
        assert_eq!(
            kinds_of(&p.children),
            [("InferencePool".to_string(), "llama".to_string())]
        );
        let pools = p.children.pools.as_ref().expect("pools");
        assert!(pools.canary.is_none());
        assert_eq!(pools.stable.pool.metadata.name.as_deref(), Some("llama"));
        assert_eq!(
            pools.stable.pool.spec.selector.match_labels,
            selector_labels_of("llama"),
            "every pod of the model, whatever its track"
        );
        assert_eq!(
            pools.stable.picker.metadata.name.as_deref(),
            Some("llama-epp")
        );
        assert_eq!(
            pools
                .stable
                .picker
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].image.as_deref()),
            Some(crate::core::endpoint_picker::DEFAULT_IMAGE)
        );
        let y = p.children.to_yaml().expect("yaml");
        for kind in [
            "InferencePool",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ConfigMap",
        ] {
            assert!(
                y.contains(&format!("kind: {kind}\n")),
                "render shows the {kind}: {y}"
            );
        }
        // Back to the Service: no pool.
        let p = plan(&canary_and_route(), None, &Prior::offline());
        assert!(p.children.pools.is_none());
    }

    fn selector_labels_of(name: &str) -> std::collections::BTreeMap<String, String> {
        crate::core::labels::selector_labels(name)
    }

    #[test]
    fn a_canary_with_pools_gets_its_own_pool_and_weight_only_while_it_serves() {
        let mut v = canary_and_route();
        pooled(&mut v);
        let p = plan(&v, None, &Prior::offline());
        assert_eq!(
            backends(&p.children),
            [("llama".to_string(), 75), ("llama-canary".to_string(), 25)]
        );
        let pools = p.children.pools.as_ref().expect("pools");
        let canary = pools.canary.as_ref().expect("canary pool");
        assert_eq!(
            canary
                .pool
                .spec
                .selector
                .match_labels
                .get(tracks::TRACK_LABEL)
                .map(String::as_str),
            Some("canary")
        );
        assert_eq!(
            canary.picker.metadata.name.as_deref(),
            Some("llama-canary-epp")
        );
        assert_eq!(
            pools
                .stable
                .pool
                .spec
                .selector
                .match_labels
                .get(tracks::TRACK_LABEL)
                .map(String::as_str),
            Some("stable")
        );
        // A canary without ready pods: the route names the stable pool only,
        // so a Gateway that cannot weigh two pools still serves.
        let unready = Prior {
            readiness: Readiness {
                stable_ready: 2,
                canary_ready: 0,
                canary_rolled_back: false,
            },
            ..Prior::default()
        };
        let p = plan(&v, None, &unready);
        assert_eq!(backends(&p.children), [("llama".to_string(), 100)]);
        assert!(
            p.children
                .pools
                .as_ref()
                .is_some_and(|p| p.canary.is_some()),
            "its pool stays"
        );
        // Stable pods made before tracks: the stable pool selects them all.
        let old = deployment::build(&valid(), None);
        let prior = Prior {
            stable_template: Some(serde_json::to_value(&old.spec.template).expect("json")),
            ..Prior::offline()
        };
        let p = plan(&v, None, &prior);
        let stable = &p.children.pools.as_ref().expect("pools").stable.pool;
        assert_eq!(
            stable.spec.selector.match_labels,
            selector_labels_of("llama")
        );
    }

    #[test]
    fn building_is_deterministic() {
        let a = build_children(&valid(), None).to_yaml().expect("yaml");
        let b = build_children(&valid(), None).to_yaml().expect("yaml");
        assert_eq!(a, b);
    }

    fn grouped() -> ValidSpec {
        let mut v = valid();
        v.spec.parallelism = Some(crate::api::Parallelism {
            tensor: None,
            pipeline: 2,
        });
        v
    }

    #[test]
    fn groups_replace_the_deployment_and_the_service_selects_leaders() {
        let c = build_children(&grouped(), None);
        assert_eq!(c.deployment, None);
        let g = c.groups.as_ref().expect("a LeaderWorkerSet");
        assert_eq!(g.metadata.name.as_deref(), Some("llama"));
        assert_eq!(g.spec.leader_worker_template.size, 2);
        let selector = c.service.spec.as_ref().and_then(|s| s.selector.clone());
        assert_eq!(
            selector.and_then(|s| s.get("leaderworkerset.sigs.k8s.io/worker-index").cloned()),
            Some("0".to_string())
        );
        let hpa = c.hpa.as_ref().expect("an HPA");
        assert_eq!(hpa.spec.scale_target_ref.kind, "LeaderWorkerSet");
        assert_eq!(
            hpa.spec.scale_target_ref.api_version.as_deref(),
            Some("leaderworkerset.x-k8s.io/v1")
        );
        let yaml = c.to_yaml().expect("yaml");
        assert!(yaml.contains("kind: LeaderWorkerSet") && !yaml.contains("kind: Deployment"));
        // One pod per replica: the Deployment as ever.
        let one = build_children(&valid(), None);
        assert!(one.deployment.is_some() && one.groups.is_none());
    }

    #[test]
    fn while_the_deployment_still_serves_the_service_selects_both() {
        let prior = Prior {
            switching: true,
            ..Prior::offline()
        };
        let p = plan(&grouped(), None, &prior);
        assert_eq!(
            p.children.service.spec.and_then(|s| s.selector),
            Some(crate::core::labels::selector_labels("llama"))
        );
    }

    #[test]
    fn a_canary_of_groups_is_a_second_leader_worker_set_and_rolls_back_as_one() {
        let mut v = grouped();
        v.spec.rollout.canary = canary_and_route().spec.rollout.canary;
        let p = plan(&v, None, &Prior::offline());
        assert_eq!(p.children.canary, None);
        let c = p.children.canary_groups.as_ref().expect("a canary LWS");
        assert_eq!(c.metadata.name.as_deref(), Some("llama-canary"));
        let leader = &c.spec.leader_worker_template.leader_template;
        assert_eq!(
            serde_json::to_value(leader)
                .ok()
                .as_ref()
                .and_then(tracks::track_of_template),
            Some("canary")
        );
        let canary_svc = p
            .children
            .canary_service
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.selector.clone())
            .expect("selector");
        assert_eq!(
            canary_svc
                .get("leaderworkerset.sigs.k8s.io/worker-index")
                .map(String::as_str),
            Some("0")
        );

        // Its pods crash: the canary's groups go to 0, and say why.
        let prior = Prior {
            canary_template: serde_json::to_value(leader).ok(),
            canary_cause: Some(("CrashLooping".into(), "it crashes".into())),
            ..Prior::offline()
        };
        let p = plan(&v, None, &prior);
        let c = p.children.canary_groups.expect("a canary LWS");
        assert_eq!(c.spec.replicas, Some(0));
        assert!(
            c.metadata
                .annotations
                .is_some_and(|a| a.contains_key(rollback::ANNOTATION))
        );
        assert!(p.rolled_back.is_some());
    }

    /// What a model without groups, canary, route, pools or KEDA leaves
    /// empty costs a pointer each, not the child's size: every reconcile
    /// in flight holds a `Children` across its writes.
    #[test]
    fn the_children_most_models_lack_take_no_room() {
        let size = std::mem::size_of::<Children>();
        let inline = std::mem::size_of::<Deployment>()
            + std::mem::size_of::<Service>()
            + std::mem::size_of::<HorizontalPodAutoscaler>();
        assert!(
            size <= inline + 16 * std::mem::size_of::<usize>(),
            "Children is {size} bytes; the Deployment, Service and HPA are {inline}"
        );
    }
}
