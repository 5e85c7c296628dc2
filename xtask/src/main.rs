//! `cargo xtask`: writes the files derived from the Rust sources (the CRD and
//! its copies, every RBAC file) and, in CI, fails when the committed ones are
//! stale, so the copies cannot drift from the code or from each other. It also
//! keeps the release binary's code order (`hot-functions`) and runs the demo.

mod chart;
mod chart_readme;
mod config_rbac;
mod demo;
mod generated;
mod hot_functions;
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
    about = "Generates and checks the files derived from the Rust sources, and runs the demo"
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
    /// Show the operator at work on an embedded API server with simulated GPU nodes.
    /// The functions `build.rs` places first in the release binary
    /// (link/hot-functions.txt): write them from callgrind outputs, or check
    /// a built binary against them.
    HotFunctions {
        #[command(subcommand)]
        action: HotFunctions,
    },
    Demo {
        /// The operator binary to run (default: build it with cargo).
        #[arg(long)]
        operator: Option<std::path::PathBuf>,
        /// Exit 0 once every step has converged, instead of waiting for Ctrl-C.
        #[arg(long)]
        exit_when_converged: bool,
    },
}

#[derive(Subcommand)]
enum HotFunctions {
    /// Write the list from callgrind outputs of the operator at work
    /// (`valgrind --tool=callgrind --demangle=no`).
    Write {
        /// Outputs of the operator after its start (`hot.<pid>.out`).
        profiles: Vec<std::path::PathBuf>,
        /// Outputs of its start, up to where it hands its pages back
        /// (`hot.<pid>.out.1`, from `--dump-after`): listed last.
        #[arg(long)]
        start: Vec<std::path::PathBuf>,
    },
    /// Fail when a release binary holds too little of the list, or does not
    /// hold it together.
    Check { binary: std::path::PathBuf },
}

/// The repository, wherever cargo runs from.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn main() -> ExitCode {
    let run: fn(&[Generated]) -> ExitCode = match Cli::parse().command {
        Command::Demo {
            operator,
            exit_when_converged,
        } => {
            return demo::run(
                root(),
                demo::Options {
                    operator,
                    exit_when_converged,
                },
            );
        }
        Command::HotFunctions { action } => {
            return match action {
                HotFunctions::Write { profiles, start } => {
                    hot_functions::write(root(), &profiles, &start)
                }
                HotFunctions::Check { binary } => hot_functions::check(root(), &binary),
            };
        }
        Command::Generate => generate,
        Command::Check => check,
    };
    match generated::all() {
        Ok(files) => run(&files),
        Err(e) => {
            eprintln!("xtask: cannot generate: {e}");
            ExitCode::FAILURE
        }
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
