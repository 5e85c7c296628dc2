//! Entry point: parse the command line and hand over to `runtime`.
//! Failures end as one line on stderr and a non-zero exit, never a panic.

use std::process::ExitCode;

use clap::Parser;
use modelservice_operator::api::crd_yaml;
use modelservice_operator::controller::ControllerConfig;
use modelservice_operator::core::OperatorDefaults;
use modelservice_operator::core::convert::convert_checked;
use modelservice_operator::fetch;
use modelservice_operator::runtime::cli::{Cli, Command, FetchArgs, LogFormat, RunArgs};
use modelservice_operator::runtime::leader::{self, ElectionConfig};
use modelservice_operator::runtime::run::{RunConfig, run};
use modelservice_operator::runtime::{convert_manifests, logging, manifests, render, shutdown};

/// mimalloc, not glibc's malloc. The caches live for the whole run and are
/// interleaved with the short-lived buffers of every watch event and
/// request; glibc's main heap could hand little of the freed space back, so
/// the resident size grew far past the live data at 10,000 ModelServices
/// (BENCHMARKS.md, "Ten thousand ModelServices").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off, for this process only. A huge page is
/// resident whole once any byte of it is touched, and the caches touch
/// their pages sparsely, so the resident size ran far above the live heap
/// (BENCHMARKS.md, "Ten thousand ModelServices"). mimalloc is built never
/// to ask for them (its `no_thp` feature): it asked on its first arena
/// before `main` runs, where this flag comes too late, and that cost 2 to
/// 3 MiB resident from the start (BENCHMARKS.md, "Issue 36, fifth round").
/// Where a node's setting is `always` the kernel gives them unasked; the
/// flag is the process's, so it holds whatever the node's setting; failing
/// to set it costs memory, never correctness.
fn without_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// mimalloc's `purge_delay`: its index in `mi_option_e` of the mimalloc
/// that libmimalloc-sys builds (v3, `include/mimalloc.h`); the bindings name
/// only older options. The test below checks the index against the
/// option's documented default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system at once. mimalloc v3 keeps freed
/// pages for a second (whole arenas for ten) in case they are used again;
/// through a cold start of 10,000 ModelServices the buffers of each second's
/// requests stayed resident on top of the caches (BENCHMARKS.md, "Issue 36,
/// third round"). The fake's bench measured no added CPU.
fn purge_at_once() {
    // SAFETY: sets one integer option, which mimalloc reads atomically; no
    // pointer is involved.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
}

fn main() -> ExitCode {
    purge_at_once();
    without_transparent_huge_pages();
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("cannot render the CRD: {e}")),
        },
        Command::Render(args) => print_or_fail(manifests::read(&args.file).and_then(|y| {
            render::render_with(
                &y,
                &args.namespace,
                &OperatorDefaults {
                    prometheus_address: args.prometheus_address.clone(),
                    endpoint_picker_image: args.endpoint_picker_image.clone(),
                    fetch_image: args.fetch_image.clone(),
                },
            )
        })),
        Command::Convert(args) => print_or_fail(
            manifests::read(&args.file).and_then(|y| convert_manifests::convert(&y, args.to)),
        ),
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
        Command::Fetch(args) => fetch_command(args),
    }
}

/// The download Job's container: its exit code is the outcome's.
fn fetch_command(args: FetchArgs) -> ExitCode {
    if let Err(e) = logging::init(args.log_format, None) {
        return fail(&e);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    let token = |name: &str| std::env::var(name).ok().filter(|t| !t.is_empty());
    let req = fetch::FetchRequest {
        source: args.source,
        dest: args.dest,
        key: args.key,
        capacity: args.capacity,
        keep: args.keep,
        hf_endpoint: args.hf_endpoint,
        hf_token: token("HF_TOKEN"),
        bearer_token: token("BEARER_TOKEN"),
        // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
        // AWS_REGION/AWS_DEFAULT_REGION, AWS_ENDPOINT_URL(_S3): environment
        // only, like the tokens, so that no key shows in the pod's command.
        s3: fetch::S3Config::from_env(),
    };
    let code = rt.block_on(fetch::run(
        &req,
        &fetch::FetchOptions::default(),
        &mut std::io::stdout(),
        &args.termination_log,
    ));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn print_or_fail(out: Result<String, String>) -> ExitCode {
    match out {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
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
        max_requests_in_flight: usize::from(args.max_requests_in_flight),
        controller: ControllerConfig {
            resync: args.resync_period,
            status_pace: args.status_pace,
            first_report_wait: args.first_report_wait,
            concurrency: args.concurrency,
            events_queue: args.events_queue as usize,
            list_page_size: args.list_page_size,
            discovery_interval: args.discovery_interval,
            surge_grace: args.surge_grace,
            surge_read_window: args.surge_read_window,
            defaults: OperatorDefaults {
                prometheus_address: args.prometheus_address.clone(),
                endpoint_picker_image: args.endpoint_picker_image.clone(),
                fetch_image: args.fetch_image.clone(),
            },
            ..ControllerConfig::default()
        },
        startup_timeout: args.startup_timeout,
        reporter_instance: Some(identity),
        webhook: Some(args.webhook_config(std::env::var_os("KUBERNETES_SERVICE_HOST").is_some())),
        convert: convert_checked,
    };
    run(config, cfg, signal).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    /// The index is `purge_delay`'s: mimalloc v3 documents its default as
    /// 1,000 ms, and no other option of it has that default.
    #[test]
    fn the_option_set_is_the_purge_delay() {
        // SAFETY: reads and sets one integer option.
        let before = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(before, 1000);
        super::purge_at_once();
        let after = unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY) };
        assert_eq!(after, 0);
    }

    /// The mapping that holds a heap block, as `/proc/self/smaps` shows it:
    /// the lines from its header to the next header.
    fn mapping_of(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut found: Option<String> = None;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| {
                let (lo, hi) = r.split_once('-')?;
                Some((
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                ))
            });
            match (range, found.as_mut()) {
                (Some(_), Some(_)) => break,
                (Some((lo, hi)), None) if lo <= addr && addr < hi => found = Some(String::new()),
                (None, Some(m)) => {
                    m.push_str(line);
                    m.push('\n');
                }
                _ => {}
            }
        }
        found
    }

    /// mimalloc's arenas carry no `MADV_HUGEPAGE` (the kernel shows it as
    /// `hg` among the mapping's VmFlags): built with it, the first arena
    /// asked before `main` could turn huge pages off.
    #[test]
    fn the_allocator_asks_for_no_huge_pages() {
        if !std::path::Path::new("/proc/self/smaps").exists() {
            return;
        }
        let block = vec![1u8; 4 << 20];
        let Some(mapping) = mapping_of(block.as_ptr() as usize) else {
            panic!("no mapping holds the heap block");
        };
        let flags = mapping
            .lines()
            .find_map(|l| l.strip_prefix("VmFlags:"))
            .unwrap_or_default();
        assert!(
            !flags.split_whitespace().any(|f| f == "hg"),
            "the heap's mapping asks for huge pages: {flags}"
        );
        assert_eq!(
            block.iter().map(|&b| usize::from(b)).sum::<usize>(),
            4 << 20
        );
    }
}
