//! The HTTP front: routing, counting, fault injection, pausing, and turning
//! verb results into responses.
//!
//! One fallback handler serves every path so resources are routed from the
//! table at request time (installing or removing a type needs no new routes).

mod discovery;
mod partial;
mod query;
mod target;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use partial::partial as partial_object;
pub use query::Query;
pub use target::Target;

use crate::counts::Verb;
use crate::ops::create::{Ownership, create};
use crate::ops::delete::{DeleteOpts, Deleted, delete, delete_collection};
use crate::ops::patch::{check_options, patch, patch_type};
use crate::ops::scale::{get_scale, write_scale};
use crate::ops::{Ctx, Sub, read, update};
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, Filter, LabelSelector};
use crate::shared::Shared;
use crate::status::{ApiError, bytes_response, json_response, page_not_found};
use crate::watch::{self, WatchParams};

/// Request bodies up to this size are accepted (the real server allows 3 MiB
/// objects; leave room for patches).
const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Marks requests that came over TCP: in the tests those are the operator
/// binary's, while the test itself and the simulator talk in-process, so
/// counting them apart tells what the operator sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverTcp;

/// The router served on the loopback port.
pub(crate) fn tcp_router(shared: Arc<Shared>) -> Router {
    router(shared).layer(axum::Extension(OverTcp))
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .fallback(handle)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

fn verb_of(method: &Method, t: &Target, q: &Query) -> Option<Verb> {
    let watch = t.legacy_watch || q.flag("watch") == Some(true);
    Some(match *method {
        Method::GET if watch => Verb::Watch,
        Method::GET if t.name.is_some() => Verb::Get,
        Method::GET => Verb::List,
        Method::POST if t.name.is_none() => Verb::Create,
        Method::PUT if t.name.is_some() => Verb::Update,
        Method::PATCH if t.name.is_some() => Verb::Patch,
        Method::DELETE if t.name.is_some() => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => return None,
    })
}

fn manager_of(q: &Query, headers: &HeaderMap) -> (String, bool) {
    match q.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => (m.to_string(), true),
        None => {
            let ua = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let prefix = ua.split('/').next().unwrap_or("").trim();
            let m = if prefix.is_empty() { "unknown" } else { prefix };
            (m.to_string(), false)
        }
    }
}

fn filter_of(
    info: &ResourceInfo,
    ns: Option<&str>,
    name: Option<&str>,
    q: &Query,
) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let mut fields = q.get("fieldSelector").unwrap_or("").to_string();
    if let Some(n) = name {
        // Watching a single object by URL (deprecated form).
        if !fields.is_empty() {
            fields.push(',');
        }
        fields.push_str(&format!("metadata.name={n}"));
    }
    let fields = FieldSelector::parse(&fields, info).map_err(ApiError::bad_request)?;
    Ok(Filter {
        namespace: ns.map(str::to_string),
        labels,
        fields,
    })
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

fn object_response(code: StatusCode, obj: &Value) -> Response {
    bytes_response(code, serde_json::to_vec(obj).unwrap_or_default())
}

/// An object, or its metadata-only form when that was asked for.
fn render(code: StatusCode, obj: &Value, want_partial: bool) -> Response {
    if want_partial {
        object_response(code, &partial::partial(obj))
    } else {
        object_response(code, obj)
    }
}

/// What a client sees of a restarting server. A real one refuses the
/// connection; axum cannot refuse an accepted one, so this closes it
/// without an answer the client can use: a 503 with `Connection: close`,
/// which kube's client reports as an error, as it does a refused connection.
fn restarting() -> Response {
    let mut resp = (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "the API server is restarting",
    )
        .into_response();
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    resp
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    tcp: Option<axum::Extension<OverTcp>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if tcp.is_some() && shared.outage.is_down() {
        return restarting();
    }
    let path = uri.path();
    let infos: Vec<ResourceInfo> = if Target::parse(path).is_none() {
        shared
            .lock()
            .resources
            .values()
            .map(|s| (*s.info).clone())
            .collect()
    } else {
        Vec::new()
    };
    if let Some(resp) = discovery::serve(path, &infos) {
        return resp;
    }
    let Some(target) = Target::parse(path) else {
        return page_not_found();
    };
    let q = Query::parse(uri.query());
    let Some(verb) = verb_of(&method, &target, &q) else {
        return ApiError::method_not_allowed().into_response();
    };
    let label = target.resource_label();
    shared.counter.record(verb, &label);
    if tcp.is_some() {
        shared.tcp_counter.record(verb, &label);
    }
    shared.gate.wait_resumed().await;
    shared.holds.wait_released(verb, &label).await;
    if verb == Verb::List && q.get("continue").is_some_and(|c| !c.is_empty()) {
        shared
            .holds
            .wait_released(verb, &crate::server::continued(&label))
            .await;
    }

    let info = {
        let store = shared.lock();
        store
            .info(&target.group, &target.plural)
            .filter(|i| i.serves(&target.version))
    };
    let Some(info) = info else {
        return page_not_found();
    };
    if let Some(code) = shared.faults.take(verb, &label) {
        let name = target.name.as_deref().unwrap_or("");
        return ApiError::for_code(code, Some(&info), name).into_response();
    }
    match dispatch(&shared, info, target, verb, &q, &headers, &body) {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// The pod annotation the fake serves as that pod's log.
pub const LOG_ANNOTATION: &str = "fake-apiserver.test/log";

fn dispatch(
    shared: &Arc<Shared>,
    info: Arc<ResourceInfo>,
    t: Target,
    verb: Verb,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    // Scope checks: a namespaced type without a namespace only lists and
    // watches across namespaces; a cluster-scoped type never has one.
    match (&t.namespace, info.namespaced) {
        (Some(_), false) => return Ok(page_not_found()),
        (None, true) if !matches!(verb, Verb::List | Verb::Watch) => return Ok(page_not_found()),
        _ => {}
    }
    // A pod's log: the fake runs no container, so a test writes what the
    // container would print in the pod's `LOG_ANNOTATION`.
    if t.subresource.as_deref() == Some("log") && info.plural == "pods" && info.group.is_empty() {
        if verb != Verb::Get {
            return Err(ApiError::method_not_allowed());
        }
        let ctx = Ctx::new(
            info.clone(),
            t.namespace.as_deref().unwrap_or_default(),
            Sub::Main,
            "",
        );
        let obj = read::get(&shared.lock(), &ctx, t.name.as_deref().unwrap_or_default())?;
        let text = obj["metadata"]["annotations"][LOG_ANNOTATION]
            .as_str()
            .unwrap_or_default()
            .to_string();
        return Ok(Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/plain")
            .body(axum::body::Body::from(text))
            .unwrap_or_default());
    }
    let sub = match t.subresource.as_deref() {
        None => Sub::Main,
        Some("status") if info.status_subresource => Sub::Status,
        Some("scale") if info.scale.is_some() => Sub::Scale,
        Some(_) => return Err(ApiError::resource_not_found()),
    };
    if sub != Sub::Main && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::method_not_allowed());
    }
    let (manager, manager_given) = manager_of(q, headers);
    let ns = t.namespace.clone().unwrap_or_default();
    let mut ctx = Ctx::new(info.clone(), &ns, sub, &manager).at_version(&t.version);
    ctx.manager_given = manager_given;
    ctx.dry_run = q.dry_run();
    let name = t.name.clone().unwrap_or_default();
    let want_partial = partial::wants_partial(headers);

    match verb {
        Verb::Get => {
            let store = shared.lock();
            if sub == Sub::Scale {
                let scale = get_scale(&store, &ctx, &name)?;
                drop(store);
                return Ok(json_response(StatusCode::OK, &scale));
            }
            let obj = read::get(&store, &ctx, &name)?;
            drop(store);
            Ok(render(StatusCode::OK, &obj, want_partial))
        }
        Verb::List => {
            let snapshot = match q.get("continue").filter(|c| !c.is_empty()) {
                Some(token) => shared.pages.resume(token)?,
                None => {
                    let filter = filter_of(&info, t.namespace.as_deref(), None, q)?;
                    let stored = read::list(&shared.lock(), &ctx, &filter);
                    stored.at_request_version(&ctx)?
                }
            };
            let limit = q
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(0);
            let snapshot = shared.pages.cut(snapshot, limit);
            if limit > 0 {
                shared
                    .pages
                    .served(&t.resource_label(), snapshot.items.len());
            }
            Ok(bytes_response(
                StatusCode::OK,
                snapshot.to_json(want_partial),
            ))
        }
        Verb::Watch => {
            let filter = filter_of(&info, t.namespace.as_deref(), t.name.as_deref(), q)?;
            let params = WatchParams {
                resource_version: q.get("resourceVersion").map(str::to_string),
                timeout: q
                    .get("timeoutSeconds")
                    .and_then(|s| s.parse::<u64>().ok())
                    .map(Duration::from_secs),
                bookmarks: q.flag("allowWatchBookmarks") == Some(true),
                send_initial_events: q.flag("sendInitialEvents"),
                resource_version_match: q.get("resourceVersionMatch").map(str::to_string),
                partial: want_partial,
            };
            Ok(watch::serve(shared.clone(), ctx, filter, params))
        }
        Verb::Create => {
            crate::crds::check_create(&shared.lock(), &info)?;
            let obj = parse_body(body)?;
            let created = create(&mut shared.lock(), &ctx, obj, Ownership::Creator)?;
            Ok(object_response(StatusCode::CREATED, &created))
        }
        Verb::Update => {
            let obj = parse_body(body)?;
            let mut store = shared.lock();
            if sub == Sub::Scale {
                let scale = write_scale(&mut store, &ctx, &name, &obj)?;
                drop(store);
                return Ok(object_response(StatusCode::OK, &scale));
            }
            let stored = update::update(&mut store, &ctx, &name, obj)?;
            drop(store);
            Ok(object_response(StatusCode::OK, &stored))
        }
        Verb::Patch => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = patch_type(&ctx, ct)?;
            let force = q.flag("force");
            check_options(&ctx, kind, force)?;
            let out = patch(
                &mut shared.lock(),
                &ctx,
                &name,
                kind,
                body,
                force == Some(true),
            )?;
            let code = if out.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(render(code, &out.object, want_partial))
        }
        Verb::Delete => {
            let mut opts = DeleteOpts::from_body(body)?;
            opts.dry_run |= ctx.dry_run;
            match q.get("propagationPolicy") {
                Some("Foreground") => {
                    opts.propagation = crate::ops::delete::Propagation::Foreground
                }
                Some("Orphan") => opts.propagation = crate::ops::delete::Propagation::Orphan,
                _ => {}
            }
            let result = delete(&mut shared.lock(), &ctx, &name, &opts)?;
            Ok(match result {
                Deleted::Terminating(obj) => object_response(StatusCode::OK, &obj),
                Deleted::Removed(obj) if info.returns_deleted_object() => {
                    object_response(StatusCode::OK, &obj)
                }
                Deleted::Removed(obj) => {
                    let mut details =
                        json!({"name": name, "kind": info.plural, "uid": crate::meta::uid(&obj)});
                    if !info.group.is_empty() {
                        details["group"] = json!(info.group);
                    }
                    json_response(
                        StatusCode::OK,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                    )
                }
            })
        }
        Verb::DeleteCollection => {
            let filter = filter_of(&info, t.namespace.as_deref(), None, q)?;
            let mut opts = DeleteOpts::from_body(body)?;
            opts.dry_run |= ctx.dry_run;
            let mut store = shared.lock();
            let items = delete_collection(&mut store, &ctx, &filter, &opts)?;
            let rv = store.rv;
            drop(store);
            let list = json!({
                "kind": format!("{}List", info.kind),
                "apiVersion": ctx.api_version,
                "metadata": {"resourceVersion": rv.to_string()},
                "items": items.iter().map(|i| (**i).clone()).collect::<Vec<_>>(),
            });
            Ok(json_response(StatusCode::OK, &list))
        }
    }
}
