//! Convergence benchmark: the real operator binary against the fake API
//! server, or with `MODELSERVICE_E2E=1` against the cluster of the current
//! kubeconfig.
//!
//! `cargo bench --bench convergence -- [--n 100,1000,5000] [--concurrency 16]`
//!
//! For each N it measures cold convergence (N ModelServices created at once
//! until every one has its Deployment and Service and
//! `status.observedGeneration == metadata.generation`), rollout convergence (a
//! spec change to all N), and an idle period across resyncs. It reports wall
//! time, the operator's requests per ModelService by verb (from the
//! operator's own `modelservice_api_requests_total`, so the numbers mean the
//! same on both back ends), CPU, peak RSS and p50/p99 reconcile duration from
//! its own histogram. It also times minimal clients that only issue the
//! writes convergence needs, and create-to-Deployment latency on an idle
//! server. It prints Markdown; it asserts nothing.

mod backend;
mod measure;
mod minimal;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backend::Backend;
use fake_apiserver::localhost::{free_port, http_get};
use futures::{Stream, StreamExt, stream};
use kube::Api;
use kube::api::{Patch, PatchParams};
use measure::{Requests, cpu_seconds, memory, per_ms, quantile, requests, since, total, writes};
use modelservice_operator::api::ModelService;

/// The operator binary, killed (gently) when dropped.
struct Operator {
    child: Child,
    port: u16,
}

impl Operator {
    fn start(kubeconfig: Option<&Path>, namespace: &str, concurrency: u16) -> Operator {
        let port = free_port();
        let binary = env!("CARGO_BIN_EXE_modelservice-operator");
        // MODELSERVICE_BENCH_WRAPPER runs the operator under a profiler, e.g.
        // "valgrind --tool=massif --massif-out-file=/tmp/massif.%p.out".
        let wrapper = std::env::var("MODELSERVICE_BENCH_WRAPPER").unwrap_or_default();
        let mut words = wrapper.split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        command
            .args(["run", "--namespace", namespace])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--webhook-addr", "127.0.0.1:0"])
            .args([
                "--webhook-secret",
                &format!("{namespace}/modelservice-operator-webhook-certs"),
            ])
            .args(["--concurrency", &concurrency.to_string()])
            .args(["--resync-period", "2s", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(kc) = kubeconfig {
            command.env("KUBECONFIG", kc);
        }
        let child = command.spawn().expect("start operator");
        Operator { child, port }
    }

    /// Waits until the operator's caches are synced (`/readyz`); false
    /// after 60 s. Never panics: on a cluster, a panic would skip the
    /// namespace clean-up.
    async fn ready(&self) -> bool {
        let t = Instant::now();
        while !matches!(http_get(self.port, "/readyz"), Some((200, _))) {
            if t.elapsed() > Duration::from_secs(60) {
                eprintln!("the operator was not ready within 60 s");
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }

    fn metrics(&self) -> String {
        http_get(self.port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for Operator {
    /// SIGTERM first, so that the operator shuts down as in a cluster (and a
    /// profiler wrapping it writes its report); SIGKILL after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn name(i: usize) -> String {
    format!("m{i:05}")
}

/// Waits for convergence; false after 30 minutes (no panic, see `ready`).
async fn wait_converged(b: &Backend, n: usize, generation: i64, arg: &str) -> bool {
    let t = Instant::now();
    let every = match b {
        Backend::Fake { .. } => Duration::from_millis(20),
        Backend::Cluster { .. } => Duration::from_millis(250),
    };
    while !b.converged(n, generation, arg).await {
        if t.elapsed() > Duration::from_secs(1800) {
            eprintln!("N={n}: no convergence to generation {generation} within 30 minutes");
            return false;
        }
        tokio::time::sleep(every).await;
    }
    true
}

/// Applies all N ModelServices (with `arg`), as a user would.
async fn apply_all(b: &Backend, n: usize, arg: &str) {
    creates(b, n, arg).for_each(|_| async {}).await;
}

/// Applies the N ModelServices 64 at a time, yielding each as the server
/// stored it as soon as it is applied.
fn creates<'a>(b: &'a Backend, n: usize, arg: &'a str) -> impl Stream<Item = ModelService> + 'a {
    stream::iter(0..n)
        .map(move |i| apply_one(b, i, arg))
        .buffer_unordered(64)
        .filter_map(|ms| async move { ms })
}

/// Applies ModelService number `i`; returns it as the server stored it.
async fn apply_one(b: &Backend, i: usize, arg: &str) -> Option<ModelService> {
    let api: Api<ModelService> = Api::namespaced(b.client(), b.namespace());
    let pp = PatchParams::apply("bench-user").force();
    api.patch(&name(i), &pp, &Patch::Apply(b.model_service(&name(i), arg)))
        .await
        .ok()
}

/// One phase's cost: requests, writes and CPU.
struct Cost {
    requests: Requests,
    operator_cpu: f64,
    driver_cpu: f64,
}

struct Mark {
    requests: Requests,
    operator_cpu: f64,
    driver_cpu: f64,
}

/// Requests so far: on the fake, as the server counted them over TCP (only
/// the operator uses TCP); on a cluster, as the operator counted them itself.
fn mark(b: &Backend, op: &Operator) -> Mark {
    let requests = match b.server_counts() {
        Some(c) => c
            .iter()
            .map(|((verb, resource), n)| (format!("{} {resource}", verb.as_str()), n as f64))
            .collect(),
        None => requests(&op.metrics()),
    };
    Mark {
        requests,
        operator_cpu: cpu_seconds(&op.pid()),
        driver_cpu: cpu_seconds("self"),
    }
}

fn cost(b: &Backend, op: &Operator, from: &Mark) -> Cost {
    let now = mark(b, op);
    Cost {
        requests: since(&now.requests, &from.requests),
        operator_cpu: now.operator_cpu - from.operator_cpu,
        driver_cpu: now.driver_cpu - from.driver_cpu,
    }
}

fn row(n: usize, phase: &str, wall: Option<Duration>, c: &Cost) {
    let (wall, rate) = match wall {
        Some(w) => (
            format!("{:.2} s", w.as_secs_f64()),
            format!("{:.0}/s", n as f64 / w.as_secs_f64()),
        ),
        None => ("-".into(), "-".into()),
    };
    println!(
        "| {n} | {phase} | {wall} | {rate} | {:.0} | {} | {:.2} s / {:.2} s |",
        writes(&c.requests),
        per_ms(&c.requests, n),
        c.operator_cpu,
        c.driver_cpu
    );
}

/// All phases for one N; returns the cold convergence time.
async fn run_n(run: usize, n: usize, concurrency: u16) -> Option<Duration> {
    let b = Backend::new(run).await;
    let op = Operator::start(b.kubeconfig(), b.namespace(), concurrency);
    if !op.ready().await {
        b.finish().await;
        return None;
    }
    let counted_before = requests(&op.metrics());

    let m = mark(&b, &op);
    let t = Instant::now();
    apply_all(&b, n, "--v1").await;
    let created = t.elapsed();
    if !wait_converged(&b, n, 1, "--v1").await {
        b.finish().await;
        return None;
    }
    let cold = t.elapsed();
    let cold_cost = cost(&b, &op, &m);
    if b.server_counts().is_some() {
        let server: f64 = cold_cost.requests.values().sum();
        let counted: f64 = since(&requests(&op.metrics()), &counted_before)
            .values()
            .sum();
        eprintln!(
            "N={n} cold: the fake server saw {server:.0} requests from the operator; the operator counted {counted:.0}"
        );
    }
    row(
        n,
        &format!("cold (creates took {:.2} s)", created.as_secs_f64()),
        Some(cold),
        &cold_cost,
    );

    let m = mark(&b, &op);
    let t = Instant::now();
    apply_all(&b, n, "--v2").await;
    if !wait_converged(&b, n, 2, "--v2").await {
        b.finish().await;
        return None;
    }
    row(n, "rollout", Some(t.elapsed()), &cost(&b, &op, &m));

    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = mark(&b, &op);
    tokio::time::sleep(Duration::from_secs(10)).await;
    row(
        n,
        "steady, 10 s (resync every 2 s)",
        None,
        &cost(&b, &op, &m),
    );

    let metrics = op.metrics();
    let mem = memory(op.child.id());
    println!(
        "| {n} | totals | {:.0} reconciles | p50 {:.1} ms, p99 {:.1} ms | RSS {:.1} MiB (heap {:.1}, binary {:.1}) | peak {:.1} MiB, {:.1} KiB per ModelService | events {:.0} published, {:.0} dropped |",
        total(&metrics, "modelservice_reconcile_total"),
        quantile(&metrics, "modelservice_reconcile_duration_seconds", 0.5) * 1000.0,
        quantile(&metrics, "modelservice_reconcile_duration_seconds", 0.99) * 1000.0,
        mem.rss as f64 / 1024.0,
        mem.anon as f64 / 1024.0,
        mem.file as f64 / 1024.0,
        mem.peak as f64 / 1024.0,
        mem.peak as f64 / n as f64,
        events(&metrics, "published"),
        events(&metrics, "dropped"),
    );
    // The operator removes its finalizers while the namespace goes.
    b.finish().await;
    drop(op);
    Some(cold)
}

fn events(metrics: &str, result: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("modelservice_events_total{{result=\"{result}\"}}")))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0
}

/// Create → Deployment exists, one at a time on an idle server.
async fn latency(run: usize, samples: usize) {
    let b = Backend::new(run).await;
    let op = Operator::start(b.kubeconfig(), b.namespace(), 16);
    if !op.ready().await {
        return b.finish().await;
    }
    let api: Api<ModelService> = Api::namespaced(b.client(), b.namespace());
    let mut lat = Vec::new();
    for i in 0..samples {
        let name = format!("l{i:04}");
        let t = Instant::now();
        let pp = PatchParams::apply("bench-user").force();
        let _ = api
            .patch(&name, &pp, &Patch::Apply(b.model_service(&name, "--v1")))
            .await;
        while !b.deployment_exists(&name).await && t.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lat.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lat.sort();
    let p = |q: f64| {
        lat[((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len()) - 1].as_secs_f64() * 1000.0
    };
    println!(
        "create → Deployment exists ({samples} samples, idle {}): p50 {:.1} ms, p99 {:.1} ms",
        b.name(),
        p(0.5),
        p(0.99)
    );
    // The operator removes its finalizers while the namespace goes.
    b.finish().await;
    drop(op);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let ns: Vec<usize> = value("--n")
        .unwrap_or_else(|| "100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let concurrency: u16 = value("--concurrency")
        .and_then(|c| c.parse().ok())
        .unwrap_or(16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("Back end: {}", if backend::real_cluster() { "cluster (current kubeconfig)" } else { "fake API server" });
        println!();
        println!("| N | phase | wall time | rate | writes | operator requests per ModelService | CPU: operator / driver |");
        println!("|---|---|---|---|---|---|---|");
        let mut run = 0;
        let mut cold = Vec::new();
        for &n in &ns {
            run += 1;
            cold.push(run_n(run, n, concurrency).await);
        }
        println!();
        let mut baselines = Vec::new();
        for &n in &ns {
            let four = minimal::measure(&mut run, n, concurrency as usize, false).await;
            let five = minimal::measure(&mut run, n, concurrency as usize, true).await;
            baselines.push((four, five));
        }
        println!();
        println!("| N | operator cold (from first create) | 4-write client from first create | 5-write client from first create | operator ÷ 4-write | operator ÷ 5-write |");
        println!("|---|---|---|---|---|---|");
        for ((n, op), (four, five)) in ns.iter().zip(&cold).zip(&baselines) {
            let Some(op) = op else { continue };
            let ratio = |d: Duration| op.as_secs_f64() / d.as_secs_f64();
            println!(
                "| {n} | {:.2} s | {:.2} s | {:.2} s | {:.2}× | {:.2}× |",
                op.as_secs_f64(),
                four.as_secs_f64(),
                five.as_secs_f64(),
                ratio(*four),
                ratio(*five),
            );
        }
        println!();
        run += 1;
        latency(run, 100).await;
    });
}
