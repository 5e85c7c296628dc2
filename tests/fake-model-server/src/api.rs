//! The HTTP surface the operator and the tests see: what vLLM serves
//! (`/health`, `/v1/models`, `/v1/completions`, `/metrics`), plus `/fake/*`
//! for the tests (what the server was started with, and the waiting-queue
//! gauge to set).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use prometheus::{Encoder, IntGauge, Registry, TextEncoder};
use serde_json::{Value, json};

use fake_model_server::flavor::{Flavor, Launch};

/// What every handler shares.
pub struct Served {
    pub flavor: Flavor,
    pub launch: Launch,
    /// The arguments after the program name, as the pod's container got them.
    pub args: Vec<String>,
    /// `MODEL_NAME` and `PORT`, which an explicit preset sets.
    pub preset_env: Vec<(String, Option<String>)>,
    pub per_token: Duration,
    pub registry: Registry,
    pub waiting: IntGauge,
    pub running: IntGauge,
    next_id: AtomicU64,
}

impl Served {
    pub fn new(
        flavor: Flavor,
        launch: Launch,
        args: Vec<String>,
        preset_env: Vec<(String, Option<String>)>,
        per_token: Duration,
        waiting: i64,
    ) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::with_opts(
                prometheus::Opts::new(name, help)
                    .const_label("model_name", launch.served_name.clone()),
            )?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let waiting_gauge = gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
        )?;
        waiting_gauge.set(waiting);
        let running = gauge(
            "vllm:num_requests_running",
            "Number of requests currently running on GPU.",
        )?;
        Ok(Self {
            flavor,
            launch,
            args,
            preset_env,
            per_token,
            registry,
            waiting: waiting_gauge,
            running,
            next_id: AtomicU64::new(1),
        })
    }
}

pub fn router(served: Arc<Served>) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/metrics", get(metrics))
        .route("/fake/info", get(info))
        .route("/fake/num_requests_waiting", put(set_waiting))
        .with_state(served)
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn models(State(s): State<Arc<Served>>) -> Response {
    json_response(
        StatusCode::OK,
        json!({"object": "list", "data": [{
            "id": s.launch.served_name, "object": "model", "created": now(),
            "owned_by": s.flavor.name(), "root": s.launch.model,
        }]}),
    )
}

/// OpenAI's error shape, as vLLM answers it.
fn error(status: StatusCode, kind: &str, message: String) -> Response {
    json_response(
        status,
        json!({"error": {"message": message, "type": kind, "code": status.as_u16()}}),
    )
}

/// Counts a request as running for as long as it is held.
struct Running(IntGauge);

impl Running {
    fn start(g: &IntGauge) -> Self {
        g.inc();
        Self(g.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Answers after `max_tokens` times the per-token time: a request that a
/// graceful stop must let finish.
async fn completions(State(s): State<Arc<Served>>, body: String) -> Response {
    let Ok(req) = serde_json::from_str::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "the body is not JSON".into(),
        );
    };
    let model = req["model"].as_str().unwrap_or_default();
    if model != s.launch.served_name {
        return error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{model}` does not exist."),
        );
    }
    let tokens = req["max_tokens"].as_u64().unwrap_or(16).min(100_000);
    let _running = Running::start(&s.running);
    let per_token = u32::try_from(tokens)
        .ok()
        .and_then(|t| s.per_token.checked_mul(t))
        .unwrap_or(Duration::from_secs(3600));
    tokio::time::sleep(per_token).await;
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    json_response(
        StatusCode::OK,
        json!({
            "id": format!("cmpl-{id}"), "object": "text_completion", "created": now(),
            "model": s.launch.served_name,
            "choices": [{"index": 0, "text": " fake".repeat(tokens.min(64) as usize),
                "logprobs": null, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
        }),
    )
}

async fn metrics(State(s): State<Arc<Served>>) -> Response {
    let mut out = Vec::new();
    match TextEncoder::new().encode(&s.registry.gather(), &mut out) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            out,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn info(State(s): State<Arc<Served>>) -> Response {
    let env: serde_json::Map<String, Value> = s
        .preset_env
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json_response(
        StatusCode::OK,
        json!({"flavor": s.flavor.name(), "model": s.launch.model,
            "servedModelName": s.launch.served_name, "port": s.launch.port,
            "args": s.args, "env": env}),
    )
}

async fn set_waiting(State(s): State<Arc<Served>>, body: String) -> Response {
    match body.trim().parse::<i64>() {
        Ok(n) => {
            s.waiting.set(n);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(_) => error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            format!("want a number, got {body:?}"),
        ),
    }
}
