//! The weights cache (issue 30): a pinned `model.source` is downloaded once
//! into the claim `<name>-weights` by a Job, status shows the download's
//! progress, the pods start only from complete weights, and a new revision
//! downloads beside the one that keeps serving.
//!
//! Who plays the Job:
//! - on the real node (`MODELSERVICE_E2E_REAL_NODE=1`) nobody: the Job runs
//!   the operator's own image (`tests/real-node/load-images`) against a
//!   fake Hugging Face hub in this process (`fake_apiserver::weights_server`),
//!   writes a hostPath volume, and the fake model server reads the weights
//!   from it;
//! - on the fake API server the test: it makes the Job's pod, writes its
//!   log (what `fetch` prints) and its end, and the Job's status;
//! - on podsim, where containers never run, the test writes the Job's
//!   status; its pod shows no log, so progress is not looked at there.

use std::net::SocketAddr;
use std::time::Duration;

use fake_apiserver::LOG_ANNOTATION;
use fake_apiserver::weights_server::{Bucket, Repo, WeightsServer};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use modelservice_operator::api::ModelService;
use modelservice_operator::core::labels::INSTANCE_LABEL;
use serde_json::{Value, json};

use crate::harness::{CONVERGE, Env, real_cluster, wait_for};
use crate::observe::*;
use crate::real_pods::real_node;

const MODEL: &str = "acme/tiny-weights";
const MIB: u64 = 1024 * 1024;
/// The image `tests/real-node/load-images` makes of the operator binary.
const OPERATOR_IMAGE: &str = "modelservice.dev/modelservice-operator:e2e";
const REAL_NODE_LABEL: &str = "realnode/real";
/// How long a real download of the test model may take (a few seconds at
/// the throttled rate, plus pulls and binds).
const DOWNLOAD: Duration = Duration::from_secs(120);

pub(crate) fn source(revision: &str) -> String {
    format!("hf://{MODEL}@{revision}")
}

/// The model both revisions serve: three files, a few hundred MB on the
/// real node (`big`), a few MB elsewhere (nothing reads them there).
fn repos(big: bool) -> Vec<Repo> {
    let shard = if big { 120 * MIB } else { 2 * MIB };
    ["rev1", "rev2"]
        .iter()
        .map(|rev| {
            Repo::new(
                MODEL,
                rev,
                &[
                    ("config.json", 2048),
                    ("model-00001-of-00002.safetensors", shard),
                    ("model-00002-of-00002.safetensors", shard),
                ],
            )
        })
        .collect()
}

/// One test's world: the hub, the volume, the operator.
struct World {
    env: Env,
    hub: WeightsServer,
    /// The StorageClass name of this test's volume, which only its claim asks for.
    class: String,
    _op: crate::harness::Operator,
}

impl World {
    async fn new(capacity: &str) -> World {
        let env = Env::new().await;
        let bind: SocketAddr = if real_node() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([127, 0, 0, 1], 0).into()
        };
        let hub = WeightsServer::start(bind, repos(real_node()))
            .await
            .expect("the weights server");
        let class = format!("weights-{}", env.namespace);
        if real_cluster() {
            volume(&env, &class, capacity).await;
        }
        // Where the fetch pods find the hub, as a mirror would be named:
        // HF_ENDPOINT, from the credentials Secret.
        let endpoint = if real_node() {
            let port = hub.url().rsplit(':').next().unwrap_or_default().to_string();
            format!("http://{}:{port}", node_ip(&env).await)
        } else {
            hub.url()
        };
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "hub"},
            "stringData": {"HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_e2e"}}))
        .expect("a Secret");
        env.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .expect("the Secret");
        let op = env
            .operator()
            .arg(format!("--fetch-image={OPERATOR_IMAGE}"))
            .start();
        World {
            env,
            hub,
            class,
            _op: op,
        }
    }

    fn spec(&self, revision: &str, size: &str) -> Value {
        let image = if real_node() {
            "modelservice.dev/fake-model-server:vllm".to_string()
        } else {
            serving_image()
        };
        let mut s = json!({
            "model": {"name": MODEL,
                "source": {"uri": source(revision), "credentialsSecret": "hub"},
                "cache": {"size": size, "storageClassName": self.class}},
            "runtime": {"image": image, "preset": "vllm"},
            "resources": {"gpus": 0}, "replicas": 1});
        if real_node() {
            s["scheduling"] = json!({"nodeSelector": {REAL_NODE_LABEL: "true"},
                "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]});
        }
        s
    }

    async fn finish(self) {
        if real_cluster() {
            let _ = Api::<PersistentVolume>::all(self.env.client.clone())
                .delete(&self.class, &DeleteParams::default())
                .await;
            if real_node() {
                let _ = std::fs::remove_dir_all(host_dir(&self.class));
            }
        }
        self.env.finish().await;
    }
}

/// A hostPath volume of `capacity` that only this test's claim binds.
async fn volume(env: &Env, class: &str, capacity: &str) {
    if real_node() {
        // The fetch pods run as a non-root user, and fsGroup does not
        // reach a hostPath volume: the directory is open to them.
        use std::os::unix::fs::PermissionsExt;
        let dir = host_dir(class);
        std::fs::create_dir_all(&dir).expect("the volume's directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .expect("open to the fetch user");
    }
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": class},
        "spec": {"capacity": {"storage": capacity}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": host_dir(class), "type": "DirectoryOrCreate"}}}))
    .expect("a PersistentVolume");
    Api::<PersistentVolume>::all(env.client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("the PersistentVolume");
}

fn host_dir(class: &str) -> String {
    format!("/tmp/ms-e2e-weights/{class}")
}

async fn node_ip(env: &Env) -> String {
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get("realnode-0")
        .await
        .expect("the real node");
    node.status
        .and_then(|s| s.addresses)
        .into_iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
        .expect("the node's InternalIP")
}

/// The download Jobs of `name`.
async fn jobs_of(env: &Env, name: &str) -> Vec<Job> {
    env.api::<Job>()
        .list(&ListParams::default().labels(&format!("{INSTANCE_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

pub(crate) async fn the_job(env: &Env, name: &str, revision: &str) -> Job {
    the_job_of(env, name, &source(revision)).await
}

/// The download Job of `name` that fetches `uri`.
async fn the_job_of(env: &Env, name: &str, uri: &str) -> Job {
    wait_for(&format!("the download Job of {uri}"), CONVERGE, || async {
        jobs_of(env, name)
            .await
            .into_iter()
            .find(|j| serde_json::to_string(&j.spec).is_ok_and(|s| s.contains(uri)))
    })
    .await
}

pub(crate) fn job_name(j: &Job) -> String {
    j.metadata.name.clone().unwrap_or_default()
}

fn weights(ms: &ModelService) -> Value {
    serde_json::to_value(ms.status.as_ref().and_then(|s| s.model.as_ref())).unwrap_or_default()
}

fn ready(ms: &ModelService) -> (String, String) {
    condition(ms, "Ready").unwrap_or_default()
}

/// Plays the Job's pod on the fake: running, with `log` as what it printed.
pub(crate) async fn play_pod(env: &Env, job: &str, log: &str) {
    let pods = env.api::<Pod>();
    let name = format!("{job}-play");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name,
            "labels": {"batch.kubernetes.io/job-name": job, "job-name": job},
            "annotations": {LOG_ANNOTATION: log}},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "fetch", "image": OPERATOR_IMAGE}]}}))
    .expect("a pod");
    if pods.get_opt(&name).await.ok().flatten().is_none() {
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("the Job's pod");
    } else {
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {LOG_ANNOTATION: log}}})),
        )
        .await
        .expect("its log");
    }
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("running");
}

/// Plays the end of the Job: its pod's termination message (on the fake)
/// and the Job's conditions, as the Job controller writes them.
pub(crate) async fn play_end(env: &Env, job: &str, outcome: Value, failed: bool) {
    if !real_cluster() {
        play_pod(env, job, "").await;
        let terminated = json!({"exitCode": if failed { 3 } else { 0 },
            "reason": if failed { "Error" } else { "Completed" },
            "message": outcome.to_string()});
        env.api::<Pod>()
            .patch_status(
                &format!("{job}-play"),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": if failed { "Failed" } else { "Succeeded" },
                    "containerStatuses": [{"name": "fetch", "image": OPERATOR_IMAGE, "imageID": "",
                        "ready": false, "restartCount": 0, "state": {"terminated": terminated}}]}}),
                ),
            )
            .await
            .expect("the pod's end");
    }
    if real_cluster() {
        // What the Job controller writes first, which the end must keep.
        wait_for("the Job started", CONVERGE, || async {
            let j = env.api::<Job>().get(job).await.ok()?;
            j.status?.start_time.map(|_| ())
        })
        .await;
    }
    // Seconds, as the API server's times are.
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let conditions = if failed {
        json!([{"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "lastTransitionTime": now},
               {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "lastTransitionTime": now}])
    } else {
        json!([{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
               {"type": "Complete", "status": "True", "lastTransitionTime": now}])
    };
    let mut status = json!({"active": 0, "ready": 0, "conditions": conditions});
    if !real_cluster() {
        status["startTime"] = json!(now);
    }
    if failed {
        status["failed"] = json!(1);
    } else {
        status["succeeded"] = json!(1);
        status["completionTime"] = json!(now);
    }
    env.api::<Job>()
        .patch_status(
            job,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .expect("the Job's status");
}

/// Waits until `revision`'s download is complete: for real on the real
/// node, played elsewhere.
async fn download(w: &World, name: &str, revision: &str) {
    let job = the_job(&w.env, name, revision).await;
    if !real_node() {
        let total = 2048 + 4 * MIB;
        play_end(
            &w.env,
            &job_name(&job),
            json!({"result": "Complete", "totalBytes": total, "files": 3, "downloadedBytes": total}),
            false,
        )
        .await;
    }
    wait_for(&format!("{revision} in the cache"), DOWNLOAD, || async {
        let ms = get_ms(&w.env, name).await?;
        (weights(&ms)["phase"] == "Complete" && weights(&ms)["source"] == source(revision))
            .then_some(())
    })
    .await;
}

fn template_source(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<String> {
    d.spec
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get("modelservice.dev/weights-source")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_is_downloaded_once_and_every_pod_starts_from_it() {
    let w = World::new("1Gi").await;
    let (env, name) = (&w.env, "cached");
    if real_node() {
        // Slow enough to watch: about 10 s for the model.
        w.hub.set_rate_limit(24 * MIB);
    }
    env.apply_ms_v1(name, w.spec("rev1", "1Gi")).await;

    // The claim and the Job; no pods until the weights are in.
    let claim = wait_for("the weights claim", CONVERGE, || async {
        env.api::<PersistentVolumeClaim>()
            .get_opt(&format!("{name}-weights"))
            .await
            .ok()
            .flatten()
    })
    .await;
    let claim_spec = serde_json::to_value(&claim.spec).unwrap_or_default();
    assert_eq!(claim_spec["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(claim_spec["accessModes"], json!(["ReadWriteOnce"]));
    let job = the_job(env, name, "rev1").await;
    let pod_spec = serde_json::to_value(&job.spec).unwrap_or_default()["template"]["spec"].clone();
    let c = &pod_spec["containers"][0];
    assert_eq!(c["image"], OPERATOR_IMAGE);
    assert_eq!(c["args"][0], "fetch");
    assert_eq!(c["envFrom"][0]["secretRef"]["name"], "hub");
    assert_eq!(pod_spec["automountServiceAccountToken"], false);
    let ms = wait_ms(env, name, "DownloadingWeights", CONVERGE, |ms| {
        ready(ms) == ("False".into(), "DownloadingWeights".into())
    })
    .await;
    assert!(
        deployment(env, name).await.is_none(),
        "no pods before the weights"
    );
    assert!(message(&ms, "Ready").contains("the pods start once it is complete"));

    // Progress, with a rate and a time left, in status.model and in Ready.
    if real_node() || !real_cluster() {
        if !real_cluster() {
            let line = json!({"progress": {"doneBytes": 2 * MIB, "totalBytes": 4 * MIB,
                "bytesPerSecond": MIB, "files": 1, "totalFiles": 3}});
            play_pod(env, &job_name(&job), &format!("{line}\n")).await;
        }
        let ms = wait_for("the download's progress", DOWNLOAD, || async {
            let ms = get_ms(env, name).await?;
            let m = weights(&ms);
            (m["phase"] == "Downloading"
                && m["doneBytes"].as_u64().unwrap_or(0) > 0
                && m["etaSeconds"].is_u64())
            .then_some(ms)
        })
        .await;
        let m = weights(&ms);
        let progress = m["progress"].as_str().unwrap_or_default().to_string();
        assert!(
            progress.contains("% of ") && progress.contains("/s, "),
            "{m}"
        );
        assert!(
            message(&ms, "Ready").contains(&progress),
            "{}",
            message(&ms, "Ready")
        );
    }

    download(&w, name, "rev1").await;
    let ms = wait_ready(env, name).await;
    assert_eq!(weights(&ms)["serving"], source("rev1"));
    let d = deployment(env, name).await.expect("the Deployment");
    let pod = serde_json::to_value(&d.spec).unwrap_or_default()["template"]["spec"].clone();
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"],
        json!({"claimName": format!("{name}-weights"), "readOnly": true})
    );
    let server = &pod["containers"][0];
    assert_eq!(server["volumeMounts"][0]["mountPath"], "/models");
    assert_eq!(server["volumeMounts"][0]["readOnly"], true);
    let args: Vec<&str> = server["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(
        args[1].starts_with("/models/tiny-weights-rev1-"),
        "{args:?}"
    );
    assert!(
        args.windows(2).any(|w| w == ["--served-model-name", MODEL]),
        "{args:?}"
    );
    let served_bytes = w.hub.bytes_served();

    // A second replica, then a restart of a pod: no download.
    let mut two = w.spec("rev1", "1Gi");
    two["replicas"] = json!(2);
    env.apply_ms_v1(name, two).await;
    wait_ms(env, name, "two ready replicas", CONVERGE, |ms| {
        ms.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    if real_node() {
        restart_a_pod(env, name).await;
    }
    assert_eq!(
        w.hub.bytes_served(),
        served_bytes,
        "nothing downloaded again"
    );
    assert_eq!(
        jobs_of(env, name).await.len(),
        1,
        "one download for the source"
    );
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_downloads_beside_the_one_that_keeps_serving() {
    let w = World::new("1Gi").await;
    let (env, name) = (&w.env, "revised");
    env.apply_ms_v1(name, w.spec("rev1", "1Gi")).await;
    download(&w, name, "rev1").await;
    wait_ready(env, name).await;

    if real_node() {
        w.hub.set_rate_limit(8 * MIB);
    }
    env.apply_ms_v1(name, w.spec("rev2", "1Gi")).await;
    let job = the_job(env, name, "rev2").await;
    let ms = wait_for("rev2 downloading", CONVERGE, || async {
        let ms = get_ms(env, name).await?;
        (weights(&ms)["source"] == source("rev2") && ready(&ms).1 == "DownloadingWeights")
            .then_some(ms)
    })
    .await;
    assert!(
        message(&ms, "Ready").contains("the previous weights keep serving"),
        "{}",
        message(&ms, "Ready")
    );
    assert_eq!(weights(&ms)["serving"], source("rev1"));
    let d = deployment(env, name).await.expect("the Deployment");
    assert_eq!(
        template_source(&d).as_deref(),
        Some(source("rev1").as_str())
    );
    assert_eq!(
        d.status.and_then(|s| s.ready_replicas),
        Some(1),
        "rev1 still serves"
    );
    assert_eq!(jobs_of(env, name).await.len(), 1, "rev1's Job is gone");

    if real_node() {
        w.hub.set_rate_limit(0);
    }
    download(&w, name, "rev2").await;
    let ms = wait_for("rev2 serving", DOWNLOAD, || async {
        let ms = get_ms(env, name).await?;
        (ready(&ms).0 == "True" && weights(&ms)["serving"] == source("rev2")).then_some(ms)
    })
    .await;
    let d = deployment(env, name).await.expect("the Deployment");
    assert_eq!(
        template_source(&d).as_deref(),
        Some(source("rev2").as_str())
    );
    assert_eq!(job_name(&jobs_of(env, name).await[0]), job_name(&job));
    drop(ms);
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_too_small_for_the_model_is_named() {
    if real_cluster() && !real_node() {
        eprintln!(
            "SKIPPED a_claim_too_small_for_the_model_is_named: podsim pods print no termination message"
        );
        return;
    }
    let w = World::new("16Mi").await;
    let (env, name) = (&w.env, "small");
    env.apply_ms_v1(name, w.spec("rev1", "16Mi")).await;
    let job = the_job(env, name, "rev1").await;
    if !real_node() {
        play_end(
            env,
            &job_name(&job),
            json!({"result": "VolumeTooSmall", "neededBytes": 240 * MIB, "availableBytes": 16 * MIB,
                "message": "the model needs 240.0 MiB (240.0 MiB left to download), the claim has 16.0 MiB free of 16.0 MiB"}),
            true,
        )
        .await;
    }
    let ms = wait_for("the full claim named", DOWNLOAD, || async {
        let ms = get_ms(env, name).await?;
        let degraded = condition(&ms, "Degraded")?;
        (degraded == ("True".into(), "WeightsVolumeTooSmall".into())).then_some(ms)
    })
    .await;
    let m = message(&ms, "Degraded");
    assert!(
        m.contains("needs 240.0 MiB") && m.contains("16.0 MiB free"),
        "{m}"
    );
    assert_eq!(ready(&ms).1, "WeightsVolumeTooSmall");
    assert_eq!(weights(&ms)["phase"], "Failed");
    assert!(deployment(env, name).await.is_none());
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_download_resumes_where_it_was() {
    if !real_node() {
        eprintln!("SKIPPED a_killed_download_resumes_where_it_was: it kills a real container");
        return;
    }
    let w = World::new("1Gi").await;
    let (env, name) = (&w.env, "resumed");
    // 30 s for the model: the kill comes well before its end, though
    // status is read every 5 s.
    w.hub.set_rate_limit(8 * MIB);
    env.apply_ms_v1(name, w.spec("rev1", "1Gi")).await;
    let job = job_name(&the_job(env, name, "rev1").await);
    let total = 2048 + 240 * MIB;
    // Early in the first of the two 120 MiB shards, the pod is killed. The
    // status trails the download by up to a log read (5 s, 40 MiB here),
    // so the mark must sit well inside the shard: at a third of the model
    // the shard could already be whole when the kill came (CI saw it once),
    // and the next pod had nothing to resume with a Range.
    wait_for("an eighth downloaded", DOWNLOAD, || async {
        let ms = get_ms(env, name).await?;
        (weights(&ms)["doneBytes"].as_u64()? > total / 8).then_some(())
    })
    .await;
    let pods = env.api::<Pod>();
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let killed: Vec<String> = pods
        .list(&lp)
        .await
        .expect("the Job's pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for n in &killed {
        pods.delete(n, &DeleteParams::default().grace_period(0))
            .await
            .expect("killed");
    }
    // Still throttled: the killed pod must not finish in its last moments.
    wait_for("the killed pod gone", CONVERGE, || async {
        for n in &killed {
            if pods.get_opt(n).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    download(&w, name, "rev1").await;
    wait_ready(env, name).await;
    let served = w.hub.bytes_served();
    assert!(
        served < total + total / 2,
        "resumed, not restarted: {served} bytes served for a model of {total}"
    );
    assert!(
        w.hub.requests().iter().any(|r| r.range.is_some()),
        "a Range request resumed the file: {:?}",
        w.hub.requests()
    );
    w.finish().await;
}

/// Deletes one serving pod of `name` (of two) and waits until its
/// replacement is ready; how long that took.
async fn restart_a_pod(env: &Env, name: &str) -> Duration {
    let pods = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "{INSTANCE_LABEL}={name},app.kubernetes.io/name=modelservice"
        )))
        .await
        .expect("pods");
    let victim = pods.items[0].metadata.name.clone().unwrap_or_default();
    env.api::<Pod>()
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("a restart");
    time_to_ready(env, name, 2, Some(&victim)).await
}

/// Ready replicas of `name` once the pod `gone` (if any) has left.
async fn time_to_ready(env: &Env, name: &str, replicas: i32, gone: Option<&str>) -> Duration {
    let started = std::time::Instant::now();
    wait_for(&format!("{name}: {replicas} ready"), DOWNLOAD, || async {
        if let Some(g) = gone
            && env.api::<Pod>().get_opt(g).await.ok()?.is_some()
        {
            return None;
        }
        let ms = get_ms(env, name).await?;
        (ms.status.as_ref()?.ready_replicas == Some(replicas) && ready(&ms).0 == "True")
            .then_some(())
    })
    .await;
    started.elapsed()
}

/// The cold starts the cache is for, with and without it: the first pod,
/// a second replica, and a pod's restart. Asserts what each one downloads
/// (three times the model without the cache, once with it) and prints the
/// times for BENCHMARKS.md ("weights cache"); no time is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_starts_download_once_with_the_cache_and_every_time_without() {
    if !real_node() {
        eprintln!(
            "SKIPPED cold_starts_download_once_with_the_cache_and_every_time_without: it times real pods"
        );
        return;
    }
    let w = World::new("1Gi").await;
    let env = &w.env;
    let model = 2048 + 240 * MIB;
    // A download that outlasts a few startup-probe periods (10 s), as a
    // large model's does: 240 MiB at 8 MiB/s is 30 s, as 140 GB of a 70B
    // model is about 6 min at 400 MB/s.
    w.hub.set_rate_limit(8 * MIB);
    let port = w
        .hub
        .url()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let hub = format!("http://{}:{port}", node_ip(env).await);
    let files: Vec<String> = repos(true)[0]
        .files
        .iter()
        .map(|(p, _)| format!("{hub}/{MODEL}/resolve/rev1/{p}"))
        .collect();

    let mut figures = Vec::new();
    for cached in [false, true] {
        let name = if cached {
            "with-cache"
        } else {
            "without-cache"
        };
        let mut spec = w.spec("rev1", "1Gi");
        if !cached {
            spec["model"] = json!({"name": MODEL});
            spec["runtime"]["env"] = json!([{"name": "FAKE_DOWNLOAD", "value": files.join(",")}]);
        }
        w.hub.reset_counts();
        let started = std::time::Instant::now();
        env.apply_ms_v1(name, spec.clone()).await;
        let first = time_to_ready(env, name, 1, None)
            .await
            .max(started.elapsed());
        spec["replicas"] = json!(2);
        env.apply_ms_v1(name, spec).await;
        let second = time_to_ready(env, name, 2, None).await;
        let restart = restart_a_pod(env, name).await;
        let served = w.hub.bytes_served();
        let starts = if cached { 1 } else { 3 };
        assert!(
            served >= starts * model && served < (starts + 1) * model,
            "{name}: {served} bytes served, {starts} downloads of {model} expected"
        );
        figures.push(format!(
            "{name}: first replica {:.1} s, second replica {:.1} s, restart {:.1} s, {} MiB from the hub",
            first.as_secs_f64(),
            second.as_secs_f64(),
            restart.as_secs_f64(),
            served / MIB
        ));
        env.ms_api()
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleted");
    }
    for f in figures {
        println!("WEIGHTS-BENCH {f}");
    }
    w.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_prefix_is_downloaded_with_signed_requests() {
    let w = World::new("1Gi").await;
    let (env, name) = (&w.env, "from-s3");
    let bind: SocketAddr = if real_node() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([127, 0, 0, 1], 0).into()
    };
    let objects = [
        ("llama/v1/config.json", 2048),
        ("llama/v1/model.safetensors", 8 * MIB),
        ("llama/v2/model.safetensors", MIB),
    ];
    let store = WeightsServer::start_with_buckets(bind, vec![Bucket::new("models", &objects)])
        .await
        .expect("the object store");
    // Only requests signed with this key and secret are answered.
    store.require_s3_key(Some("AKIDE2E"));
    store.verify_s3_signatures(Some("e2e-secret"));
    let port = store
        .url()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let endpoint = if real_node() {
        format!("http://{}:{port}", node_ip(env).await)
    } else {
        store.url()
    };
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "store"},
        "stringData": {"AWS_ACCESS_KEY_ID": "AKIDE2E", "AWS_SECRET_ACCESS_KEY": "e2e-secret",
            "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": endpoint}}))
    .expect("a Secret");
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret");
    let uri = "s3://models/llama/v1";
    let mut spec = w.spec("rev1", "1Gi");
    spec["model"]["source"] = json!({"uri": uri, "credentialsSecret": "store"});
    env.apply_ms_v1(name, spec).await;

    let job = the_job_of(env, name, uri).await;
    let c = serde_json::to_value(&job.spec).unwrap_or_default()["template"]["spec"]["containers"]
        [0]
    .clone();
    assert_eq!(c["envFrom"][0]["secretRef"]["name"], "store");
    if !real_node() {
        let total = 2048 + 8 * MIB;
        play_end(
            env,
            &job_name(&job),
            json!({"result": "Complete", "totalBytes": total, "files": 2, "downloadedBytes": total}),
            false,
        )
        .await;
    }
    let ms = wait_for("the prefix in the cache and serving", DOWNLOAD, || async {
        let ms = get_ms(env, name).await?;
        (ready(&ms).0 == "True" && weights(&ms)["serving"] == uri).then_some(ms)
    })
    .await;
    assert_eq!(weights(&ms)["phase"], "Complete");
    let d = deployment(env, name).await.expect("the Deployment");
    let args = serde_json::to_value(&d.spec.template).unwrap_or_default()["spec"]["containers"][0]
        ["args"]
        .clone();
    assert!(
        args[1]
            .as_str()
            .is_some_and(|a| a.starts_with("/models/v1-")),
        "{args}"
    );
    if real_node() {
        // What the Job asked: the listing and the two objects of v1 (not
        // v2's), every request signed with the Secret's key for its region.
        let seen = store.requests();
        let gets: Vec<&str> = seen
            .iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/models/llama/"))
            .map(|r| r.path.as_str())
            .collect();
        assert_eq!(
            gets,
            [
                "/models/llama/v1/config.json",
                "/models/llama/v1/model.safetensors"
            ]
        );
        assert!(
            seen.iter().all(|r| r
                .authorization
                .as_deref()
                .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 Credential=AKIDE2E/")
                    && a.contains("/eu-west-1/s3/aws4_request"))),
            "{seen:?}"
        );
        assert_eq!(store.bytes_served(), 2048 + 8 * MIB);
    }
    w.finish().await;
}
