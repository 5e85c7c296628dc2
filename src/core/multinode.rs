//! How a preset launches one replica over several pods: the leader's and
//! the workers' commands and flags.
//!
//! Tensor parallelism stays inside a pod (its GPUs share NVLink), pipeline
//! parallelism crosses pods (one stage per node), as vLLM and SGLang
//! recommend for models bigger than one node. The LWS controller gives
//! every container `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE` and
//! `LWS_WORKER_INDEX`; the launch reads them, so that nothing about a group
//! (its leader's DNS name, its index) is baked into the template.

use crate::api::Preset;
use crate::api::lws::labels::{GROUP_SIZE_ENV, LEADER_ADDRESS_ENV, WORKER_INDEX_ENV};

/// The port Ray's head listens on in the leader.
pub const RAY_PORT: i32 = 6379;
/// The port SGLang's distributed init listens on in the leader.
pub const SGLANG_DIST_PORT: i32 = 20000;

/// How one pod of a group starts: `command` replaces the image's
/// entrypoint when set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    pub command: Option<Vec<String>>,
    /// Flags added after the preset's single-pod flags.
    pub extra_args: Vec<String>,
    /// The worker takes no arguments at all (its command says everything).
    pub no_args: bool,
}

/// Whether `preset` can run a replica over several pods. TGI cannot: it has
/// no multi-node mode.
pub fn supported(preset: Option<Preset>) -> bool {
    !matches!(preset, Some(Preset::Tgi))
}

/// The leader's launch: it serves HTTP once the whole group has joined.
///
/// vLLM runs its distributed executor on Ray: the leader starts Ray's head,
/// waits until `LWS_GROUP_SIZE` nodes have joined (vLLM would otherwise
/// fail to place its pipeline stages), then execs the OpenAI server with
/// the preset's arguments and `runtime.args` (`"$@"`: no argument is ever
/// parsed by the shell). SGLang's leader is node rank 0 of `--nnodes`.
/// Preset `none` runs the image as it is, in both roles: it reads the LWS
/// variables itself.
pub fn leader(preset: Option<Preset>, tensor: i32, pipeline: i32) -> Launch {
    match preset {
        None | Some(Preset::Vllm) => Launch {
            command: Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "ray start --head --port={RAY_PORT} --disable-usage-stats && \
                     until python3 -c \"import ray, sys; ray.init(address='auto', logging_level='ERROR'); sys.exit(0 if sum(n['Alive'] for n in ray.nodes()) >= int(sys.argv[1]) else 1)\" \"${GROUP_SIZE_ENV}\"; \
                     do echo waiting for the group to join; sleep 5; done && \
                     exec python3 -m vllm.entrypoints.openai.api_server \"$@\""
                ),
                "vllm-leader".into(),
            ]),
            extra_args: vec![
                "--tensor-parallel-size".into(),
                tensor.to_string(),
                "--pipeline-parallel-size".into(),
                pipeline.to_string(),
                "--distributed-executor-backend".into(),
                "ray".into(),
            ],
            no_args: false,
        },
        Some(Preset::Sglang) => Launch {
            command: None,
            extra_args: sglang(tensor, pipeline, "0"),
            no_args: false,
        },
        Some(Preset::Tgi) | Some(Preset::None) => Launch::default(),
    }
}

/// A worker's launch: it joins its leader and serves no HTTP of its own.
pub fn worker(preset: Option<Preset>, tensor: i32, pipeline: i32) -> Launch {
    match preset {
        None | Some(Preset::Vllm) => Launch {
            command: Some(vec![
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "exec ray start --address=\"${LEADER_ADDRESS_ENV}:{RAY_PORT}\" --block --disable-usage-stats"
                ),
            ]),
            extra_args: Vec::new(),
            no_args: true,
        },
        Some(Preset::Sglang) => Launch {
            command: None,
            // The kubelet expands $(VAR) from the container's env, which
            // LWS fills in.
            extra_args: sglang(tensor, pipeline, &format!("$({WORKER_INDEX_ENV})")),
            no_args: false,
        },
        Some(Preset::Tgi) | Some(Preset::None) => Launch::default(),
    }
}

/// SGLang's flags for node `rank` of a group: `--tp` counts every GPU of
/// the group.
fn sglang(tensor: i32, pipeline: i32, rank: &str) -> Vec<String> {
    vec![
        "--tp".into(),
        (tensor * pipeline).to_string(),
        "--nnodes".into(),
        pipeline.to_string(),
        "--node-rank".into(),
        rank.into(),
        "--dist-init-addr".into(),
        format!("$({LEADER_ADDRESS_ENV}):{SGLANG_DIST_PORT}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_leader_waits_for_the_group_then_serves_with_both_sizes() {
        let l = leader(Some(Preset::Vllm), 8, 2);
        let cmd = l.command.expect("a command");
        assert_eq!(cmd[..2], ["/bin/sh".to_string(), "-c".to_string()]);
        assert!(cmd[2].contains("ray start --head --port=6379"));
        assert!(cmd[2].contains("$LWS_GROUP_SIZE"));
        assert!(cmd[2].ends_with("exec python3 -m vllm.entrypoints.openai.api_server \"$@\""));
        assert_eq!(
            l.extra_args,
            [
                "--tensor-parallel-size",
                "8",
                "--pipeline-parallel-size",
                "2",
                "--distributed-executor-backend",
                "ray"
            ]
        );
        // Without a preset (objects from v1alpha1), vLLM too.
        assert_eq!(leader(None, 8, 2), leader(Some(Preset::Vllm), 8, 2));
    }

    #[test]
    fn vllm_workers_join_the_leader_and_take_no_arguments() {
        let w = worker(Some(Preset::Vllm), 8, 2);
        assert!(w.no_args);
        assert!(
            w.command.expect("a command")[2]
                .contains("ray start --address=\"$LWS_LEADER_ADDRESS:6379\" --block")
        );
    }

    #[test]
    fn sglang_counts_every_gpu_of_the_group_and_ranks_workers_by_index() {
        let l = leader(Some(Preset::Sglang), 4, 3);
        assert_eq!(l.command, None);
        assert_eq!(
            l.extra_args,
            [
                "--tp",
                "12",
                "--nnodes",
                "3",
                "--node-rank",
                "0",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):20000"
            ]
        );
        let w = worker(Some(Preset::Sglang), 4, 3);
        assert_eq!(w.extra_args[5], "$(LWS_WORKER_INDEX)");
        assert!(!w.no_args);
    }

    #[test]
    fn tgi_has_no_multi_node_mode_and_none_runs_the_image_as_it_is() {
        assert!(!supported(Some(Preset::Tgi)));
        assert!(supported(Some(Preset::None)) && supported(None));
        assert_eq!(leader(Some(Preset::None), 1, 2), Launch::default());
        assert_eq!(worker(Some(Preset::None), 1, 2), Launch::default());
    }
}
