//! Serves the fake API server on 127.0.0.1 until killed, for poking at it by
//! hand (`kubectl --kubeconfig <file> get modelservices`) and for running
//! anything that takes a kubeconfig against it as a separate process, such
//! as the convergence benchmark's real-cluster mode.
//!
//! `cargo run -p fake-apiserver --example serve -- <kubeconfig path>`

use fake_apiserver::FakeApiServer;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fake-kubeconfig.yaml".to_string());
    let fake = FakeApiServer::start().await;
    fake.write_kubeconfig(std::path::Path::new(&path))?;
    println!(
        "fake API server at {}; kubeconfig written to {path}",
        fake.url()
    );
    futures::future::pending::<()>().await;
    Ok(())
}
