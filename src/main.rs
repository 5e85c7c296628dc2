//! Entry point: parse the command line and hand over to `runtime`.
//! Failures end as one line on stderr and a non-zero exit, never a panic.

use std::process::ExitCode;

use clap::Parser;
use modelservice_operator::api::crd_yaml;
use modelservice_operator::controller::ControllerConfig;
use modelservice_operator::runtime::cli::{Cli, Command, LogFormat, RunArgs};
use modelservice_operator::runtime::leader::{self, ElectionConfig};
use modelservice_operator::runtime::run::{RunConfig, run};
use modelservice_operator::runtime::{logging, render, shutdown};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("cannot render the CRD: {e}")),
        },
        Command::Render(args) => {
            let input = if args.file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(&args.file)
            };
            let yaml = match input {
                Ok(y) => y,
                Err(e) => return fail(&format!("cannot read {}: {e}", args.file.display())),
            };
            match render::render(&yaml, &args.namespace) {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Command::Run(args) => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
            };
            match rt.block_on(run_command(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
    }
}

/// Stand-in for the core's conversion until it lands: only rewrites
/// `apiVersion`. To switch, write `convert: modelservice_operator::core::convert::convert_object`
/// in `run_command` and delete this function.
fn placeholder_convert(
    mut object: serde_json::Value,
    desired_api_version: &str,
) -> Result<serde_json::Value, String> {
    match object.as_object_mut() {
        Some(o) => {
            o.insert("apiVersion".into(), desired_api_version.into());
            Ok(object)
        }
        None => Err("not a JSON object".into()),
    }
}

fn fail(msg: &str) -> ExitCode {
    tracing::error!("{msg}");
    eprintln!("error: {msg}");
    ExitCode::FAILURE
}

async fn run_command(args: RunArgs) -> Result<(), String> {
    logging::init(args.log_format, args.log_level.as_deref())?;
    if args.log_format == LogFormat::Text {
        tracing::debug!("text logs");
    }
    let (trigger, signal) = shutdown::channel();
    shutdown::on_signals(trigger).map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let config = kube::Config::infer().await.map_err(|e| {
        format!(
            "no usable Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config): {e}"
        )
    })?;
    let identity = leader::default_identity();
    let cfg = RunConfig {
        namespace: args.namespace.clone(),
        election: args.leader_elect.then(|| ElectionConfig {
            namespace: leader::lease_namespace(args.lease_namespace.as_deref()),
            identity: identity.clone(),
            duration: args.lease_duration,
        }),
        metrics_addr: args.metrics_addr,
        controller: ControllerConfig {
            resync: args.resync_period,
            concurrency: args.concurrency,
            ..ControllerConfig::default()
        },
        startup_timeout: args.startup_timeout,
        reporter_instance: Some(identity),
        webhook: Some(args.webhook_config()),
        convert: placeholder_convert,
    };
    run(config, cfg, signal).await.map_err(|e| e.to_string())
}
