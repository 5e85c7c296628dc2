//! Lays out the release binary's code so that the functions a replica runs
//! sit together.
//!
//! The kernel maps a binary's code into a process 64 KiB at a time around
//! every page that runs, so resident code follows how far apart the running
//! functions lie, not how much of them there is: about 4 MB of functions run,
//! spread by the linker over nearly all of the 10 MB of code, and nearly all
//! of it was resident (BENCHMARKS.md, "Issue 36, eleventh round").
//! `link/hot-functions.txt` lists those functions, as measured by
//! `cargo xtask hot-functions write` (README.md, "The release binary's code
//! order", says how); lld places them first, in that order, and the rest
//! after them as before.
//!
//! The list names symbols, whose hashes follow the toolchain, the profile
//! and every dependency's version and features (so `cargo bench`, which adds
//! the dev-dependencies' features, links other names): a stale entry is
//! skipped without a word, and a list gone stale costs memory, never
//! correctness. `cargo xtask hot-functions check` (in CI, on the build the
//! Dockerfile makes) says how much of it still matches.

use std::env;
use std::path::Path;
use std::process::Command;

const LIST: &str = "link/hot-functions.txt";

fn main() {
    println!("cargo::rerun-if-changed={LIST}");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=MODELSERVICE_HOT_FUNCTIONS");
    if let Some(list) = list_to_apply() {
        for arg in [
            format!("-Wl,--symbol-ordering-file={list}"),
            "-Wl,--no-warn-symbol-ordering".to_string(),
        ] {
            println!("cargo::rustc-link-arg-bin=modelservice-operator={arg}");
        }
    }
}

/// The list's path when this build links with lld and should use it:
/// release builds for x86_64 Linux with glibc, where rustc links with its
/// own lld from 1.90 on; the option is lld's, and another linker would
/// reject it. `MODELSERVICE_HOT_FUNCTIONS=off` leaves the layout to the
/// linker (to measure without it, or with a linker of one's own).
fn list_to_apply() -> Option<String> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("MODELSERVICE_HOT_FUNCTIONS") == "off"
        || var("PROFILE") != "release"
        || var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("CARGO_ENCODED_RUSTFLAGS").contains("linker")
        || !rustc_links_with_lld(&var("RUSTC"))
    {
        return None;
    }
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join(LIST);
    list.is_file().then(|| list.display().to_string())
}

fn rustc_links_with_lld(rustc: &str) -> bool {
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let release = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .unwrap_or("");
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    matches!((parts.next(), parts.next()), (Some(Some(1)), Some(Some(minor))) if minor >= 90)
}
