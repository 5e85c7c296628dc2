//! A fake model server for tests on a real node: it starts, serves, crashes
//! and stops the way vLLM (or SGLang, or TGI) does where a Kubernetes
//! operator can see it, without a GPU or a model. See `flavor` for the
//! command line, `knobs` for what a test can ask of it, and `api` for what
//! it serves.
//!
//! Lifecycle, as vLLM's: parse the flags (exit 2 on a bad one), load the
//! model (the port stays closed meanwhile), serve; on SIGTERM stop taking
//! connections, finish the requests in flight, exit 0.

mod api;
mod download;

use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};

use fake_model_server::flavor::{self, Flavor};
use fake_model_server::knobs;

fn log(message: impl std::fmt::Display) {
    println!("fake-model-server: {message}");
}

/// Files and bytes under `dir`, every byte read.
fn weights_on_disk(dir: &std::path::Path) -> std::io::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            let (f, b) = weights_on_disk(&path)?;
            files += f;
            bytes += b;
        } else {
            let mut file = std::fs::File::open(&path)?;
            bytes += std::io::copy(&mut file, &mut std::io::sink())?;
            files += 1;
        }
    }
    Ok((files, bytes))
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let flavor = Flavor::from_program(argv.first().map(String::as_str).unwrap_or_default());
    let launch = match flavor::parse(flavor, &argv) {
        Ok(l) => l,
        // clap prints the usage error and exits 2, as argparse does.
        Err(e) => e.exit(),
    };
    let knobs = match knobs::read(|k| std::env::var(k).ok()) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("fake-model-server: {e}");
            return ExitCode::from(1);
        }
    };
    log(format_args!(
        "{} serving {:?} as {:?} on {}:{}",
        flavor.name(),
        launch.model,
        launch.served_name,
        launch.host,
        launch.port
    ));
    if let Some((code, after)) = knobs.crash {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            log(format_args!("crashing with exit code {code}, as asked"));
            std::process::exit(code);
        });
    }
    // SIGTERM during the load ends the process at once: there is nothing to drain.
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-model-server: cannot watch SIGTERM: {e}");
            return ExitCode::from(1);
        }
    };
    // No cache: the model comes from the hub first, as on every start of a
    // server that downloads it itself.
    if let Ok(urls) = std::env::var("FAKE_DOWNLOAD") {
        let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
        match download::fetch_all(&urls).await {
            Ok(bytes) => log(format_args!("downloaded {bytes} bytes of {}", launch.model)),
            Err(e) => {
                eprintln!("fake-model-server: download failed: {e}");
                return ExitCode::from(1);
            }
        }
    }
    // A model given as a path is read whole, as a real server loads its
    // weights: a pod whose volume lacks them fails here, visibly.
    if launch.model.starts_with('/') {
        match weights_on_disk(std::path::Path::new(&launch.model)) {
            Ok((files, bytes)) if files > 0 => log(format_args!(
                "read {files} file(s), {bytes} bytes, from {}",
                launch.model
            )),
            Ok(_) => {
                eprintln!("fake-model-server: no model files in {}", launch.model);
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!(
                    "fake-model-server: cannot read the model at {}: {e}",
                    launch.model
                );
                return ExitCode::from(1);
            }
        }
    }
    log(format_args!("loading the model ({:?})", knobs.load));
    tokio::select! {
        _ = tokio::time::sleep(knobs.load) => {}
        _ = term.recv() => {
            log("SIGTERM while loading; exiting");
            return ExitCode::SUCCESS;
        }
    }
    let preset_env = ["MODEL_NAME", "PORT"]
        .iter()
        .map(|k| (k.to_string(), std::env::var(k).ok()))
        .collect();
    let served = match api::Served::new(
        flavor,
        launch.clone(),
        argv.iter().skip(1).cloned().collect(),
        preset_env,
        knobs.per_token,
        knobs.waiting,
    ) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("fake-model-server: metrics: {e}");
            return ExitCode::from(1);
        }
    };
    let listener = match tokio::net::TcpListener::bind((launch.host.as_str(), launch.port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "fake-model-server: cannot listen on {}:{}: {e}",
                launch.host, launch.port
            );
            return ExitCode::from(1);
        }
    };
    log("model loaded; serving");
    let running = served.running.clone();
    let stop = async move {
        term.recv().await;
        log(format_args!(
            "SIGTERM: draining {} request(s) in flight",
            running.get()
        ));
    };
    if let Err(e) = axum::serve(listener, api::router(served))
        .with_graceful_shutdown(stop)
        .await
    {
        eprintln!("fake-model-server: serving failed: {e}");
        return ExitCode::from(1);
    }
    log("drained; exiting");
    ExitCode::SUCCESS
}
