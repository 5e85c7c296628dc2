//! Convergence benchmark: the real operator binary against the fake API server.
//!
//! `cargo bench --bench convergence -- [--n 100,1000,5000] [--concurrency 16]`
//!
//! For each N it measures cold convergence (N ModelServices created at once
//! until every one has its Deployment and Service and
//! `status.observedGeneration == metadata.generation`), rollout convergence (a
//! spec change to all N), and an idle period across resyncs; it reports wall
//! time, requests per ModelService by verb (only the operator's: it alone
//! talks to the fake over TCP), the operator's peak RSS, and p50/p99 reconcile
//! duration from its own histogram. It also times a minimal client that only
//! issues the writes convergence needs, and create-to-Deployment latency on an
//! idle server. It prints Markdown; it asserts nothing.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, RequestCounts};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use modelservice_operator::api::ModelService;
use serde_json::{Value, json};

const NS: &str = "bench";

fn ms(name: &str, arg: &str) -> Value {
    json!({"apiVersion": "serving.modelservice.dev/v1alpha1", "kind": "ModelService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"model": "org/model", "image": "vllm/vllm-openai:v0.8.5", "gpus": 1, "args": [arg]}})
}

struct Operator {
    child: Child,
    port: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(18080)
}

fn start_operator(kubeconfig: &std::path::Path, concurrency: u16) -> Operator {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_modelservice-operator"))
        .args([
            "run",
            "--namespace",
            NS,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "--concurrency",
            &concurrency.to_string(),
            "--resync-period",
            "2s",
            "--log-level",
            "warn",
        ])
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start operator");
    Operator { child, port }
}

fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// p-quantile from a Prometheus histogram's cumulative buckets.
fn quantile(metrics: &str, q: f64) -> f64 {
    let mut buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with("modelservice_reconcile_duration_seconds_bucket"))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, l.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    if total == 0.0 {
        return 0.0;
    }
    let target = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in buckets {
        if c >= target {
            if le.is_infinite() {
                return prev.0;
            }
            let frac = if c > prev.1 {
                (target - prev.1) / (c - prev.1)
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}

fn per_ms(c: &RequestCounts, n: usize) -> String {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for ((v, r), k) in c.iter() {
        *by.entry(format!("{} {r}", v.as_str())).or_default() += k;
    }
    by.iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / n as f64))
        .collect::<Vec<_>>()
        .join("; ")
}

fn writes(c: &RequestCounts) -> u64 {
    c.iter()
        .filter(|((v, _), _)| v.is_write())
        .map(|(_, n)| n)
        .sum()
}

/// Every ModelService observed at `generation`, with its Deployment and Service present.
fn converged(fake: &FakeApiServer, n: usize, generation: i64, arg: &str) -> bool {
    let ms = fake.list_objects("serving.modelservice.dev", "modelservices");
    let ok = ms
        .iter()
        .filter(|m| {
            m["metadata"]["generation"] == json!(generation)
                && m["status"]["observedGeneration"] == json!(generation)
        })
        .count();
    if ok < n {
        return false;
    }
    let deps = fake.list_objects("apps", "deployments");
    let current = deps
        .iter()
        .filter(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == arg))
        })
        .count();
    current >= n && fake.list_objects("", "services").len() >= n
}

async fn wait(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what} did not converge in {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.elapsed()
}

async fn create_all(client: &Client, n: usize, arg: &str) {
    let api: Api<ModelService> = Api::namespaced(client.clone(), NS);
    stream::iter(0..n)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            async move {
                let _ = api
                    .patch(
                        &format!("m{i:05}"),
                        &PatchParams::apply("bench-user").force(),
                        &Patch::Apply(ms(&format!("m{i:05}"), arg)),
                    )
                    .await;
            }
        })
        .await;
}

async fn setup() -> (FakeApiServer, tempfile::TempDir, std::path::PathBuf) {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&kc).expect("kubeconfig");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns");
    Api::<Namespace>::all(fake.client())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    (fake, dir, kc)
}

async fn run_n(n: usize, concurrency: u16) {
    let (fake, _dir, kc) = setup().await;
    let client = fake.client();
    let op = start_operator(&kc, concurrency);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = fake.tcp_counts();

    let t = Instant::now();
    create_all(&client, n, "--v1").await;
    let cold = wait("cold", Duration::from_secs(900), || {
        converged(&fake, n, 1, "--v1")
    })
    .await;
    let cold_total = t.elapsed();
    let cold_counts = fake.tcp_counts().since(&base);

    let base = fake.tcp_counts();
    let t = Instant::now();
    create_all(&client, n, "--v2").await;
    wait("rollout", Duration::from_secs(900), || {
        converged(&fake, n, 2, "--v2")
    })
    .await;
    let rollout = t.elapsed();
    let rollout_counts = fake.tcp_counts().since(&base);

    tokio::time::sleep(Duration::from_secs(3)).await;
    let base = fake.tcp_counts();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let steady = fake.tcp_counts().since(&base);

    let metrics = http_get(op.port, "/metrics");
    let reconciles: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("modelservice_reconcile_total"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum();
    let (rss, hwm) = rss_kib(op.child.id());
    println!(
        "| {n} | cold | {:.2} s ({:.2} s incl. creates) | {:.0}/s | {} | {} |",
        cold.as_secs_f64(),
        cold_total.as_secs_f64(),
        n as f64 / cold_total.as_secs_f64(),
        writes(&cold_counts),
        per_ms(&cold_counts, n)
    );
    println!(
        "| {n} | rollout | {:.2} s | {:.0}/s | {} | {} |",
        rollout.as_secs_f64(),
        n as f64 / rollout.as_secs_f64(),
        writes(&rollout_counts),
        per_ms(&rollout_counts, n)
    );
    println!(
        "| {n} | steady 10 s (resync 2 s) | - | - | {} | {} |",
        writes(&steady),
        per_ms(&steady, n)
    );
    println!(
        "| {n} | totals | reconciles {reconciles:.0} | p50 {:.1} ms, p99 {:.1} ms | RSS {:.1} MiB now, peak {:.1} MiB | {:.1} KiB per ModelService (peak) |",
        quantile(&metrics, 0.5) * 1000.0,
        quantile(&metrics, 0.99) * 1000.0,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        hwm as f64 / n as f64
    );
}

/// A client that only issues what convergence needs: finalizer, two applies
/// and one status write per ModelService, over TCP like the operator.
async fn baseline(n: usize, concurrency: usize) {
    let (fake, _dir, kc) = setup().await;
    create_all(&fake.client(), n, "--v1").await;
    let cfg = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kc).expect("kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("config");
    let client = Client::try_from(cfg).expect("client");
    let client = Arc::new(client);
    let t = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let client = client.clone();
            async move {
                let name = format!("m{i:05}");
                let pp = PatchParams::apply("baseline").force();
                let msapi: Api<ModelService> = Api::namespaced((*client).clone(), NS);
                let _ = msapi.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["x/y"]}}))).await;
                let deps: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced((*client).clone(), NS);
                let _ = deps.patch(&name, &pp, &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": {"a": name}}, "template": {"metadata": {"labels": {"a": name}}, "spec": {"containers": [{"name": "server", "image": "i", "args": ["--v1"]}]}}}}))).await;
                let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced((*client).clone(), NS);
                let _ = svcs.patch(&name, &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"selector": {"a": name}, "ports": [{"name": "http", "port": 8000}]}}))).await;
                let _ = msapi.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {"observedGeneration": 1}}))).await;
            }
        })
        .await;
    println!(
        "| {n} | minimal client (4 writes per ModelService, concurrency {concurrency}) | {:.2} s | {:.0}/s |",
        t.elapsed().as_secs_f64(),
        n as f64 / t.elapsed().as_secs_f64()
    );
}

/// Create → Deployment exists, one at a time on an idle server.
async fn latency(samples: usize) {
    let (fake, _dir, kc) = setup().await;
    let _op = start_operator(&kc, 16);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let api: Api<ModelService> = Api::namespaced(fake.client(), NS);
    let mut lat = Vec::new();
    for i in 0..samples {
        let name = format!("l{i:04}");
        let t = Instant::now();
        let _ = api
            .patch(
                &name,
                &PatchParams::apply("bench-user").force(),
                &Patch::Apply(ms(&name, "--v1")),
            )
            .await;
        while fake.get_object("apps", "deployments", NS, &name).is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if t.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        lat.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lat.sort();
    let p = |q: f64| {
        lat[((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len()) - 1].as_secs_f64() * 1000.0
    };
    println!(
        "create → Deployment exists ({samples} samples, idle server): p50 {:.1} ms, p99 {:.1} ms",
        p(0.5),
        p(0.99)
    );
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
        println!("| N | phase | wall time | rate | operator writes | operator requests per ModelService |");
        println!("|---|---|---|---|---|---|");
        for &n in &ns {
            run_n(n, concurrency).await;
        }
        println!();
        for &n in &ns {
            baseline(n, concurrency as usize).await;
        }
        println!();
        latency(100).await;
    });
}
