//! The command line. Every `run` flag can also come from the environment, so
//! the Helm chart and kustomize overlays configure the operator without
//! rewriting its arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::leader;
use crate::webhook::client_config::CONVERT_PATH;
use crate::webhook::secret::DEFAULT_SECRET_NAME;
use crate::webhook::{CRD_NAME, CertSource, ClientConfigTarget, WebhookConfig};

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

// Parsed once at startup, so the size of `Run` costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
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
    /// Download a model's weights into the cache volume (the operator's download Job runs this).
    ///
    /// Tokens come from the environment only (HF_TOKEN, BEARER_TOKEN), never from flags, which any
    /// process on the node can read.
    Fetch(FetchArgs),
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
    #[arg(long, env = "CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,

    /// Requests to the API server in flight at once, watches and the leader's Lease aside (1-1000): each holds a connection while it lasts.
    #[arg(long, env = "MAX_REQUESTS_IN_FLIGHT", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_requests_in_flight: u16,

    /// Events kept in order on their way to the API server; past this, further events wait, one per object and reason, and are never dropped (1-100000).
    #[arg(long, env = "EVENTS_QUEUE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub events_queue: u32,

    /// Objects per page when the operator lists ModelServices, their children or their pods, at start and after a watch is lost (1-10000): a smaller page holds less in memory at once, for more requests.
    #[arg(long, env = "LIST_PAGE_SIZE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub list_page_size: u32,

    /// How often a settled ModelService is reconciled anyway, as a safety net (e.g. 5m).
    #[arg(long, env = "RESYNC_PERIOD", default_value = "5m", value_parser = parse_positive_duration)]
    pub resync_period: Duration,

    /// Least time between two status writes of one ModelService that differ only in progress (messages, pod counts); news is written at once. 0 writes every change.
    #[arg(long, env = "STATUS_PACE", default_value = "2s", value_parser = parse_duration)]
    pub status_pace: Duration,

    /// How long a new generation's first status waits for its verdict (Ready, a Degraded reason, or the rollout ended) before its progress is written. 0 writes it at once.
    #[arg(long, env = "FIRST_REPORT_WAIT", default_value = "0s", value_parser = parse_duration)]
    pub first_report_wait: Duration,

    /// Prometheus server for KEDA triggers whose ModelService names none (autoscaling.keda.prometheus.address), e.g. http://prometheus.monitoring:9090.
    #[arg(long, env = "PROMETHEUS_ADDRESS", value_name = "URL")]
    pub prometheus_address: Option<String>,

    /// The endpoint picker image of InferencePools (route.backend InferencePool). Default: the Gateway API Inference Extension's last EPP, registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0.
    #[arg(long, env = "ENDPOINT_PICKER_IMAGE", value_name = "IMAGE")]
    pub endpoint_picker_image: Option<String>,

    /// The image of the Jobs that download model.source into the weights cache: this operator's own image, which has the `fetch` command. Default ghcr.io/modelservice/modelservice-operator:<this version>; the chart sets it to the image it runs.
    #[arg(long, env = "FETCH_IMAGE", value_name = "IMAGE")]
    pub fetch_image: Option<String>,

    /// How often the operator looks again for optional APIs (KEDA, Gateway API) that were missing or went away (e.g. 30s).
    #[arg(long, env = "DISCOVERY_INTERVAL", default_value = "30s", value_parser = parse_positive_duration)]
    pub discovery_interval: Duration,

    /// How long a surging rollout's new pod may wait for GPUs (the scheduler's Unschedulable, naming the GPU resource) before the rollout switches to replace (e.g. 10s). Also how long a canary may wait before it gives way to the stable track's rollout.
    #[arg(long, env = "SURGE_GRACE", default_value = "10s", value_parser = parse_duration)]
    pub surge_grace: Duration,

    /// How long one read of the cluster's nodes and pods serves the surge decisions that follow it (e.g. 5s). A pod of ours the scheduler cannot place ends it sooner.
    #[arg(long, env = "SURGE_READ_WINDOW", default_value = "5s", value_parser = parse_duration)]
    pub surge_read_window: Duration,

    /// How long to wait at startup for the API server and the CRD before giving up (e.g. 2m).
    #[arg(long, env = "STARTUP_TIMEOUT", default_value = "2m", value_parser = parse_positive_duration)]
    pub startup_timeout: Duration,

    /// Where the CRD conversion webhook listens (HTTPS, path /convert). Every replica serves it.
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub webhook_addr: SocketAddr,

    /// URL the API server calls for conversion, for an operator outside the cluster (e.g. https://127.0.0.1:9443/convert); put into the CRD with our CA.
    #[arg(long, env = "WEBHOOK_URL", value_name = "URL", conflicts_with = "webhook_service", value_parser = parse_webhook_url)]
    pub webhook_url: Option<String>,

    /// Service (port 443) in front of the operator's pods that the API server calls for conversion; put into the CRD with our CA.
    #[arg(long, env = "WEBHOOK_SERVICE", value_name = "NS/NAME", value_parser = parse_namespaced_name)]
    pub webhook_service: Option<NamespacedName>,

    /// Where the webhook's certificate comes from: self (own CA, kept in --webhook-secret) or external (cert-manager files in --webhook-cert-dir; the CRD is then left alone).
    #[arg(long, env = "WEBHOOK_CERTS", value_enum, default_value_t = WebhookCerts::SelfSigned)]
    pub webhook_certs: WebhookCerts,

    /// Directory with tls.crt and tls.key, with --webhook-certs=external.
    #[arg(
        long,
        env = "WEBHOOK_CERT_DIR",
        value_name = "DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub webhook_cert_dir: PathBuf,

    /// Secret with the webhook's CA and certificate, shared by all replicas, with --webhook-certs=self: NS/NAME, or NAME in the lease namespace (default: modelservice-operator-webhook-certs there).
    #[arg(long, env = "WEBHOOK_SECRET", value_name = "NS/NAME", value_parser = parse_secret_ref)]
    pub webhook_secret: Option<SecretRef>,
}

/// Where the webhook's serving certificate comes from.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookCerts {
    /// The operator's own CA and certificate, in a Secret; the CRD's caBundle is kept by the operator.
    #[value(name = "self")]
    SelfSigned,
    /// Mounted files from cert-manager, whose CA injector keeps the caBundle.
    External,
}

/// A `namespace/name` pair from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

/// `--webhook-secret`: a name, with a namespace or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub namespace: Option<String>,
    pub name: String,
}

impl RunArgs {
    /// The webhook's settings. The Secret's namespace defaults to the lease
    /// namespace (the pod's own), as the operator's other state does.
    ///
    /// Outside a cluster (`in_cluster` false: no `KUBERNETES_SERVICE_HOST`),
    /// with our own certificates and neither `--webhook-url` nor
    /// `--webhook-service`, the CRD is pointed at this process on this host
    /// (`https://127.0.0.1:PORT/convert`): a local `run` then serves
    /// v1alpha1 objects with no flag to learn. Not with port 0 (the port is
    /// not known before the bind; tests run side by side that way).
    pub fn webhook_config(&self, in_cluster: bool) -> WebhookConfig {
        let certs = match self.webhook_certs {
            WebhookCerts::External => CertSource::Files {
                dir: self.webhook_cert_dir.clone(),
            },
            WebhookCerts::SelfSigned => {
                let secret = self.webhook_secret.clone().unwrap_or(SecretRef {
                    namespace: None,
                    name: DEFAULT_SECRET_NAME.into(),
                });
                CertSource::Secret {
                    namespace: secret.namespace.unwrap_or_else(|| {
                        leader::lease_namespace(self.lease_namespace.as_deref())
                    }),
                    name: secret.name,
                }
            }
        };
        let client_config = match (&self.webhook_url, &self.webhook_service) {
            (Some(url), _) => Some(ClientConfigTarget::Url(url.clone())),
            (None, Some(s)) => Some(ClientConfigTarget::Service {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                port: 443,
            }),
            (None, None) if !in_cluster && self.webhook_certs == WebhookCerts::SelfSigned => {
                local_url(self.webhook_addr).map(ClientConfigTarget::Url)
            }
            (None, None) => None,
        };
        WebhookConfig {
            addr: self.webhook_addr,
            certs,
            client_config,
            crd_name: CRD_NAME.into(),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct RenderArgs {
    /// A YAML file with one or more ModelService documents; - reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Namespace for documents that do not set one.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The operator's --prometheus-address, for KEDA triggers whose ModelService names no server.
    #[arg(long, env = "PROMETHEUS_ADDRESS", value_name = "URL")]
    pub prometheus_address: Option<String>,
    /// The operator's --endpoint-picker-image, for route.backend InferencePool.
    #[arg(long, env = "ENDPOINT_PICKER_IMAGE", value_name = "IMAGE")]
    pub endpoint_picker_image: Option<String>,

    /// The image of the Jobs that download model.source into the weights cache: this operator's own image, which has the `fetch` command. Default ghcr.io/modelservice/modelservice-operator:<this version>; the chart sets it to the image it runs.
    #[arg(long, env = "FETCH_IMAGE", value_name = "IMAGE")]
    pub fetch_image: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// A YAML file of manifests; - reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// The API version to write ModelServices in (v1, the stable one, or a deprecated one).
    #[arg(long, value_enum)]
    pub to: TargetVersion,
}

#[derive(Args, Debug, Clone)]
pub struct FetchArgs {
    /// The model source: hf://org/name@revision, s3://bucket/prefix or https://host/file#sha256=<hex>. S3 keys, region and endpoint come from the environment only (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL).
    #[arg(long, value_name = "URI")]
    pub source: String,
    /// The cache volume's mount path.
    #[arg(long, value_name = "DIR")]
    pub dest: PathBuf,
    /// The source's directory under --dest (its cache key).
    #[arg(long, value_name = "DIR")]
    pub key: String,
    /// The claim's size in bytes: a download that cannot fit is refused before it starts.
    #[arg(long, value_name = "BYTES")]
    pub capacity: u64,
    /// Another directory under --dest to keep (a revision still served); repeatable. Every other directory is removed.
    #[arg(long, value_name = "DIR")]
    pub keep: Vec<String>,
    /// Where the one-line JSON outcome is written.
    #[arg(long, value_name = "FILE", default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    /// The Hugging Face hub (or a mirror of its API).
    #[arg(
        long,
        env = "HF_ENDPOINT",
        value_name = "URL",
        default_value = "https://huggingface.co"
    )]
    pub hf_endpoint: String,
    /// Log format (logs go to stderr; stdout carries only progress lines).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetVersion {
    #[value(name = "v1")]
    V1,
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

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .or_else(|_| s.parse::<u64>().map(Duration::from_secs))
        .map_err(|_| format!("{s:?} is not a duration; write it like 30s, 5m or 1h"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
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

/// The API server calls only `https://` URLs without user, query or fragment.
/// The URL at which an API server on this host reaches a webhook bound to
/// `addr`; none for port 0.
fn local_url(addr: SocketAddr) -> Option<String> {
    if addr.port() == 0 {
        return None;
    }
    let host = match addr.ip() {
        ip if ip.is_unspecified() || ip.is_loopback() => "127.0.0.1".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    Some(format!("https://{host}:{}{CONVERT_PATH}", addr.port()))
}

fn parse_webhook_url(s: &str) -> Result<String, String> {
    let uri: http::Uri = s.parse().map_err(|e| {
        format!("{s:?} is not a URL ({e}); write it like https://127.0.0.1:9443/convert")
    })?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "{s:?} must start with https:// (the API server calls webhooks over TLS only)"
        ));
    }
    if uri.host().is_none_or(str::is_empty) || s.contains('@') {
        return Err(format!(
            "{s:?} needs a host and no user, like https://127.0.0.1:9443/convert"
        ));
    }
    if s.contains('?') || s.contains('#') {
        return Err(format!("{s:?} must have no query or fragment"));
    }
    Ok(s.to_string())
}

fn parse_namespaced_name(s: &str) -> Result<NamespacedName, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(NamespacedName {
                namespace: ns.into(),
                name: name.into(),
            })
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

fn parse_secret_ref(s: &str) -> Result<SecretRef, String> {
    if s.contains('/') {
        let n = parse_namespaced_name(s)?;
        Ok(SecretRef {
            namespace: Some(n.namespace),
            name: n.name,
        })
    } else if s.is_empty() {
        Err("is empty; write NAMESPACE/NAME or NAME".into())
    } else {
        Ok(SecretRef {
            namespace: None,
            name: s.into(),
        })
    }
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
        assert_eq!(r.concurrency, 32);
        assert_eq!(r.max_requests_in_flight, 32);
        assert_eq!(r.discovery_interval, Duration::from_secs(30));
        assert_eq!(r.surge_grace, Duration::from_secs(10));
        assert_eq!(r.surge_read_window, Duration::from_secs(5));
        assert_eq!(r.prometheus_address, None);
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
            "--max-requests-in-flight",
            "8",
            "--resync-period",
            "90s",
        ]);
        assert_eq!(r.namespace.as_deref(), Some("ml"));
        assert!(r.leader_elect);
        assert_eq!(r.lease_namespace.as_deref(), Some("ops"));
        assert_eq!(r.lease_duration, Duration::from_secs(20));
        assert_eq!(r.log_format, LogFormat::Json);
        assert_eq!(r.concurrency, 4);
        assert_eq!(r.max_requests_in_flight, 8);
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
            (
                &["run", "--max-requests-in-flight", "0"][..],
                "--max-requests-in-flight",
            ),
            (&["run", "--log-format", "xml"][..], "--log-format"),
            (&["run", "--no-such-flag"][..], "--no-such-flag"),
        ] {
            let err = parse(args).expect_err("must fail").to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn outside_a_cluster_the_crd_is_pointed_at_this_host() {
        let local = |args: &[&str]| run_args(args).webhook_config(false).client_config;
        assert_eq!(
            local(&["run"]),
            Some(ClientConfigTarget::Url(
                "https://127.0.0.1:9443/convert".into()
            ))
        );
        assert_eq!(
            local(&["run", "--webhook-addr", "192.0.2.7:8443"]),
            Some(ClientConfigTarget::Url(
                "https://192.0.2.7:8443/convert".into()
            ))
        );
        assert_eq!(local(&["run", "--webhook-addr", "127.0.0.1:0"]), None);
        assert_eq!(local(&["run", "--webhook-certs", "external"]), None);
        assert_eq!(
            local(&["run", "--webhook-service", "ops/hook"]),
            Some(ClientConfigTarget::Service {
                namespace: "ops".into(),
                name: "hook".into(),
                port: 443
            })
        );
        assert_eq!(run_args(&["run"]).webhook_config(true).client_config, None);
    }

    #[test]
    fn webhook_defaults() {
        let r = run_args(&["run", "--lease-namespace", "ops"]);
        assert_eq!(r.webhook_addr, "0.0.0.0:9443".parse().expect("addr"));
        assert_eq!(r.webhook_certs, WebhookCerts::SelfSigned);
        assert_eq!(
            r.webhook_cert_dir,
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs")
        );
        let cfg = r.webhook_config(true);
        assert_eq!(cfg.addr, r.webhook_addr);
        assert_eq!(cfg.crd_name, "modelservices.serving.modelservice.dev");
        assert_eq!(cfg.client_config, None, "serves, leaves the CRD alone");
        assert_eq!(
            cfg.certs,
            CertSource::Secret {
                namespace: "ops".into(),
                name: "modelservice-operator-webhook-certs".into()
            }
        );
    }

    #[test]
    fn webhook_flags() {
        let cfg = run_args(&[
            "run",
            "--webhook-addr",
            "127.0.0.1:0",
            "--webhook-url",
            "https://127.0.0.1:9443/convert",
            "--webhook-secret",
            "sys/certs",
        ])
        .webhook_config(true);
        assert_eq!(cfg.addr, "127.0.0.1:0".parse().expect("addr"));
        assert_eq!(
            cfg.client_config,
            Some(ClientConfigTarget::Url(
                "https://127.0.0.1:9443/convert".into()
            ))
        );
        assert_eq!(
            cfg.certs,
            CertSource::Secret {
                namespace: "sys".into(),
                name: "certs".into()
            }
        );

        let cfg = run_args(&[
            "run",
            "--webhook-service",
            "ops/msop-webhook",
            "--webhook-secret",
            "mine",
            "--lease-namespace",
            "lease-ns",
        ])
        .webhook_config(true);
        assert_eq!(
            cfg.client_config,
            Some(ClientConfigTarget::Service {
                namespace: "ops".into(),
                name: "msop-webhook".into(),
                port: 443
            })
        );
        assert_eq!(
            cfg.certs,
            CertSource::Secret {
                namespace: "lease-ns".into(),
                name: "mine".into()
            }
        );

        let cfg = run_args(&[
            "run",
            "--webhook-certs",
            "external",
            "--webhook-cert-dir",
            "/certs",
        ])
        .webhook_config(true);
        assert_eq!(
            cfg.certs,
            CertSource::Files {
                dir: PathBuf::from("/certs")
            }
        );
    }

    #[test]
    fn bad_webhook_values_say_what_to_fix() {
        for (args, needle) in [
            (
                &[
                    "run",
                    "--webhook-url",
                    "https://a/convert",
                    "--webhook-service",
                    "a/b",
                ][..],
                "cannot be used with",
            ),
            (
                &["run", "--webhook-url", "http://a/convert"][..],
                "https://",
            ),
            (
                &["run", "--webhook-url", "https://u@a/convert"][..],
                "no user",
            ),
            (&["run", "--webhook-url", "https://a/c?x=1"][..], "no query"),
            (&["run", "--webhook-url", "not a url"][..], "--webhook-url"),
            (&["run", "--webhook-service", "svc"][..], "NAMESPACE/NAME"),
            (&["run", "--webhook-service", "a/b/c"][..], "NAMESPACE/NAME"),
            (&["run", "--webhook-secret", "/x"][..], "NAMESPACE/NAME"),
            (
                &["run", "--webhook-certs", "cert-manager"][..],
                "--webhook-certs",
            ),
            (&["run", "--webhook-addr", "9443"][..], "--webhook-addr"),
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
