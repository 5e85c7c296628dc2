//! `cargo xtask`: writes the files derived from the Rust sources (the CRD and
//! its copies, every RBAC file) and, in CI, fails when the committed ones are
//! stale, so the copies cannot drift from the code or from each other.

mod chart;
mod chart_readme;
mod config_rbac;
mod generated;
mod listing;
#[cfg(test)]
mod read_back;
mod roles;
mod rules_yaml;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use generated::{GENERATED, Generated};

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "Generates and checks the files derived from the Rust sources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write every generated file.
    Generate,
    /// Fail, listing them, when generated files differ from what `generate` would write.
    Check,
}

/// The repository, wherever cargo runs from.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let files = match generated::all() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("xtask: cannot generate: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Generate => generate(&files),
        Command::Check => check(&files),
    }
}

/// Writes only what changed, so an up-to-date tree keeps its timestamps.
fn generate(files: &[Generated]) -> ExitCode {
    let stale = generated::stale(root(), files);
    for file in files.iter().filter(|f| stale.contains(&f.path)) {
        let path = root().join(file.path);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, &file.contents));
        if let Err(e) = written {
            eprintln!("xtask: {}: {e}", file.path);
            return ExitCode::FAILURE;
        }
        println!("wrote {}", file.path);
    }
    println!("{} generated files, {} rewritten", files.len(), stale.len());
    ExitCode::SUCCESS
}

fn check(files: &[Generated]) -> ExitCode {
    let stale = generated::stale(root(), files);
    if stale.is_empty() {
        println!("{} generated files are fresh", files.len());
        return ExitCode::SUCCESS;
    }
    eprintln!("stale generated files (run `cargo xtask generate` and commit them):");
    for path in stale {
        eprintln!("  {path}");
    }
    ExitCode::FAILURE
}
