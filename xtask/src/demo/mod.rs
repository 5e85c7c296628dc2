//! `cargo xtask demo`: the operator at work without a cluster. It starts the
//! project's fake API server with simulated GPU nodes, runs the operator
//! binary against it, applies the samples and shows, as it happens, what a
//! user would watch; then it leaves the cluster up for `kubectl` until
//! Ctrl-C (or, with `--exit-when-converged`, exits 0).
//!
//! The demo lives here, not in the operator binary, so that the product
//! carries no test code.

mod cluster;
mod rows;
mod screen;
mod story;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use fake_apiserver::simulator::ClusterShape;

/// What `cargo xtask demo` was asked.
pub struct Options {
    /// The operator binary; built with cargo when not given.
    pub operator: Option<PathBuf>,
    pub exit_when_converged: bool,
}

/// Builds the operator binary, as `cargo run` would.
fn build_operator(root: &Path) -> Result<PathBuf, String> {
    println!("building the operator (cargo build --bin modelservice-operator) …");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--locked", "--bin", "modelservice-operator"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build --bin modelservice-operator failed".into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target.join("debug/modelservice-operator"))
}

pub fn run(root: &Path, options: Options) -> ExitCode {
    // Paths in what the demo prints read better without `xtask/..`.
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let root = root.as_path();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo(root, options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(root: &Path, options: Options) -> Result<(), String> {
    let operator = match options.operator {
        Some(p) => p,
        None => build_operator(root)?,
    };
    if !operator.is_file() {
        return Err(format!(
            "no operator binary at {} (cargo build --bin modelservice-operator)",
            operator.display()
        ));
    }
    let dir = root.join("target/demo");
    let shape = ClusterShape {
        nodes: 3,
        gpus_per_node: 2,
        ..ClusterShape::default()
    };
    let gateway = root.join("tests/fixtures/crds/gateway.networking.k8s.io_httproutes.yaml");
    let cluster = cluster::start(&dir, &operator, shape, &[gateway]).await?;
    println!(
        "an API server with 3 simulated GPU nodes and Gateway API is up; the operator runs against it\n(its log: {})\n",
        cluster.operator_log.display()
    );
    let mut screen = screen::Screen::new(cluster.client.clone());
    let told = story::run(&cluster, &mut screen, &root.join("config/samples")).await;
    if let Err(e) = told {
        let log = std::fs::read_to_string(&cluster.operator_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{e}\nthe operator's last lines:\n{}",
            tail.join("\n")
        ));
    }
    println!(
        "\n{:>5.1}s  converged: every step showed what it should.",
        screen.elapsed()
    );
    if options.exit_when_converged {
        return Ok(());
    }
    println!(
        "\nThe cluster stays up until Ctrl-C. In another terminal:\n  export KUBECONFIG={}\n  kubectl get modelservices,deployments,services,horizontalpodautoscalers -n {ns}\n  kubectl apply --validate=false -n {ns} -f config/samples/sglang.yaml\n",
        cluster.kubeconfig.display(),
        ns = cluster::NAMESPACE
    );
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {
                screen.refresh().await;
            }
        }
    }
    println!("stopped.");
    Ok(())
}
