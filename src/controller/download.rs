//! Step 1 for the weights: how far the download of the spec's source has
//! got, from its Job and the Job's pod.
//!
//! Progress reaches the operator through the pod's log: `fetch` prints one
//! JSON line every 2 s, and the operator reads the last few lines of it
//! (`pods/log`, `tailLines`), at most once per [`READ_EVERY`] per
//! ModelService. The pod needs no credentials and no network path to the
//! operator, and the log is where a person looks too. How it ended comes
//! from the pod's termination message, which outlives the log's rotation
//! and the container.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};
use tracing::debug;

use super::Context;
use super::children::{Cached, JobChild};
use crate::core::download::{Download, Progress, WeightsSeen};
use crate::core::weights::FETCH_CONTAINER;
use crate::fetch::outcome::{Outcome, OutcomeKind};
use crate::fetch::progress::ProgressLine;

/// How often a running download's log is read; also when a reconcile
/// comes back to read it again.
pub const READ_EVERY: Duration = Duration::from_secs(5);

/// What the Job's conditions say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Complete,
    Failed,
}

/// The Job's state from its conditions (Complete or Failed True).
pub fn job_state(job: &Cached<JobChild>) -> JobState {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    let is = |t: &str| {
        conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_ == t && c.status == "True")
    };
    if is("Complete") {
        JobState::Complete
    } else if is("Failed") {
        JobState::Failed
    } else {
        JobState::Running
    }
}

/// The last reading of each ModelService's download: (job, when, what).
#[derive(Default)]
pub struct Downloads(Mutex<HashMap<String, (String, Instant, Download)>>);

impl Downloads {
    fn get(&self, key: &str, job: &str) -> Option<(Instant, Download)> {
        let map = self.0.lock().ok()?;
        map.get(key)
            .filter(|(j, _, _)| j == job)
            .map(|(_, at, d)| (*at, d.clone()))
    }

    fn put(&self, key: String, job: String, download: Download) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, (job, Instant::now(), download));
        }
    }

    /// Forgets a deleted ModelService's reading.
    pub fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(&format!("{namespace}/{name}"));
        }
    }
}

/// The weights of a ModelService with `model.source` as status reports
/// them. `job` is its download Job as applied (none for a pvc:// source);
/// `serving` is the source the pods read now.
///
/// Out of line and on the heap, as `apply::apply_cache` is: a reconcile
/// without a source pays nothing for it on its stack.
#[inline(never)]
pub fn observe<'a>(
    ctx: &'a Context,
    ns: &'a str,
    name: &'a str,
    uri: &'a str,
    job: Option<&'a Cached<JobChild>>,
    serving: Option<String>,
) -> futures::future::BoxFuture<'a, WeightsSeen> {
    Box::pin(async move {
        let download = match job {
            None => None,
            Some(job) => Some(read(ctx, ns, name, job).await),
        };
        WeightsSeen {
            uri: uri.to_string(),
            download,
            serving,
        }
    })
}

async fn read(ctx: &Context, ns: &str, name: &str, job: &Cached<JobChild>) -> Download {
    let key = format!("{ns}/{name}");
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let state = job_state(job);
    if let Some((at, last)) = ctx.downloads.get(&key, &job_name) {
        let settled = matches!(last, Download::Complete(_) | Download::Failed { .. });
        // A final reading holds while the Job says the same; a running
        // one is read again after READ_EVERY.
        let same = match state {
            JobState::Complete => matches!(last, Download::Complete(_)),
            JobState::Failed => matches!(last, Download::Failed { .. }),
            JobState::Running => !settled && at.elapsed() < READ_EVERY,
        };
        if same {
            return last;
        }
    }
    let download = match read_pods(ctx, ns, &job_name, state).await {
        Ok(d) => d,
        Err(e) => {
            debug!(job = %job_name, error = %e, "cannot read the download's pod");
            match state {
                JobState::Complete => Download::Complete(None),
                JobState::Failed => Download::Failed {
                    too_small: false,
                    message: job_failure(job),
                },
                JobState::Running => Download::Running(None),
            }
        }
    };
    ctx.downloads.put(key, job_name, download.clone());
    download
}

/// The Job's own word on its failure (BackoffLimitExceeded, ...).
fn job_failure(job: &Cached<JobChild>) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or("Failed"),
                c.message.as_deref().unwrap_or("the Job failed")
            )
        })
        .unwrap_or_else(|| "the Job failed".into())
}

async fn read_pods(
    ctx: &Context,
    ns: &str,
    job: &str,
    state: JobState,
) -> Result<Download, kube::Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
    let mut pods = api.list(&lp).await?.items;
    // Newest first: a retry's pod says where the download is now.
    pods.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
    });
    let outcome = pods.iter().find_map(termination_outcome);
    Ok(match state {
        JobState::Complete => Download::Complete(outcome.and_then(|o| {
            let total = o.total_bytes?;
            Some(Progress {
                done_bytes: total,
                total_bytes: total,
                bytes_per_second: 0,
            })
        })),
        JobState::Failed => match outcome {
            Some(o) => Download::Failed {
                too_small: o.result == OutcomeKind::VolumeTooSmall,
                message: o.message.unwrap_or_else(|| "the download failed".into()),
            },
            None => Download::Failed {
                too_small: false,
                message: "the download failed, and its pod left no message".into(),
            },
        },
        JobState::Running => match pods.first() {
            None => Download::Pending("the Job has not made its pod yet".into()),
            Some(pod) if phase(pod) == "Pending" => Download::Pending(pending_why(pod)),
            Some(pod) => {
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                let lp = LogParams {
                    container: Some(FETCH_CONTAINER.into()),
                    tail_lines: Some(5),
                    ..LogParams::default()
                };
                match api.logs(&pod_name, &lp).await {
                    Ok(log) => Download::Running(last_progress(&log)),
                    Err(e) => {
                        debug!(pod = %pod_name, error = %e, "cannot read the download's log");
                        Download::Running(None)
                    }
                }
            }
        },
    })
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Why the download's pod has not started: its claim, its node, its image.
fn pending_why(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            format!(
                "its pod waits: {}{}",
                w.reason.as_deref().unwrap_or("waiting"),
                w.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )
        });
    let unscheduled = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            format!(
                "its pod is not scheduled: {}",
                c.message.as_deref().unwrap_or("no node yet")
            )
        });
    waiting
        .or(unscheduled)
        .unwrap_or_else(|| "its pod is starting".into())
}

/// What a finished `fetch` wrote as its termination message.
fn termination_outcome(pod: &Pod) -> Option<Outcome> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter(|c| c.name == FETCH_CONTAINER)
        .find_map(|c| {
            let message = c.state.as_ref()?.terminated.as_ref()?.message.as_deref()?;
            message
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Outcome>(l.trim()).ok())
        })
}

/// The newest progress line of a log tail; other lines are skipped.
pub fn last_progress(log: &str) -> Option<Progress> {
    log.lines().rev().find_map(|l| {
        let p = serde_json::from_str::<ProgressLine>(l.trim())
            .ok()?
            .progress;
        Some(Progress {
            done_bytes: p.done_bytes,
            total_bytes: p.total_bytes,
            bytes_per_second: p.bytes_per_second,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_progress_line_wins_and_other_lines_are_skipped() {
        let log = "{\"progress\":{\"doneBytes\":1,\"totalBytes\":10,\"bytesPerSecond\":0,\"files\":0,\"totalFiles\":2}}\n\
                   {\"progress\":{\"doneBytes\":5,\"totalBytes\":10,\"bytesPerSecond\":2,\"files\":1,\"totalFiles\":2}}\n\
                   not json\n";
        assert_eq!(
            last_progress(log),
            Some(Progress {
                done_bytes: 5,
                total_bytes: 10,
                bytes_per_second: 2
            })
        );
        assert_eq!(last_progress("starting\n"), None);
    }

    #[test]
    fn a_job_is_done_only_when_its_condition_says_so() {
        let job = |conds: serde_json::Value| -> Cached<JobChild> {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "m-fetch-1", "namespace": "ns"},
                "spec": {},
                "status": {"conditions": conds},
            }))
            .unwrap()
        };
        assert_eq!(job_state(&job(serde_json::json!([]))), JobState::Running);
        assert_eq!(
            job_state(&job(
                serde_json::json!([{"type": "Complete", "status": "True"}])
            )),
            JobState::Complete
        );
        assert_eq!(
            job_state(&job(
                serde_json::json!([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}])
            )),
            JobState::Failed
        );
        assert_eq!(
            job_state(&job(
                serde_json::json!([{"type": "Complete", "status": "False"}])
            )),
            JobState::Running
        );
    }
}
