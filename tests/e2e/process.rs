//! The binary as a process: admin endpoints, clean SIGTERM, clear failures.

use std::process::Command;
use std::time::Duration;

use crate::harness::{CONVERGE, Env, wait_for};
use crate::observe::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_metrics_health_and_readiness_and_exits_zero_on_sigterm() {
    let env = Env::new().await;
    let mut op = env.operator().start();
    wait_for("/healthz", CONVERGE, || async {
        (op.get("/healthz")?.0 == 200).then_some(())
    })
    .await;
    op.ready().await;
    env.apply_ms("metered", cpu_spec()).await;
    wait_ms(&env, "metered", "status", CONVERGE, |_| true).await;

    // A reconcile writes the status before it ends and is counted, so the
    // first status can be seen a moment before the reconcile's series (CI
    // once read /metrics in that moment): every series must come, soon.
    let series = [
        "modelservice_reconcile_total",
        "modelservice_reconcile_duration_seconds_bucket",
        "modelservice_ready{",
        "modelservice_resources{",
        "modelservice_condition_reason{",
        "modelservice_leader 1",
    ];
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let (code, body) = op.get("/metrics").expect("/metrics answers");
        assert_eq!(code, 200);
        if series.iter().all(|s| body.contains(s)) {
            break;
        }
        let missing: Vec<&str> = series
            .iter()
            .filter(|s| !body.contains(*s))
            .copied()
            .collect();
        assert!(
            std::time::Instant::now() < deadline,
            "/metrics lacks {missing:?}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    op.signal("TERM");
    let status = op.exited(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", op.logs());
    env.finish().await;
}

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_modelservice-operator"))
}

#[test]
fn a_bad_flag_exits_non_zero_saying_what_to_fix() {
    let out = binary()
        .args(["run", "--lease-duration", "1s"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--lease-duration") && err.contains("too short"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn flags_can_come_from_the_environment() {
    let out = binary()
        .args(["run"])
        .env("CONCURRENCY", "zero")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--concurrency") && err.contains("zero"),
        "{err}"
    );
}

#[test]
fn webhook_url_and_service_exclude_each_other_also_from_the_environment() {
    let out = binary()
        .args(["run", "--webhook-service", "ops/hook"])
        .env("WEBHOOK_URL", "https://127.0.0.1:9443/convert")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--webhook-service") && err.contains("--webhook-url"),
        "{err}"
    );
}

#[test]
fn a_missing_kubeconfig_exits_non_zero_with_a_clear_message() {
    let out = binary()
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .env_clear()
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", "/nonexistent")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Kubernetes configuration"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn render_prints_the_children_offline() {
    let out = binary()
        .args([
            "render",
            "-f",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/samples/minimal.yaml"),
        ])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let y = String::from_utf8_lossy(&out.stdout);
    assert!(
        y.contains("kind: Deployment") && y.contains("kind: Service"),
        "{y}"
    );
}

#[test]
fn crd_prints_the_committed_crd() {
    let out = binary().arg("crd").output().expect("runs");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crds/modelservice.yaml"
    ))
    .expect("crd");
    assert_eq!(String::from_utf8_lossy(&out.stdout), committed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_is_waited_for_then_reported() {
    const CRD_NAME: &str = "modelservices.serving.modelservice.dev";
    if !needs_fake("a_missing_crd_is_waited_for_then_reported") {
        return;
    }
    let env = Env::new().await;
    // Deleted through the API, as on a real server: the CRD object goes with
    // its type. (Removing only the type would leave a CRD that the
    // operator's webhook maintenance patches, which serves the type again.)
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(env.client.clone());
    crds.delete(CRD_NAME, &Default::default())
        .await
        .expect("delete the CRD");
    crate::harness::wait_for("the CRD to be gone", Duration::from_secs(30), || {
        let crds = crds.clone();
        async move {
            crds.get_opt(CRD_NAME)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await;
    let mut op = env.operator().arg("--startup-timeout").arg("3s").start();
    let status = op.exited(Duration::from_secs(30)).await;
    assert!(!status.success());
    let logs = op.logs();
    assert!(logs.contains("CRD is not installed"), "{logs}");
    assert!(
        logs.contains("waiting for the API server"),
        "a retry was logged first: {logs}"
    );
    assert!(!logs.contains("panicked"), "{logs}");
}

/// The operator turns transparent huge pages off for itself (see
/// `src/main.rs`): the kernel says so in the process's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transparent_huge_pages_are_off_for_the_operator() {
    let env = Env::new().await;
    let op = env.operator().start();
    op.ready().await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", op.pid())).unwrap_or_default();
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        eprintln!(
            "SKIPPED transparent_huge_pages_are_off_for_the_operator: this kernel does not report THP_enabled"
        );
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    drop(op);
    env.finish().await;
}
