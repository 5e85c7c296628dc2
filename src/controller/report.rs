//! Step 5, report: write the computed status when it changed, and tell
//! people when the Degraded cause changes.
//!
//! Equality is checked against the status the object carries, so a settled
//! ModelService costs no write and raises no watch event.
//!
//! An Event is tied to the write that made its transition. A write that
//! announces something (a new Degraded cause, a rollback) carries the
//! resourceVersion of the status it was compared with, so the API server
//! refuses it when that status is no longer the stored one. Only one write
//! can move the stored status from "without the cause" to "with it", so each
//! cause is announced once whatever the interleaving of reconciles, watch
//! lag or operator restarts: a reconcile that compared with an old copy gets
//! 409, reads the object, and decides again against what is stored.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::apply::FIELD_MANAGER;
use super::lean::Lean;
use super::{Context, Error, recent};
use crate::api::{ModelService, ModelServiceStatus, condition_types as ct};
use crate::core::conditions::find;
use crate::core::pacing::{self, Pace, Timing, Write};

/// What [`report`] did with the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// It was already there.
    Unchanged,
    /// It was written.
    Written,
    /// It is only progress, written lately: look again after this long
    /// (see `core::pacing`).
    Paced(Duration),
    /// The object changed twice under an announcing write: nothing was
    /// written or announced; look again after this long.
    Conflicted(Duration),
}

/// How soon a reconcile whose announcing write met a moving object looks again.
const AFTER_CONFLICT: Duration = Duration::from_secs(1);

/// The status a reconcile compares with, and the resourceVersion of the
/// object that holds it.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub status: Option<ModelServiceStatus>,
    pub resource_version: Option<String>,
}

/// Something a person should hear about, once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub type_: EventType,
    pub reason: String,
    pub action: &'static str,
    pub note: String,
}

/// Patches `/status` to `new` unless `seen` (from [`effective_status`])
/// already holds it, or it is only progress and was written lately; emits
/// the Events of the transitions the write made (see the module doc).
pub async fn report(
    ctx: &Context,
    ms: &ModelService,
    reference: &ObjectReference,
    seen: &Seen,
    new: &ModelServiceStatus,
) -> Result<Reported, Error> {
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    ctx.metrics.observe_status(&ns, &name, new);
    let current = seen.status.as_ref();
    if current == Some(new) {
        return Ok(Reported::Unchanged);
    }
    let key = recent::key_of(ms);
    let timing = ctx
        .status_writes
        .timing(&key, new.observed_generation.unwrap_or(0));
    let pace = Pace {
        progress: ctx.config.status_pace,
        first_report: ctx.config.first_report_wait,
    };
    if let Write::After(wait) = pacing::when(current, new, timing, pace) {
        return Ok(Reported::Paced(wait));
    }
    let status = StatusApi {
        client: ctx.client.clone(),
        ns: &ns,
        name: &name,
    };
    let news = announcements(current, new);
    let base = (!news.is_empty())
        .then_some(seen.resource_version.as_deref())
        .flatten();
    let (written, news) = match status.write(status_patch_from(current, new)?, base).await {
        Ok(written) => (written, news),
        Err(e) if base.is_some() && is_conflict(&e) => {
            // What we compared with is no longer stored: decide again
            // against what is.
            let stored = status.read().await?;
            let news = announcements(stored.status.as_ref(), new);
            if stored.status.as_ref() == Some(new) {
                record(ctx, &key, stored.resource_version.as_deref(), new);
                return Ok(Reported::Written);
            }
            let base = (!news.is_empty())
                .then_some(stored.resource_version.as_deref())
                .flatten();
            let patch = status_patch_from(stored.status.as_ref(), new)?;
            match status.write(patch, base).await {
                Ok(written) => (written, news),
                Err(e) if is_conflict(&e) => return Ok(Reported::Conflicted(AFTER_CONFLICT)),
                Err(e) => return Err(status.error(e)),
            }
        }
        Err(e) => return Err(status.error(e)),
    };
    let rv = written.metadata.resource_version.as_deref();
    record(ctx, &key, rv, new);
    // The response is the whole object: a spec changed since this
    // reconcile read it is in there too, and must not pass for our echo
    // (a relist after an outage delivers only the latest version).
    if written.metadata.generation == ms.metadata.generation {
        ctx.echoes.wrote(&key, rv);
    }
    for a in news {
        ctx.events
            .publish(reference, a.type_, &a.reason, a.action, a.note);
    }
    Ok(Reported::Written)
}

/// Remembers the status we wrote, and when.
fn record(ctx: &Context, key: &str, resource_version: Option<&str>, new: &ModelServiceStatus) {
    ctx.written_status
        .record(key, resource_version, new.clone());
    ctx.status_writes.wrote(key);
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// One ModelService's `/status`.
struct StatusApi<'a> {
    client: kube::Client,
    ns: &'a str,
    name: &'a str,
}

impl StatusApi<'_> {
    /// Sends `patch` (from [`status_patch_from`]); with `base`, only if the
    /// object is still at that resourceVersion. Only the resourceVersion of
    /// the response is read: it is decoded lean.
    async fn write(
        &self,
        mut patch: Value,
        base: Option<&str>,
    ) -> Result<Lean<ModelService>, kube::Error> {
        if let Some(rv) = base {
            patch["metadata"] = json!({ "resourceVersion": rv });
        }
        Api::<Lean<ModelService>>::namespaced(self.client.clone(), self.ns)
            .patch_status(
                self.name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(patch),
            )
            .await
    }

    /// The status as stored, read from the API server (not the cache).
    async fn read(&self) -> Result<Seen, Error> {
        let api: Api<ModelService> = Api::namespaced(self.client.clone(), self.ns);
        let ms = api.get(self.name).await.map_err(|e| self.error(e))?;
        Ok(Seen {
            status: ms.status,
            resource_version: ms.metadata.resource_version,
        })
    }

    fn error(&self, e: kube::Error) -> Error {
        Error::kube(format!("writing status of {}/{}", self.ns, self.name), e)
    }
}

/// When each object's status was last written by us, and when a reconcile
/// first computed a status for its current generation: the two times the
/// pace of status writes depends on (see `core::pacing`). Entries go on the
/// object's deletion (`Context::forget_object`).
#[derive(Debug, Default)]
pub struct StatusWrites(Mutex<HashMap<String, Times>>);

#[derive(Debug, Clone, Copy)]
struct Times {
    written: Option<Instant>,
    generation: i64,
    generation_seen: Instant,
}

impl StatusWrites {
    /// The timing of `key` for a status of `generation` (first seen now, if
    /// it is new).
    pub fn timing(&self, key: &str, generation: i64) -> Timing {
        let now = Instant::now();
        let Ok(mut m) = self.0.lock() else {
            return Timing {
                since_last_write: None,
                since_generation_seen: Duration::MAX,
            };
        };
        let t = m.entry(key.to_string()).or_insert(Times {
            written: None,
            generation,
            generation_seen: now,
        });
        if t.generation != generation {
            t.generation = generation;
            t.generation_seen = now;
        }
        Timing {
            since_last_write: t.written.map(|w| now - w),
            since_generation_seen: now - t.generation_seen,
        }
    }

    fn wrote(&self, key: &str) {
        if let Ok(mut m) = self.0.lock()
            && let Some(t) = m.get_mut(key)
        {
            t.written = Some(Instant::now());
        }
    }

    /// Forgets `key`.
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(key);
        }
    }
}

/// The status as it really is now: our own last write while the object
/// the reconcile holds is older than it, else what that object says.
pub fn effective_status(ctx: &Context, ms: &ModelService) -> Seen {
    let held = ms.metadata.resource_version.as_deref();
    match ctx
        .written_status
        .newer_than_object(&recent::key_of(ms), held)
    {
        Some((rv, status)) => Seen {
            status: Some(status),
            resource_version: Some(rv.to_string()),
        },
        None => Seen {
            status: ms.status.clone(),
            resource_version: held.map(str::to_string),
        },
    }
}

/// A merge patch that sets every status field, with explicit nulls for the
/// ones that are now unset (a merge patch leaves absent keys alone).
pub fn status_patch(new: &ModelServiceStatus) -> Result<Value, Error> {
    status_patch_from(None, new)
}

/// [`status_patch`], also clearing what `current` has and `new` has not at
/// any depth: a merge patch merges nested objects too, so a `status.route`
/// without a `message` would otherwise keep the old message.
pub fn status_patch_from(
    current: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
) -> Result<Value, Error> {
    let ser = |s: &ModelServiceStatus| {
        serde_json::to_value(s).map_err(|source| Error::Serialize {
            what: "status",
            source,
        })
    };
    let mut v = ser(new)?;
    if let Some(cur) = current {
        null_removed(&ser(cur)?, &mut v);
    }
    if let Value::Object(map) = &mut v {
        for key in [
            "observedGeneration",
            "replicas",
            "readyReplicas",
            "selector",
            "url",
            "conditions",
            "autoscaler",
            "tracks",
            "route",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    Ok(json!({ "status": v }))
}

/// Sets to null every key of `old` that `new` lacks, in nested objects too
/// (lists are replaced whole by a merge patch, so they are left alone).
fn null_removed(old: &Value, new: &mut Value) {
    if let (Value::Object(o), Value::Object(n)) = (old, new) {
        for (k, ov) in o {
            match n.get_mut(k) {
                None => {
                    n.insert(k.clone(), Value::Null);
                }
                Some(nv) => null_removed(ov, nv),
            }
        }
    }
}

/// What a write from `old` to `new` announces: a changed Degraded cause,
/// a canary just rolled back.
pub fn announcements(
    old: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
) -> Vec<Announcement> {
    let degraded = degraded_change(old, new).map(|(type_, reason, note)| Announcement {
        type_,
        reason,
        action: "Diagnose",
        note,
    });
    let rollback = canary_rolled_back(old, new).map(|note| Announcement {
        type_: EventType::Warning,
        reason: "CanaryRolledBack".into(),
        action: "Rollback",
        note,
    });
    degraded.into_iter().chain(rollback).collect()
}

/// The Event to emit when the Degraded cause changed: a warning naming the
/// new cause, or a notice that it cleared. `None` when nothing changed, so a
/// cause that persists is announced exactly once.
pub fn degraded_change(
    old: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
) -> Option<(EventType, String, String)> {
    let key = |s: Option<&ModelServiceStatus>| {
        s.and_then(|s| find(&s.conditions, ct::DEGRADED))
            .map(|c| (c.status == "True", c.reason.clone()))
    };
    let before = key(old);
    let now = find(&new.conditions, ct::DEGRADED)?;
    let after = (now.status == "True", now.reason.clone());
    if before.as_ref() == Some(&after) {
        return None;
    }
    match (before, after.0) {
        (_, true) => Some((EventType::Warning, now.reason.clone(), now.message.clone())),
        (Some((true, old_reason)), false) => Some((
            EventType::Normal,
            "Recovered".to_string(),
            format!("{old_reason} no longer applies"),
        )),
        _ => None,
    }
}

/// The Event for a canary that was just rolled back: once, when
/// CanaryHealthy turns False (the status we compare with is our own last
/// write, so a reconcile that repeats it announces nothing).
pub fn canary_rolled_back(
    old: Option<&ModelServiceStatus>,
    new: &ModelServiceStatus,
) -> Option<String> {
    let now = find(&new.conditions, ct::CANARY_HEALTHY).filter(|c| c.status == "False")?;
    let before = old.and_then(|s| find(&s.conditions, ct::CANARY_HEALTHY));
    if before.is_some_and(|b| b.status == "False") {
        return None;
    }
    Some(format!("{}: {}", now.reason, now.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conditions::{Wanted, merge};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn status(degraded: bool, reason: &str) -> ModelServiceStatus {
        let now = Time(Timestamp::from_second(1).expect("ts"));
        ModelServiceStatus {
            conditions: merge(
                &[],
                &[Wanted::new(ct::DEGRADED, degraded, reason, "m")],
                1,
                &now,
            ),
            ..ModelServiceStatus::default()
        }
    }

    #[test]
    fn a_new_cause_is_announced_once() {
        let first = degraded_change(
            Some(&status(false, "AsExpected")),
            &status(true, "InsufficientGPU"),
        );
        assert!(matches!(first, Some((EventType::Warning, ref r, _)) if r == "InsufficientGPU"));
        assert_eq!(
            degraded_change(
                Some(&status(true, "InsufficientGPU")),
                &status(true, "InsufficientGPU")
            ),
            None
        );
    }

    #[test]
    fn a_changed_cause_is_announced() {
        let e = degraded_change(
            Some(&status(true, "InsufficientGPU")),
            &status(true, "ImagePullFailed"),
        );
        assert!(matches!(e, Some((EventType::Warning, ref r, _)) if r == "ImagePullFailed"));
    }

    #[test]
    fn recovery_is_announced_and_a_healthy_start_is_not() {
        let e = degraded_change(
            Some(&status(true, "ImagePullFailed")),
            &status(false, "AsExpected"),
        );
        assert!(matches!(e, Some((EventType::Normal, ref r, _)) if r == "Recovered"));
        assert_eq!(degraded_change(None, &status(false, "AsExpected")), None);
    }

    fn canary(healthy: bool) -> ModelServiceStatus {
        let now = Time(Timestamp::from_second(1).expect("ts"));
        let reason = if healthy { "Serving" } else { "CrashLooping" };
        ModelServiceStatus {
            conditions: merge(
                &[],
                &[Wanted::new(ct::CANARY_HEALTHY, healthy, reason, "m")],
                1,
                &now,
            ),
            ..ModelServiceStatus::default()
        }
    }

    #[test]
    fn a_rollback_is_announced_once() {
        assert!(canary_rolled_back(Some(&canary(true)), &canary(false)).is_some());
        assert!(canary_rolled_back(None, &canary(false)).is_some());
        assert_eq!(
            canary_rolled_back(Some(&canary(false)), &canary(false)),
            None
        );
        assert_eq!(
            canary_rolled_back(Some(&canary(false)), &canary(true)),
            None
        );
    }

    #[test]
    fn the_patch_clears_nested_fields_that_are_gone() {
        let old = ModelServiceStatus {
            route: Some(Box::new(crate::api::RouteStatus {
                name: "m".into(),
                accepted: None,
                message: Some("waiting".into()),
                parents: vec![],
                pools: vec![],
            })),
            ..ModelServiceStatus::default()
        };
        let mut new = old.clone();
        if let Some(r) = new.route.as_mut() {
            r.accepted = Some(true);
            r.message = None;
        }
        let p = status_patch_from(Some(&old), &new).expect("patch");
        assert_eq!(p["status"]["route"]["message"], Value::Null);
        assert!(
            p["status"]["route"]
                .as_object()
                .is_some_and(|m| m.contains_key("message"))
        );
        assert_eq!(p["status"]["route"]["accepted"], true);
    }

    #[test]
    fn the_patch_clears_unset_fields() {
        let p = status_patch(&ModelServiceStatus::default()).expect("patch");
        assert_eq!(p["status"]["url"], Value::Null);
        assert!(
            p["status"]
                .as_object()
                .is_some_and(|m| m.contains_key("url"))
        );
    }
}
