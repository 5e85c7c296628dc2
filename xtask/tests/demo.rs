//! `cargo xtask demo` runs to a converged state and exits 0 when asked to,
//! with the operator binary that `cargo test --workspace` built beside it.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_demo_converges_and_exits_zero() {
    let xtask = PathBuf::from(env!("CARGO_BIN_EXE_xtask"));
    let operator = xtask.with_file_name("modelservice-operator");
    assert!(
        operator.is_file(),
        "no {}: run `cargo test --workspace` (or `cargo build --bin modelservice-operator`) first",
        operator.display()
    );
    let out = Command::new(&xtask)
        .args(["demo", "--exit-when-converged", "--operator"])
        .arg(&operator)
        .output()
        .expect("run the demo");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the demo failed: {}\n{shown}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // What a user should have seen: a GPU shortage, children made, a
    // canary rolled back, and the end.
    for seen in [
        "InsufficientGPU",
        "+ Deployment minimal",
        "+ HTTPRoute llama-8b",
        "CrashLooping: the canary is rolled back",
        "converged: every step showed what it should.",
    ] {
        assert!(shown.contains(seen), "{seen:?} not shown:\n{shown}");
    }
}
