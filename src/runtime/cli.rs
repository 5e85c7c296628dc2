//! The command line. Every `run` flag can also come from the environment, so
//! the Helm chart and kustomize overlays configure the operator without
//! rewriting its arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kubernetes operator that serves AI models on GPUs from ModelService objects.
#[derive(Parser, Debug)]
#[command(
    name = "modelservice-operator",
    version,
    about,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller against the cluster from in-cluster config, KUBECONFIG or ~/.kube/config.
    Run(RunArgs),
    /// Print the ModelService CustomResourceDefinition (the same as crds/modelservice.yaml).
    Crd,
    /// Print, offline, the Deployment, Service and HPA the operator would create for a ModelService.
    Render(RenderArgs),
    /// Convert ModelService manifests offline between API versions (other documents pass through).
    Convert(ConvertArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Watch ModelServices in this namespace only (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,

    /// Take the Lease `modelservice-operator` before reconciling, so that only one replica writes.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,

    /// Namespace of the leader Lease (default: POD_NAMESPACE, else "default").
    #[arg(long, env = "LEASE_NAMESPACE", value_name = "NS")]
    pub lease_namespace: Option<String>,

    /// How long a Lease stays valid without renewal; a standby takes over after it (e.g. 15s).
    #[arg(long, env = "LEASE_DURATION", default_value = "15s", value_parser = parse_lease_duration)]
    pub lease_duration: Duration,

    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Log format: json for log pipelines, text for people.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, e.g. info or modelservice_operator=debug,kube=info (default: RUST_LOG, else info).
    #[arg(long, env = "LOG_LEVEL")]
    pub log_level: Option<String>,

    /// Reconciles run at once (1-1000).
    #[arg(long, env = "CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,

    /// How often a settled ModelService is reconciled anyway, as a safety net (e.g. 5m).
    #[arg(long, env = "RESYNC_PERIOD", default_value = "5m", value_parser = parse_positive_duration)]
    pub resync_period: Duration,

    /// How long to wait at startup for the API server and the CRD before giving up (e.g. 2m).
    #[arg(long, env = "STARTUP_TIMEOUT", default_value = "2m", value_parser = parse_positive_duration)]
    pub startup_timeout: Duration,
}

#[derive(Args, Debug, Clone)]
pub struct RenderArgs {
    /// A YAML file with one or more ModelService documents; - reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Namespace for documents that do not set one.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// A YAML file of manifests; - reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// The API version to write ModelServices in.
    #[arg(long, value_enum)]
    pub to: TargetVersion,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetVersion {
    #[value(name = "v1beta1")]
    V1beta1,
    #[value(name = "v1alpha1")]
    V1alpha1,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .or_else(|_| s.parse::<u64>().map(Duration::from_secs))
        .map_err(|_| format!("{s:?} is not a duration; write it like 30s, 5m or 1h"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_lease_duration(s: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(s)?;
    if d < Duration::from_secs(5) {
        return Err(format!(
            "{s:?} is too short; a lease needs at least 5s to be renewed in time"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("modelservice-operator").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        match parse(args).expect("parses").command {
            Command::Run(r) => r,
            other => panic!("expected run, got {other:?}"),
        }
    }

    #[test]
    fn run_defaults() {
        let r = run_args(&["run"]);
        assert_eq!(r.namespace, None);
        assert!(!r.leader_elect);
        assert_eq!(r.metrics_addr, "0.0.0.0:8080".parse().expect("addr"));
        assert_eq!(r.lease_duration, Duration::from_secs(15));
        assert_eq!(r.resync_period, Duration::from_secs(300));
        assert_eq!(r.concurrency, 16);
    }

    #[test]
    fn run_flags() {
        let r = run_args(&[
            "run",
            "--namespace",
            "ml",
            "--leader-elect",
            "--lease-namespace",
            "ops",
            "--lease-duration",
            "20s",
            "--metrics-addr",
            "127.0.0.1:9090",
            "--log-format",
            "json",
            "--concurrency",
            "4",
            "--resync-period",
            "90s",
        ]);
        assert_eq!(r.namespace.as_deref(), Some("ml"));
        assert!(r.leader_elect);
        assert_eq!(r.lease_namespace.as_deref(), Some("ops"));
        assert_eq!(r.lease_duration, Duration::from_secs(20));
        assert_eq!(r.log_format, LogFormat::Json);
        assert_eq!(r.concurrency, 4);
        assert_eq!(r.resync_period, Duration::from_secs(90));
        let explicit = run_args(&["run", "--leader-elect=false"]);
        assert!(!explicit.leader_elect);
    }

    #[test]
    fn bad_values_say_what_to_fix() {
        for (args, needle) in [
            (&["run", "--metrics-addr", "nowhere"][..], "--metrics-addr"),
            (&["run", "--lease-duration", "2s"][..], "too short"),
            (&["run", "--resync-period", "soon"][..], "30s, 5m or 1h"),
            (&["run", "--concurrency", "0"][..], "--concurrency"),
            (&["run", "--log-format", "xml"][..], "--log-format"),
            (&["run", "--no-such-flag"][..], "--no-such-flag"),
        ] {
            let err = parse(args).expect_err("must fail").to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn render_needs_a_file() {
        assert!(parse(&["render"]).is_err());
        match parse(&["render", "-f", "ms.yaml"]).expect("parses").command {
            Command::Render(r) => assert_eq!(r.file, PathBuf::from("ms.yaml")),
            other => panic!("expected render, got {other:?}"),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_positive_duration("300"), Ok(Duration::from_secs(300)));
        assert_eq!(
            parse_positive_duration("1m30s"),
            Ok(Duration::from_secs(90))
        );
        assert!(parse_positive_duration("0s").is_err());
    }
}
