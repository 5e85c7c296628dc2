//! The desired LeaderWorkerSet: with `parallelism.pipeline` above 1, the
//! replicas are groups of pods on as many nodes, in place of the
//! Deployment.
//!
//! Both templates come from the Deployment's pod template, so a group's pods
//! have everything a single pod has (the GPU limit, the shared memory,
//! scheduling, the labels diagnosis and the route select on); only the
//! launch differs (see `multinode`). Workers serve no HTTP: they lose the
//! probes and the named port, so no Service, pool or probe ever reaches
//! one.
//!
//! `RecreateGroupOnPodRestart`: a pipeline stage that restarts leaves the
//! others waiting on a dead peer, so the group starts over as a whole.
//! `LeaderCreated`: the workers start with the leader, not once it is
//! ready, since the leader turns ready only once its workers have joined
//! (`LeaderReady` would wait for ever).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ValidSpec;
use super::deployment::PORT_NAME;
use super::labels::child_meta;
use super::multinode::{self, Launch};
use crate::api::lws::{
    LeaderWorkerSet, LeaderWorkerSetSpec, LeaderWorkerTemplate, RollingUpdate, RolloutStrategy,
};

pub const RESTART_POLICY: &str = "RecreateGroupOnPodRestart";
pub const STARTUP_POLICY: &str = "LeaderCreated";

/// Builds the LeaderWorkerSet of `v` from `deployment`, the Deployment
/// `v` would have with one pod per replica. Its rollout replaces a group
/// at a time, unless a surge decision says otherwise (see [`stamp`]).
pub fn build(
    v: &ValidSpec,
    deployment: &Deployment,
    owner: Option<&OwnerReference>,
) -> LeaderWorkerSet {
    let spec = &v.spec;
    let pipeline = spec.pipeline();
    let tensor = spec.resources.gpus.max(1);
    let template = &deployment.spec.template;
    let preset = spec.runtime.preset;
    let rt = &spec.runtime;
    // Where the launch's flags go: after the preset's, before
    // runtime.args, so a user's flag still wins where the runtime takes
    // the last one.
    let at = super::preset::args(
        preset,
        &spec.model.name,
        v.served.as_ref().map(|s| s.path.as_str()),
        rt.port,
        &rt.args,
        super::pool::wanted(v),
    )
    .len();
    LeaderWorkerSet::new(
        child_meta(v, owner),
        LeaderWorkerSetSpec {
            replicas: deployment.spec.replicas,
            leader_worker_template: LeaderWorkerTemplate {
                size: pipeline,
                restart_policy: RESTART_POLICY.into(),
                leader_template: with_launch(
                    template,
                    &multinode::leader(preset, tensor, pipeline),
                    at,
                    false,
                ),
                worker_template: with_launch(
                    template,
                    &multinode::worker(preset, tensor, pipeline),
                    at,
                    true,
                ),
            },
            rollout_strategy: RolloutStrategy {
                type_: "RollingUpdate".into(),
                rolling_update_configuration: RollingUpdate {
                    max_unavailable: IntOrString::Int(1),
                    max_surge: IntOrString::Int(0),
                },
            },
            startup_policy: STARTUP_POLICY.into(),
        },
    )
}

/// Puts a surge `decision` (see `surge`) on the LeaderWorkerSet: its
/// rolling update, in groups, and the annotation that keeps it.
pub fn stamp(g: &mut LeaderWorkerSet, decision: &super::surge::Decision) {
    let surge = decision.pods_surged();
    g.spec.rollout_strategy.rolling_update_configuration = RollingUpdate {
        max_unavailable: IntOrString::Int(if surge > 0 { 0 } else { 1 }),
        max_surge: IntOrString::Int(surge),
    };
    g.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(super::surge::ANNOTATION.into(), decision.encode());
}

/// `template` with `launch` applied to its serving container (the first).
fn with_launch(
    template: &PodTemplateSpec,
    launch: &Launch,
    at: usize,
    worker: bool,
) -> PodTemplateSpec {
    let mut t = template.clone();
    if let Some(c) = t.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        launch_container(c, launch, at, worker);
    }
    t
}

fn launch_container(c: &mut Container, launch: &Launch, at: usize, worker: bool) {
    if launch.command.is_some() {
        c.command = launch.command.clone();
    }
    if launch.no_args {
        c.args = None;
    } else if !launch.extra_args.is_empty() {
        let mut args = c.args.take().unwrap_or_default();
        let at = at.min(args.len());
        args.splice(at..at, launch.extra_args.iter().cloned());
        c.args = Some(args);
    }
    if worker {
        c.startup_probe = None;
        c.readiness_probe = None;
        c.liveness_probe = None;
        if let Some(ports) = c.ports.as_mut() {
            ports.retain(|p| p.name.as_deref() != Some(PORT_NAME));
        }
        if c.ports.as_ref().is_some_and(Vec::is_empty) {
            c.ports = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Parallelism, Preset};
    use crate::core::children::tests::valid;
    use crate::core::deployment;

    fn groups(pipeline: i32, preset: Option<Preset>) -> LeaderWorkerSet {
        let mut v = valid();
        v.spec.resources.gpus = 8;
        v.spec.runtime.preset = preset;
        v.spec.parallelism = Some(Parallelism {
            tensor: None,
            pipeline,
        });
        build(&v, &deployment::build(&v, None), None)
    }

    fn server(t: &PodTemplateSpec) -> &Container {
        &t.spec.as_ref().expect("pod").containers[0]
    }

    #[test]
    fn a_group_has_pipeline_pods_each_with_the_gpu_limit() {
        let l = groups(2, Some(Preset::Vllm));
        let t = &l.spec.leader_worker_template;
        assert_eq!(t.size, 2);
        assert_eq!(t.restart_policy, "RecreateGroupOnPodRestart");
        assert_eq!(
            l.spec.replicas, None,
            "the sample autoscales: the count is the autoscaler's"
        );
        assert_eq!(l.spec.startup_policy, "LeaderCreated");
        for tpl in [&t.leader_template, &t.worker_template] {
            let limits = server(tpl)
                .resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .expect("limits");
            assert_eq!(
                limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
                Some("8")
            );
            assert!(
                tpl.spec.as_ref().is_some_and(|s| s.volumes.is_some()),
                "shm"
            );
        }
        assert_eq!(l.kind, "LeaderWorkerSet");
        assert_eq!(l.api_version, "leaderworkerset.x-k8s.io/v1");
    }

    #[test]
    fn the_leader_serves_with_both_sizes_before_the_users_args() {
        let l = groups(2, Some(Preset::Vllm));
        let leader = server(&l.spec.leader_worker_template.leader_template);
        let args = leader.args.clone().expect("args");
        assert_eq!(
            args,
            [
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--port",
                "8000",
                "--tensor-parallel-size",
                "8",
                "--pipeline-parallel-size",
                "2",
                "--distributed-executor-backend",
                "ray",
                "--max-model-len",
                "8192"
            ]
        );
        assert!(leader.readiness_probe.is_some());
        assert_eq!(
            leader.command.as_ref().map(|c| c[0].as_str()),
            Some("/bin/sh")
        );
    }

    #[test]
    fn workers_join_and_serve_no_http() {
        let l = groups(3, Some(Preset::Vllm));
        let w = server(&l.spec.leader_worker_template.worker_template);
        assert_eq!(w.args, None);
        assert!(w.readiness_probe.is_none() && w.startup_probe.is_none());
        assert!(w.liveness_probe.is_none());
        assert_eq!(w.ports, None);
        assert!(w.command.as_ref().is_some_and(|c| c[2].contains("--block")));
    }

    #[test]
    fn sglang_workers_keep_their_flags_with_their_rank() {
        let l = groups(2, Some(Preset::Sglang));
        let w = server(&l.spec.leader_worker_template.worker_template);
        let args = w.args.clone().expect("args");
        assert!(
            args.windows(2)
                .any(|p| p == ["--node-rank", "$(LWS_WORKER_INDEX)"])
        );
        assert_eq!(
            args.last().map(String::as_str),
            Some("8192"),
            "user args last"
        );
        assert_eq!(w.command, None);
    }

    #[test]
    fn groups_replace_one_at_a_time_unless_a_surge_is_decided() {
        let mut v = valid();
        v.spec.parallelism = Some(Parallelism {
            tensor: None,
            pipeline: 2,
        });
        let mut l = build(&v, &deployment::build(&v, None), None);
        let r = &l.spec.rollout_strategy.rolling_update_configuration;
        assert_eq!(
            (r.max_surge.clone(), r.max_unavailable.clone()),
            (IntOrString::Int(0), IntOrString::Int(1))
        );
        let d = crate::core::surge::Decision::surge("t", 2, "surging".into());
        stamp(&mut l, &d);
        let r = &l.spec.rollout_strategy.rolling_update_configuration;
        assert_eq!(
            (r.max_surge.clone(), r.max_unavailable.clone()),
            (IntOrString::Int(2), IntOrString::Int(0))
        );
        assert!(
            l.metadata
                .annotations
                .is_some_and(|a| a.contains_key(crate::core::surge::ANNOTATION))
        );
    }
}
