//! `link/hot-functions.txt`, the functions a replica runs, which `build.rs`
//! has lld place first in the release binary: written from callgrind's
//! record of the operator at work, and checked against a built binary.
//!
//! callgrind, not a sampling profiler: a function that runs once, at start
//! or on a rare path, still brings its 64 KiB of code into memory, and a
//! sampler would miss exactly those.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Command, ExitCode};

/// Where `build.rs` reads the list.
pub const LIST: &str = "link/hot-functions.txt";

/// The file name of the binary whose functions are kept (callgrind records
/// the libraries' too).
const BINARY: &str = "modelservice-operator";

/// The kernel maps code around a fault in windows of this size
/// (`fault_around_bytes`), so this is the unit of resident code.
const WINDOW: u64 = 64 * 1024;

/// Below this share of the list found in a binary, the list is stale.
const MIN_MATCHED: f64 = 0.75;

/// The functions of [`BINARY`] that ran, with the instructions each ran
/// itself, from one callgrind output (`--dump-instr=no`; compressed names
/// or not). A recursion's `'2` suffix names the same function.
pub fn executed(profile: &str) -> BTreeMap<String, u64> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut resolve = |value: &str| -> String {
        let value = value.trim();
        match value.strip_prefix('(').and_then(|v| v.split_once(')')) {
            Some((id, rest)) if !rest.trim().is_empty() => {
                let name = rest.trim().to_string();
                names.insert(id.to_string(), name.clone());
                name
            }
            Some((id, _)) => names.get(id).cloned().unwrap_or_default(),
            None => value.to_string(),
        }
    };
    let mut out = BTreeMap::new();
    let mut in_binary = false;
    let mut function: Option<String> = None;
    let mut next_is_call = false;
    for line in profile.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            let object = resolve(v);
            in_binary = Path::new(&object).file_name().is_some_and(|f| f == BINARY);
        } else if let Some(v) = line.strip_prefix("fn=") {
            let name = resolve(v);
            let name = match name.rsplit_once('\'') {
                Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base.to_string(),
                _ => name,
            };
            function = in_binary.then_some(name);
            next_is_call = false;
        } else if let Some(v) = line
            .strip_prefix("cfn=")
            .or_else(|| line.strip_prefix("cfi="))
            .or_else(|| line.strip_prefix("cob="))
            .or_else(|| line.strip_prefix("fl="))
            .or_else(|| line.strip_prefix("fi="))
            .or_else(|| line.strip_prefix("fe="))
        {
            // Names defined here are used later by their id alone.
            resolve(v);
        } else if line.starts_with("calls=") {
            next_is_call = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut next_is_call) {
                continue; // a call's inclusive cost, not the caller's own
            }
            if let Some(f) = &function {
                let cost = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse::<u64>().ok())
                    .unwrap_or(0);
                *out.entry(f.clone()).or_insert(0) += cost;
            }
        }
    }
    out
}

/// The list's text: first what ran after the start, then what ran only
/// during it; in each part the most run first (the hottest code shares the
/// fewest pages), then by name, so that the same profiles write the same
/// file. The operator hands the binary's pages back once it has started
/// (`src/runtime/code_pages.rs`): only the first part's pages come back, and
/// they lie together.
pub fn list_text(after_start: &BTreeMap<String, u64>, start: &BTreeMap<String, u64>) -> String {
    let listable =
        |name: &String| !name.is_empty() && !name.contains(' ') && !name.starts_with("0x");
    let sorted = |m: &BTreeMap<String, u64>, skip: &dyn Fn(&String) -> bool| {
        let mut names: Vec<(String, u64)> = m
            .iter()
            .filter(|(name, _)| listable(name) && !skip(name))
            .map(|(n, c)| (n.clone(), *c))
            .collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        names
    };
    let first = sorted(after_start, &|_| false);
    let then = sorted(start, &|name| after_start.contains_key(name));
    first
        .into_iter()
        .chain(then)
        .map(|(n, _)| format!("{n}\n"))
        .collect()
}

/// What a binary holds of the list.
#[derive(Debug, PartialEq)]
pub struct Layout {
    pub listed: usize,
    pub matched: usize,
    /// The matched functions' own bytes.
    pub bytes: u64,
    /// The 64 KiB windows of code they touch.
    pub windows: u64,
}

impl Layout {
    /// The list matches the binary, and its functions lie together: at
    /// most a tenth more windows than their bytes fill, and two for the
    /// edges (alignment padding, a function that straddles).
    pub fn holds(&self) -> bool {
        let matched = self.matched as f64 >= MIN_MATCHED * self.listed as f64;
        let needed = self.bytes.div_ceil(WINDOW);
        matched && self.windows <= needed + needed / 10 + 2
    }
}

/// `symbols`: `nm -S --defined-only` lines (address, size, type, name).
pub fn layout(list: &str, symbols: &str) -> Layout {
    let mut by_name: HashMap<&str, (u64, u64)> = HashMap::new();
    for line in symbols.lines() {
        let mut f = line.split_whitespace();
        if let (Some(a), Some(s), Some(_), Some(name)) = (f.next(), f.next(), f.next(), f.next())
            && let (Ok(a), Ok(s)) = (u64::from_str_radix(a, 16), u64::from_str_radix(s, 16))
        {
            by_name.entry(name).or_insert((a, s));
        }
    }
    let listed: Vec<&str> = list.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut windows = std::collections::BTreeSet::new();
    let (mut matched, mut bytes) = (0, 0);
    for (addr, size) in listed.iter().filter_map(|n| by_name.get(n.trim())) {
        matched += 1;
        bytes += size;
        windows.extend(addr / WINDOW..=(addr + size.max(&1) - 1) / WINDOW);
    }
    Layout {
        listed: listed.len(),
        matched,
        bytes,
        windows: windows.len() as u64,
    }
}

/// The functions of the profiles, their costs summed.
fn executed_in(profiles: &[std::path::PathBuf]) -> Result<BTreeMap<String, u64>, String> {
    let mut all = BTreeMap::new();
    for p in profiles {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for (name, cost) in executed(&text) {
            *all.entry(name).or_insert(0) += cost;
        }
    }
    Ok(all)
}

/// `profiles`: of the operator after its start; `start`: of its start, up to
/// where it hands its pages back (callgrind's `--dump-after`, README).
pub fn write(
    root: &Path,
    profiles: &[std::path::PathBuf],
    start: &[std::path::PathBuf],
) -> ExitCode {
    let (after_start, start) = match (executed_in(profiles), executed_in(start)) {
        (Ok(a), Ok(s)) => (a, s),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    if after_start.is_empty() {
        eprintln!("xtask: no function of `{BINARY}` in the profiles");
        return ExitCode::FAILURE;
    }
    let text = list_text(&after_start, &start);
    if let Err(e) = std::fs::write(root.join(LIST), &text) {
        eprintln!("xtask: {LIST}: {e}");
        return ExitCode::FAILURE;
    }
    println!("wrote {LIST}: {} functions", text.lines().count());
    ExitCode::SUCCESS
}

pub fn check(root: &Path, binary: &Path) -> ExitCode {
    let list = match std::fs::read_to_string(root.join(LIST)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("xtask: {LIST}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let symbols = match Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(binary)
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => {
            eprintln!(
                "xtask: nm {}: {}",
                binary.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("xtask: nm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let l = layout(&list, &symbols);
    println!(
        "{LIST}: {} of {} functions in {}, {:.1} MiB of code in {} windows of 64 KiB ({:.1} MiB)",
        l.matched,
        l.listed,
        binary.display(),
        l.bytes as f64 / 1048576.0,
        l.windows,
        (l.windows * WINDOW) as f64 / 1048576.0,
    );
    if l.holds() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "the list is stale or was not applied: write it again \
         (README.md, \"The release binary's code order\")"
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "\
# callgrind format
events: Ir
ob=(1) /usr/lib/libc.so.6
fn=(1) memcpy
10 500
ob=(2) /tmp/t/release/modelservice-operator
fn=(2) _ZN4main17hE
5 7
cob=(1)
cfn=(1)
calls=1 0
5 500
6 3
fn=(3) _ZN3hot17hE'2
1 40
fn=(2)
9 1
ob=(1)
fn=(1)
3 9
";

    #[test]
    fn only_the_binarys_own_cost_is_counted_and_ids_resolve() {
        let ex = executed(PROFILE);
        let expect: BTreeMap<String, u64> = [
            ("_ZN4main17hE".to_string(), 11),
            ("_ZN3hot17hE".to_string(), 40),
        ]
        .into_iter()
        .collect();
        assert_eq!(ex, expect);
        assert_eq!(
            list_text(&ex, &BTreeMap::new()),
            "_ZN3hot17hE\n_ZN4main17hE\n"
        );
    }

    #[test]
    fn what_runs_after_the_start_comes_first_however_little_it_runs() {
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
        };
        let after = map(&[("reconcile", 50), ("watch", 900)]);
        let start = map(&[("schema", 10_000), ("reconcile", 5), ("clap", 20)]);
        assert_eq!(
            list_text(&after, &start),
            "watch\nreconcile\nschema\nclap\n"
        );
    }

    #[test]
    fn a_list_is_held_when_it_matches_and_lies_together() {
        // Ten functions of 32 KiB each, then an unlisted one far away.
        let symbols = |gap: u64| -> String {
            let mut s: String = (0..10u64)
                .map(|i| format!("{:016x} {:016x} t f{i}\n", 0x10000 + i * gap, 0x8000))
                .collect();
            s.push_str("0000000009000000 0000000000000100 T other\n");
            s
        };
        let list: String = (0..10).map(|i| format!("f{i}\n")).collect();
        let l = layout(&list, &symbols(0x8000));
        assert_eq!(
            (l.listed, l.matched, l.bytes, l.windows),
            (10, 10, 0x50000, 5)
        );
        assert!(l.holds());
        // The same functions a megabyte apart: what the linker does unasked.
        let apart = layout(&list, &symbols(0x100000));
        assert_eq!(apart.windows, 10);
        assert!(!apart.holds());
        // Most names gone: a toolchain or dependency update.
        let stale: String = (0..10)
            .map(|i| format!("g{i}\n"))
            .chain(["f0\n".into()])
            .collect();
        assert!(!layout(&stale, &symbols(0x8000)).holds());
    }
}
