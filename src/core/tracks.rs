//! The stable and canary tracks: their names, their labels, the canary's
//! spec, and the weight each gets on the route.
//!
//! The canary is a second Deployment of the same ModelService. Its pods carry
//! the same labels as the stable ones plus `track: canary`, so the Service
//! `<name>` reaches both, and the per-track Services `<name>-stable` and
//! `<name>-canary` reach one each, for a route to weigh.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use super::labels::selector_labels;
use super::rollout::{DeploymentState, Rollout, rollout};
use super::subset::is_subset;
use super::{ValidSpec, service};

/// The label that says which track a pod belongs to.
pub const TRACK_LABEL: &str = "serving.modelservice.dev/track";
pub const STABLE: &str = "stable";
pub const CANARY: &str = "canary";

/// The canary Deployment and Service: `<name>-canary`.
pub fn canary_name(name: &str) -> String {
    format!("{name}-{CANARY}")
}

/// The stable track's own Service: `<name>-stable`.
pub fn stable_service_name(name: &str) -> String {
    format!("{name}-{STABLE}")
}

/// The longest ModelService name that still leaves room for the track
/// suffixes in a 63-character Service name.
pub const MAX_NAME_WITH_TRACKS: usize = 63 - 1 - CANARY.len();

/// The spec the canary runs: the stable spec with the canary's overrides,
/// its own replica count and no autoscaler (a canary is a fixed sample).
/// `None` without `rollout.canary`.
pub fn canary_spec(v: &ValidSpec) -> Option<ValidSpec> {
    let c = v.spec.rollout.canary.as_ref()?;
    let mut s = v.clone();
    if let Some(version) = c.model.as_ref().and_then(|m| m.version.clone()) {
        s.spec.model.version = Some(version);
    }
    if let Some(rt) = &c.runtime {
        if let Some(image) = &rt.image {
            s.spec.runtime.image = image.clone();
        }
        if let Some(args) = &rt.args {
            s.spec.runtime.args = args.clone();
        }
        if let Some(env) = &rt.env {
            s.spec.runtime.env = env.clone();
        }
    }
    s.spec.replicas = c.replicas;
    s.spec.autoscaling = None;
    s.spec.rollout.canary = None;
    s.prometheus_address = None;
    Some(s)
}

/// Whether the stable pods carry `track: stable`.
///
/// They do, except on a Deployment made before tracks existed whose pod
/// template nothing else changes: adding a label to a pod template restarts
/// every pod, and an operator upgrade must restart none. Such pods get the
/// label at their next rollout, which restarts them anyway. `desired` is the
/// stable pod template without the label, `observed` the cached one.
pub fn stable_labelled(desired: &Value, observed: Option<&Value>) -> bool {
    match observed {
        None => true,
        Some(t) if track_of_template(t).is_some() => true,
        Some(t) => !is_subset(desired, t),
    }
}

/// The track label of a pod template (as JSON), if any.
pub fn track_of_template(template: &Value) -> Option<&str> {
    template
        .get("metadata")?
        .get("labels")?
        .get(TRACK_LABEL)?
        .as_str()
}

/// Adds the track label to a Deployment's pod template, and to its selector
/// when `select` (the canary's: its ReplicaSets must never adopt stable
/// pods). The stable selector never changes: it is immutable.
pub fn label_track(d: &mut Deployment, track: &str, select: bool) {
    let labels = d
        .spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default);
    labels.insert(TRACK_LABEL.into(), track.into());
    if select {
        d.spec
            .selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(TRACK_LABEL.into(), track.into());
    }
}

/// A Service that reaches one track only: `<name>-stable` or `<name>-canary`.
pub fn track_service(v: &ValidSpec, owner: Option<&OwnerReference>, track: &str) -> Service {
    let mut s = service::build(v, owner, false);
    s.metadata.name = Some(format!("{}-{track}", v.name));
    if let Some(spec) = s.spec.as_mut() {
        let mut sel = selector_labels(&v.name);
        sel.insert(TRACK_LABEL.into(), track.into());
        // Only a group's leader serves.
        if v.spec.pipeline() > 1 {
            sel.insert(crate::api::lws::labels::WORKER_INDEX.into(), "0".into());
        }
        spec.selector = Some(sel);
    }
    s
}

/// Whether a canary that the spec no longer has may be deleted: only once
/// the stable track has rolled out its current spec. A promotion moves the
/// canary's overrides into the stable spec; until the stable pods run them,
/// the canary's pods are capacity the model still needs. (A canary removed
/// to roll it back goes at once: the stable track is already complete.)
pub fn canary_may_go(stable: Option<DeploymentState<'_>>) -> bool {
    matches!(rollout(stable), Rollout::Complete { .. })
}

/// What the weights are decided from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    pub stable_ready: i32,
    pub canary_ready: i32,
    /// The canary is rolled back (see `rollback`).
    pub canary_rolled_back: bool,
}

/// The route's weights: stable and canary, in percent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weights {
    pub stable: i32,
    pub canary: i32,
    /// Why they differ from the spec's, when they do.
    pub why: Option<String>,
}

/// Splits traffic as `rollout.canary.weight` asks, but only to a track with
/// ready pods: a request sent to a track without one fails. With neither
/// ready, the stable track keeps it all (nothing is gained by a split, and
/// the stable track is the one that is meant to serve).
pub fn weights(canary_weight: i32, r: Readiness) -> Weights {
    let w = canary_weight.clamp(0, 100);
    let all_stable = |why: &str| Weights {
        stable: 100,
        canary: 0,
        why: Some(why.to_string()),
    };
    if r.canary_rolled_back {
        return all_stable("the canary is rolled back");
    }
    match (r.stable_ready > 0, r.canary_ready > 0) {
        (true, true) => Weights {
            stable: 100 - w,
            canary: w,
            why: None,
        },
        (true, false) => all_stable("the canary has no ready pod yet"),
        (false, true) => Weights {
            stable: 0,
            canary: 100,
            why: Some("the stable track has no ready pod".into()),
        },
        (false, false) => all_stable("no track has a ready pod yet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Canary, CanaryModel, CanaryRuntime};
    use crate::core::children::tests::valid;
    use serde_json::json;

    fn with_canary() -> ValidSpec {
        let mut v = valid();
        v.spec.rollout.canary = Some(Box::new(Canary {
            model: Some(CanaryModel {
                version: Some("2025-01-01".into()),
            }),
            runtime: Some(CanaryRuntime {
                image: Some("vllm/vllm-openai:v0.9.0".into()),
                args: None,
                env: Some(vec![]),
            }),
            replicas: 2,
            weight: 20,
        }));
        v
    }

    #[test]
    fn the_canary_runs_the_stable_spec_with_its_overrides_and_no_autoscaler() {
        let v = with_canary();
        let c = canary_spec(&v).expect("a canary");
        assert_eq!(c.spec.runtime.image, "vllm/vllm-openai:v0.9.0");
        assert_eq!(c.spec.model.version.as_deref(), Some("2025-01-01"));
        assert_eq!(
            c.spec.runtime.args, v.spec.runtime.args,
            "args not overridden"
        );
        assert!(c.spec.runtime.env.is_empty(), "an empty env replaces");
        assert_eq!(c.spec.replicas, 2);
        assert_eq!(c.spec.autoscaling, None);
        assert_eq!(c.spec.rollout.canary, None);
        assert_eq!(c.name, v.name, "same ModelService, same instance label");
        assert_eq!(canary_spec(&valid()), None);
    }

    #[test]
    fn weight_goes_only_to_a_track_with_ready_pods() {
        let r = |s, c, rb| Readiness {
            stable_ready: s,
            canary_ready: c,
            canary_rolled_back: rb,
        };
        let w = weights(20, r(2, 1, false));
        assert_eq!((w.stable, w.canary, w.why), (80, 20, None));
        let w = weights(20, r(2, 0, false));
        assert_eq!((w.stable, w.canary), (100, 0));
        assert!(w.why.is_some_and(|m| m.contains("canary")));
        let w = weights(20, r(0, 1, false));
        assert_eq!((w.stable, w.canary), (0, 100));
        let w = weights(20, r(2, 1, true));
        assert_eq!((w.stable, w.canary), (100, 0), "rolled back");
        let w = weights(20, r(0, 0, false));
        assert_eq!((w.stable, w.canary), (100, 0));
        let w = weights(100, r(1, 1, false));
        assert_eq!((w.stable, w.canary), (0, 100));
    }

    #[test]
    fn an_unlabelled_stable_template_gets_the_label_only_with_another_change() {
        let desired =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"image": "i:1"}]}});
        let same = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"image": "i:1", "imagePullPolicy": "IfNotPresent"}]}});
        let changed =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"image": "i:0"}]}});
        let labelled =
            json!({"metadata": {"labels": {"a": "1", TRACK_LABEL: "stable"}}, "spec": {}});
        assert!(stable_labelled(&desired, None), "a new Deployment");
        assert!(
            !stable_labelled(&desired, Some(&same)),
            "an upgrade restarts nothing"
        );
        assert!(
            stable_labelled(&desired, Some(&changed)),
            "it rolls out anyway"
        );
        assert!(
            stable_labelled(&desired, Some(&labelled)),
            "it keeps its label"
        );
    }

    #[test]
    fn a_promoted_canary_goes_only_once_the_stable_track_has_rolled_out() {
        let dep = |st: serde_json::Value| -> Deployment {
            serde_json::from_value(json!({"metadata": {"generation": 2},
                "spec": {"replicas": 2, "selector": {}, "template": {}}, "status": st}))
            .expect("deployment")
        };
        let rolling = dep(
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
            "availableReplicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}),
        );
        let unseen = dep(
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "readyReplicas": 2}),
        );
        let done = dep(
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}),
        );
        assert!(!canary_may_go(Some((&rolling).into())));
        assert!(
            !canary_may_go(Some((&unseen).into())),
            "the new spec not yet seen"
        );
        assert!(!canary_may_go(None));
        assert!(canary_may_go(Some((&done).into())));
    }

    #[test]
    fn track_services_select_one_track() {
        let v = with_canary();
        let s = track_service(&v, None, CANARY);
        assert_eq!(s.metadata.name.as_deref(), Some("llama-canary"));
        let sel = s.spec.and_then(|s| s.selector).expect("selector");
        assert_eq!(sel.get(TRACK_LABEL).map(String::as_str), Some("canary"));
        assert_eq!(
            sel.get("app.kubernetes.io/instance").map(String::as_str),
            Some("llama")
        );
    }
}
