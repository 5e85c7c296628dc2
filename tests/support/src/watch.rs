//! Watch streams: newline-delimited JSON events over a chunked response.
//!
//! Semantics follow the real server because kube-runtime depends on them:
//! * from resourceVersion R: every event after R, in order, or — if R was
//!   compacted away — one ERROR event with a 410 Expired Status;
//! * no resourceVersion (or "0"): synthetic ADDED events for the current
//!   state, then changes;
//! * `sendInitialEvents=true`: the same, closed by a BOOKMARK annotated
//!   `k8s.io/initial-events-end`;
//! * selectors: an object that stops matching arrives as DELETED, one that
//!   starts matching as ADDED;
//! * periodic BOOKMARKs when asked for, closing after `timeoutSeconds`, and
//!   disconnection of watchers too slow to keep up;
//! * objects at the watch's version (converted from the storage version;
//!   a failed conversion ends the watch with an ERROR event).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::meta;
use crate::ops::Ctx;
use crate::selector::Filter;
use crate::shared::Shared;
use crate::status::{ApiError, FieldError};
use crate::store::{Event, EventType, watch_line};

/// Watch-related query parameters.
#[derive(Clone, Debug, Default)]
pub struct WatchParams {
    pub resource_version: Option<String>,
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub resource_version_match: Option<String>,
    /// Send PartialObjectMetadata objects (metadata-only watches).
    pub partial: bool,
}

/// Default stream lifetime when the client gives no timeoutSeconds (the
/// real server picks 30–60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What the stream starts with.
struct Start {
    initial: Vec<Arc<Value>>,
    end_bookmark: bool,
    replay: Vec<Arc<Event>>,
    rx: broadcast::Receiver<Arc<Event>>,
    rv: u64,
}

fn check_params(p: &WatchParams) -> Result<(), ApiError> {
    if p.send_initial_events != Some(true) {
        return Ok(());
    }
    let mut errs = Vec::new();
    if p.resource_version_match.as_deref() != Some("NotOlderThan") {
        errs.push(FieldError::forbidden(
            "resourceVersionMatch",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if !p.bookmarks {
        errs.push(FieldError::forbidden(
            "allowWatchBookmarks",
            "allowWatchBookmarks must be set to true when sendInitialEvents is set",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_kind(
            "ListOptions",
            "meta.k8s.io",
            "",
            &errs,
        ))
    }
}

/// Sets up the stream under the store lock (so the snapshot or replay and
/// the live subscription line up exactly), or says why it cannot start.
fn begin(shared: &Shared, ctx: &Ctx, filter: &Filter, p: &WatchParams) -> Result<Start, ApiError> {
    let store = shared.lock();
    let state = store
        .resources
        .get(&ctx.info.key())
        .ok_or_else(ApiError::resource_not_found)?;
    let snapshot = |end_bookmark| Start {
        initial: state
            .objects
            .values()
            .filter(|o| filter.matches(o))
            .cloned()
            .collect(),
        end_bookmark,
        replay: Vec::new(),
        rx: state.tx.subscribe(),
        rv: store.rv,
    };
    if p.send_initial_events == Some(true) {
        return Ok(snapshot(true));
    }
    match p.resource_version.as_deref() {
        None | Some("") | Some("0") => {
            if p.send_initial_events == Some(false) {
                Ok(Start {
                    initial: Vec::new(),
                    end_bookmark: false,
                    replay: Vec::new(),
                    rx: state.tx.subscribe(),
                    rv: store.rv,
                })
            } else {
                Ok(snapshot(false))
            }
        }
        Some(rv) => {
            let from: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
            if from < state.compacted {
                return Err(ApiError::expired(format!(
                    "too old resource version: {from} ({})",
                    state.compacted
                )));
            }
            Ok(Start {
                initial: Vec::new(),
                end_bookmark: false,
                replay: state
                    .history
                    .iter()
                    .filter(|e| e.rv > from)
                    .cloned()
                    .collect(),
                rx: state.tx.subscribe(),
                rv: from.max(state.compacted),
            })
        }
    }
}

fn chunked(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Starts a watch and returns the streaming response.
pub(crate) fn serve(shared: Arc<Shared>, ctx: Ctx, filter: Filter, p: WatchParams) -> Response {
    if let Err(e) = check_params(&p) {
        return e.into_response();
    }
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    match begin(&shared, &ctx, &filter, &p) {
        Ok(start) => {
            let w = Watcher {
                shared,
                ctx,
                filter,
                out: tx,
                last_rv: start.rv,
                partial: p.partial,
            };
            let deadline = Instant::now() + p.timeout.unwrap_or(DEFAULT_TIMEOUT);
            tokio::spawn(w.run(start, p.bookmarks, deadline));
        }
        Err(e) if e.code == 410 => {
            // Like the real server: 200, then a single ERROR event.
            let line = watch_line("ERROR", &e.to_status());
            tokio::spawn(async move {
                let _ = tx.send(line).await;
            });
        }
        Err(e) => return e.into_response(),
    }
    chunked(rx)
}

struct Watcher {
    shared: Arc<Shared>,
    ctx: Ctx,
    filter: Filter,
    out: mpsc::Sender<Bytes>,
    /// The resourceVersion the client is known to be at.
    last_rv: u64,
    partial: bool,
}

/// Why the event loop stopped sending.
struct Closed;

impl Watcher {
    async fn send(&self, line: Bytes) -> Result<(), Closed> {
        self.shared.gate.wait_resumed().await;
        self.out.send(line).await.map_err(|_| Closed)
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = if self.partial {
            (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            )
        } else {
            (self.ctx.info.kind.clone(), self.ctx.api_version.clone())
        };
        watch_line(
            "BOOKMARK",
            &json!({"kind": kind, "apiVersion": api_version, "metadata": md}),
        )
    }

    /// One event line, in the representation this watcher asked for.
    fn render(&self, kind: &str, obj: &Value) -> Bytes {
        if self.partial {
            watch_line(kind, &crate::http::partial_object(obj))
        } else {
            watch_line(kind, obj)
        }
    }

    /// Whether `obj` is already at this watcher's version.
    fn at_my_version(&self, obj: &Value) -> bool {
        obj.get("apiVersion").and_then(Value::as_str) == Some(self.ctx.api_version.as_str())
    }

    /// The event's object at this watcher's version.
    fn object_of(&self, ev: &Event) -> Result<Arc<Value>, ApiError> {
        if self.at_my_version(&ev.object) {
            return Ok(ev.object.clone());
        }
        Ok(ev
            .view(&self.ctx.api_version, |o| self.ctx.to_request(o))?
            .object
            .clone())
    }

    /// The event as it happened, pre-serialized and shared with the other
    /// watchers of this version unless this watcher needs its own.
    fn shared_line(&self, ev: &Event) -> Result<Bytes, ApiError> {
        if self.partial {
            return Ok(self.render(ev.kind.as_str(), &*self.object_of(ev)?));
        }
        if self.at_my_version(&ev.object) {
            return Ok(ev.line());
        }
        let view = ev.view(&self.ctx.api_version, |o| self.ctx.to_request(o))?;
        Ok(view.line(ev.kind))
    }

    /// The line this watcher must see for `ev`, if any. Selectors are
    /// evaluated on the stored objects.
    fn line_for(&self, ev: &Event) -> Result<Option<Bytes>, ApiError> {
        let now = self.filter.matches(&ev.object);
        let before = ev.prev.as_deref().is_some_and(|p| self.filter.matches(p));
        Ok(match (ev.kind, before, now) {
            (EventType::Added, _, true) => Some(self.shared_line(ev)?),
            (EventType::Modified, true, true) => Some(self.shared_line(ev)?),
            (EventType::Modified, false, true) => Some(self.render("ADDED", &*self.object_of(ev)?)),
            (EventType::Modified, true, false) => {
                // The previous state, stamped with this event's version.
                let mut prev = match &ev.prev {
                    Some(p) => (*self.ctx.to_request(p)?).clone(),
                    None => Value::Null,
                };
                meta::meta_mut(&mut prev)
                    .insert("resourceVersion".into(), json!(ev.rv.to_string()));
                Some(self.render("DELETED", &prev))
            }
            (EventType::Deleted, b, n) if b || n => Some(self.shared_line(ev)?),
            _ => None,
        })
    }

    /// Ends the stream with an ERROR event carrying `e`'s Status.
    async fn fail(&self, e: ApiError) -> Closed {
        let _ = self.send(watch_line("ERROR", &e.to_status())).await;
        Closed
    }

    async fn deliver(&mut self, ev: &Event) -> Result<(), Closed> {
        if ev.rv <= self.last_rv {
            return Ok(());
        }
        match self.line_for(ev) {
            Ok(Some(line)) => self.send(line).await?,
            Ok(None) => {}
            Err(e) => return Err(self.fail(e).await),
        }
        self.last_rv = ev.rv;
        Ok(())
    }

    async fn run(mut self, mut start: Start, bookmarks: bool, deadline: Instant) {
        let _ = self.stream(&mut start, bookmarks, deadline).await;
    }

    async fn stream(
        &mut self,
        start: &mut Start,
        bookmarks: bool,
        deadline: Instant,
    ) -> Result<(), Closed> {
        for obj in std::mem::take(&mut start.initial) {
            match self.ctx.to_request(&obj) {
                Ok(obj) => self.send(self.render("ADDED", &obj)).await?,
                Err(e) => return Err(self.fail(e).await),
            }
        }
        if start.end_bookmark {
            self.send(self.bookmark(true)).await?;
        }
        for ev in std::mem::take(&mut start.replay) {
            self.deliver(&ev).await?;
        }
        let period = self.shared.bookmark_interval;
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        loop {
            tokio::select! {
                _ = self.out.closed() => return Err(Closed),
                _ = tokio::time::sleep_until(deadline) => return Ok(()),
                r = start.rx.recv() => match r {
                    Ok(ev) => self.deliver(&ev).await?,
                    // Lagged: too slow, the client must re-watch (or relist).
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return Err(Closed),
                },
                _ = ticker.tick(), if bookmarks => {
                    // Everything up to `now` of this type is already queued
                    // in `rx` (sends happen under the same lock): drain it
                    // before claiming to be at `now`.
                    let now = self.shared.lock().rv;
                    loop {
                        match start.rx.try_recv() {
                            Ok(ev) => self.deliver(&ev).await?,
                            Err(TryRecvError::Empty) => break,
                            Err(_) => return Err(Closed),
                        }
                    }
                    self.last_rv = self.last_rv.max(now);
                    self.send(self.bookmark(false)).await?;
                }
            }
        }
    }
}
