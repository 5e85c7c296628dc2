//! What a kubelet reports of a scheduled pod, as `../shared/k8s`'s real node
//! (kubelet v1.32, containerd) showed it for the fake model server
//! (`tests/fake-model-server`), so that the real-pod scenarios reach the same
//! verdicts here as there.
//!
//! Pods that carry the fake server's knobs (`FAKE_LOAD_SECONDS`,
//! `FAKE_CRASH_CODE`, `FAKE_CRASH_AFTER_SECONDS`) or its image with flags its
//! program refuses (exit code 2, from the server's own parser), and images
//! that cannot be pulled follow the real node's timeline, measured there:
//! - the container runs 0.7 s after the pod is placed (ContainerCreating
//!   before);
//! - a model that loads for L s with a startup probe every P s is started
//!   and Ready at the first probe after L: P·⌈L/P⌉ s after the start;
//! - a crash: `terminated` (reason Error, the exit code) for 1 s, one
//!   restart at once, a second exit; from then on each exit stays
//!   `terminated` until the kubelet's next sync 14.5 s later, then
//!   CrashLoopBackOff ("back-off 10s restarting failed container=server
//!   pod=NAME_NAMESPACE(UID)", doubling to 300 s) until the back-off ends,
//!   then the next run;
//! - a failed pull: ErrImagePull 0.8 s after placement, then every 14 s
//!   ImagePullBackOff and ErrImagePull in turn, in containerd's words.
//!
//! Every other image runs and is Ready at once (no probe is run), which
//! keeps the rest of the suite fast, with the same five conditions.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

/// When the container first runs, after the pod is placed.
const CREATE: f64 = 0.7;
/// When a failing pull is first reported.
const PULL: f64 = 0.8;
/// The kubelet's sync period as the real node showed it: how long an exit
/// stays `terminated` before CrashLoopBackOff, and a pull error before the
/// next one.
const SYNC: f64 = 14.5;
const PULL_CYCLE: f64 = 14.0;

/// The fake model server's knobs, read from the pod's first container.
#[derive(Debug, Default, PartialEq)]
pub struct Knobs {
    pub load: f64,
    pub crash: Option<(i64, f64)>,
}

impl Knobs {
    fn any(&self) -> bool {
        self.load > 0.0 || self.crash.is_some()
    }
}

/// The knobs of `pod`; a fake model server image given flags its program
/// refuses exits at once with code 2, as the process does.
pub fn knobs(pod: &Pod) -> Knobs {
    let container = pod.spec.as_ref().and_then(|s| s.containers.first());
    let program = container
        .and_then(|c| c.image.as_deref())
        .and_then(|i| i.strip_prefix("modelservice.dev/fake-model-server:"))
        .and_then(fake_model_server::program_of_tag);
    if let Some(program) = program {
        let argv: Vec<String> = std::iter::once(program.to_string())
            .chain(container.and_then(|c| c.args.clone()).unwrap_or_default())
            .collect();
        let flavor = fake_model_server::flavor::Flavor::from_program(program);
        if let Err(e) = fake_model_server::flavor::parse(flavor, &argv) {
            return Knobs {
                load: 0.0,
                crash: Some((i64::from(e.exit_code()), 0.0)),
            };
        }
    }
    let env: Vec<(String, String)> = container
        .into_iter()
        .flat_map(|c| c.env.iter().flatten())
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let secs = |k: &str| get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Knobs {
        load: secs("FAKE_LOAD_SECONDS"),
        crash: get("FAKE_CRASH_CODE")
            .and_then(|c| c.parse::<i64>().ok())
            .map(|c| (c, secs("FAKE_CRASH_AFTER_SECONDS"))),
    }
}

pub(crate) fn at(start: Timestamp, seconds: f64) -> String {
    let t = start
        .checked_add(SignedDuration::from_secs_f64(seconds))
        .unwrap_or(start);
    // The API server keeps whole seconds.
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// The conditions of a placed pod: the five a real kubelet writes.
pub(crate) fn conditions(start: Timestamp, ready_since: Option<f64>) -> Value {
    let placed = at(start, 0.0);
    let ready = match ready_since {
        Some(s) => json!({"status": "True", "lastTransitionTime": at(start, s)}),
        None => json!({"status": "False", "reason": "ContainersNotReady",
            "message": "containers with unready status: [server]", "lastTransitionTime": placed}),
    };
    let with = |type_: &str| {
        let mut c = ready.clone();
        c["type"] = json!(type_);
        c
    };
    json!([
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": at(start, CREATE)},
        {"type": "Initialized", "status": "True", "lastTransitionTime": placed},
        with("Ready"),
        with("ContainersReady"),
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": placed},
    ])
}

/// The first probe that finds a model loaded for `load` s ready: startup
/// probe first, then readiness, at their periods (10 s when unset).
fn ready_after(pod: &Pod, load: f64) -> f64 {
    if load <= 0.0 {
        return 0.0;
    }
    let c = pod.spec.as_ref().and_then(|s| s.containers.first());
    let period = c
        .and_then(|c| c.startup_probe.as_ref().or(c.readiness_probe.as_ref()))
        .map(|p| f64::from(p.period_seconds.unwrap_or(10)));
    match period {
        Some(p) => (load / p).ceil() * p,
        None => load,
    }
}

/// One container state at `t` s after placement of a container that exits
/// with `code` `after` s into each run.
fn crash_state(t: f64, code: i64, after: f64, start: Timestamp, pod: &str) -> (i64, Value, Value) {
    let exit = |run_start: f64| {
        json!({"terminated": {"exitCode": code, "reason": "Error",
            "startedAt": at(start, run_start), "finishedAt": at(start, run_start + after)}})
    };
    let running = |run_start: f64| json!({"running": {"startedAt": at(start, run_start)}});
    // Run 0, its exit, then run 1 at once.
    let first_exit = CREATE + after;
    if t < first_exit {
        return (0, running(CREATE), json!({}));
    }
    let run1 = first_exit + 1.0;
    if t < run1 {
        return (0, exit(CREATE), json!({}));
    }
    let mut crash = run1 + after;
    if t < crash {
        return (1, running(run1), exit(CREATE));
    }
    let (mut k, mut run_start, mut previous) = (1_i64, run1, exit(CREATE));
    loop {
        let back_off = (10.0 * 2f64.powi((k - 1).min(5) as i32)).min(300.0);
        let next = crash + back_off.max(SYNC + 0.5);
        if t < crash + SYNC {
            return (k, exit(run_start), previous);
        }
        if t < next {
            let waiting = json!({"waiting": {"reason": "CrashLoopBackOff",
                "message": format!("back-off {back_off}s restarting failed container=server pod={pod}")}});
            return (k, waiting, exit(run_start));
        }
        previous = exit(run_start);
        (k, run_start) = (k + 1, next);
        crash = next + after;
        if t < crash {
            return (k, running(run_start), previous);
        }
    }
}

fn pull_message(image: &str) -> String {
    format!(
        "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
    )
}

/// The status of a pod placed `t` s after `start`, or `None` when this
/// module does not play it (an ordinary image: the simulator's shortcut).
pub fn status(pod: &Pod, image: &str, pull_fails: bool, start: Timestamp, t: f64) -> Option<Value> {
    let k = knobs(pod);
    if !pull_fails && !k.any() {
        return None;
    }
    let meta = &pod.metadata;
    let who = format!(
        "{}_{}({})",
        meta.name.as_deref().unwrap_or_default(),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default()
    );
    let container = |restarts: i64, ready: bool, state: Value, last: Value| {
        json!([{"name": "server", "image": image, "imageID": "", "ready": ready, "started": ready,
            "restartCount": restarts, "state": state, "lastState": last}])
    };
    let start_time = at(start, 0.0);
    let creating = || {
        json!({"phase": "Pending", "startTime": start_time, "conditions": conditions(start, None),
            "containerStatuses": container(0, false, json!({"waiting": {"reason": "ContainerCreating"}}), json!({}))})
    };
    if pull_fails {
        if t < PULL {
            return Some(creating());
        }
        let message = pull_message(image);
        let (reason, message) = if ((t - PULL) / PULL_CYCLE) as i64 % 2 == 0 {
            ("ErrImagePull", message)
        } else {
            (
                "ImagePullBackOff",
                format!("Back-off pulling image \"{image}\": ErrImagePull: {message}"),
            )
        };
        return Some(
            json!({"phase": "Pending", "startTime": start_time, "conditions": conditions(start, None),
            "containerStatuses": container(0, false,
                json!({"waiting": {"reason": reason, "message": message}}), json!({}))}),
        );
    }
    if t < CREATE {
        return Some(creating());
    }
    let (restarts, state, last, ready_since) = match k.crash {
        Some((code, after)) => {
            let (r, s, l) = crash_state(t, code, after, start, &who);
            (r, s, l, None)
        }
        None => {
            let ready = CREATE + ready_after(pod, k.load);
            let since = (t >= ready).then_some(ready);
            (
                0,
                json!({"running": {"startedAt": at(start, CREATE)}}),
                json!({}),
                since,
            )
        }
    };
    Some(json!({"phase": "Running", "startTime": start_time,
        "conditions": conditions(start, ready_since),
        "containerStatuses": container(restarts, ready_since.is_some(), state, last)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(env: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "server", "env": env,
                "startupProbe": {"periodSeconds": 10}}]}}),
        )
        .expect("pod")
    }

    fn at_t(p: &Pod, t: f64) -> Value {
        status(p, "img", false, Timestamp::UNIX_EPOCH, t).expect("played")
    }

    #[test]
    fn a_slow_model_is_ready_at_the_first_probe_after_its_load() {
        let p = pod(json!([{"name": "FAKE_LOAD_SECONDS", "value": "3"}]));
        assert_eq!(at_t(&p, 0.5)["phase"], "Pending");
        assert_eq!(at_t(&p, 5.0)["containerStatuses"][0]["ready"], false);
        let s = at_t(&p, 10.8);
        assert_eq!(s["containerStatuses"][0]["ready"], true);
        assert_eq!(s["conditions"][2]["type"], "Ready");
        assert_eq!(s["conditions"][2]["status"], "True");
    }

    #[test]
    fn a_crash_follows_the_real_nodes_timeline() {
        let p = pod(json!([{"name": "FAKE_CRASH_CODE", "value": "3"},
            {"name": "FAKE_CRASH_AFTER_SECONDS", "value": "1"}]));
        let seen = |t: f64| {
            let s = at_t(&p, t);
            let c = &s["containerStatuses"][0];
            let state = c["state"]
                .as_object()
                .and_then(|o| o.keys().next().cloned())
                .unwrap_or_default();
            (c["restartCount"].as_i64().unwrap_or(-1), state)
        };
        let timeline: Vec<(i64, String)> = [1.0, 2.0, 3.0, 4.0, 18.5, 19.0, 20.0, 35.0]
            .iter()
            .map(|t| seen(*t))
            .collect();
        let s = |r: i64, st: &str| (r, st.to_string());
        assert_eq!(
            timeline,
            [
                s(0, "running"),
                s(0, "terminated"),
                s(1, "running"),
                s(1, "terminated"),
                s(1, "waiting"),
                s(2, "running"),
                s(2, "terminated"),
                s(2, "waiting"),
            ]
        );
        let w = at_t(&p, 18.5);
        assert_eq!(
            w["containerStatuses"][0]["state"]["waiting"]["message"],
            "back-off 10s restarting failed container=server pod=p_ns(u)"
        );
        assert_eq!(
            w["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            3
        );
    }

    #[test]
    fn a_failed_pull_alternates_as_the_kubelet_retries() {
        let p = pod(json!([]));
        let reason = |t: f64| {
            status(&p, "x:does-not-exist", true, Timestamp::UNIX_EPOCH, t).expect("played")
                ["containerStatuses"][0]["state"]["waiting"]["reason"]
                .clone()
        };
        assert_eq!(reason(0.1), "ContainerCreating");
        assert_eq!(reason(1.0), "ErrImagePull");
        assert_eq!(reason(16.0), "ImagePullBackOff");
        assert_eq!(reason(30.0), "ErrImagePull");
    }

    #[test]
    fn the_fake_servers_image_refuses_what_its_program_refuses() {
        let with = |image: &str, args: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "server", "image": image, "args": args}]}}))
            .expect("pod")
        };
        let image = "modelservice.dev/fake-model-server:vllm";
        assert_eq!(
            knobs(&with(image, json!(["--model-id", "m"]))).crash,
            Some((2, 0.0))
        );
        assert_eq!(
            knobs(&with(image, json!(["--model", "m"]))),
            Knobs::default()
        );
        let tgi = "modelservice.dev/fake-model-server:tgi";
        assert_eq!(
            knobs(&with(tgi, json!(["--model-id", "m"]))),
            Knobs::default()
        );
    }

    #[test]
    fn an_ordinary_image_is_left_to_the_shortcut() {
        assert_eq!(
            status(&pod(json!([])), "vllm", false, Timestamp::UNIX_EPOCH, 1.0),
            None
        );
    }
}
