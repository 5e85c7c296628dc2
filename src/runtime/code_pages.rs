//! Once ready, the operator hands back the pages of code and read-only data
//! that only its start needed: its own binary's and its libraries'.
//!
//! Why: below a few thousand ModelServices the binary is a large share of
//! what a replica keeps resident, and the kernel keeps every page of code
//! and read-only data that was ever touched mapped for as long as the
//! process lives, 64 KiB around each (fault-around). The start touches a
//! good deal that never runs again: the command line, the CRD's schema, the
//! webhook's certificates and TLS set-up, discovery, the loader's symbol
//! tables and relocations. Once the caches are synced, every clean read-only
//! file mapping is dropped from the page tables (`MADV_DONTNEED`); whatever
//! runs afterwards maps back in from the page cache, a minor fault per
//! window, and `link/hot-functions.txt` puts the binary's code that runs
//! after the start ahead of what runs only at start, so what comes back
//! lies together (BENCHMARKS.md, "Issue 36, fourteenth round").
//!
//! Only a mapping that is private, not writable, and holds no page of its
//! own (none copied on write: `Anonymous` is 0) is dropped: each of its
//! pages is then the page cache's page of the file, and after the drop the
//! next access maps that same page again, so no thread can read a
//! different byte. A binary written a moment ago (a fresh build, a copy)
//! is dirty in the page cache, and its pages show as `Private_Dirty`; they
//! are still the file's, so they are dropped too. The relocated read-only
//! data (RELRO) was written by the loader before `main`, holds pages of its
//! own, and so is never dropped.
//!
//! The binary's own file gets two more steps: its mappings are marked
//! `MADV_RANDOM` (no read-ahead), and once they are dropped, its cached
//! pages that no process maps any more are evicted (`POSIX_FADV_DONTNEED`).
//! A page of an evicted file is read again when touched: the read-only
//! data then comes back a page at a time instead of a 64 KiB window or a
//! whole large folio (Linux 6.18 maps a cached folio whole), while the code
//! still comes back about 64 KiB at a time (the kernel reads around a fault
//! in executable mappings whatever the advice). What that is worth is in
//! BENCHMARKS.md ("Issue 36, fifteenth round"): less resident once the
//! load has passed, not a lower peak. The libraries are left cached: they
//! are shared with every other process on the node.

use std::ops::Range;

/// A mapping that can be handed back: its addresses, and whether it maps
/// the operator's own binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clean {
    pub range: Range<usize>,
    pub own: bool,
}

/// The mappings of `smaps` (the text of `/proc/self/smaps`) that map a file
/// privately and read-only, with no page of their own; `exe` is the path of
/// the operator's binary, as `/proc/self/exe` names it.
pub fn clean_mappings(smaps: &str, exe: &str) -> Vec<Clean> {
    let mut out = Vec::new();
    let mut current: Option<(Clean, bool)> = None;
    let mut close = |m: Option<(Clean, bool)>| {
        if let Some((clean, true)) = m {
            out.push(clean);
        }
    };
    for line in smaps.lines() {
        if let Some(header) = Header::parse(line) {
            close(current.take());
            let eligible = header.path.starts_with('/')
                && header.perms.starts_with('r')
                && header.perms.get(1..2) == Some("-")
                && header.perms.get(3..4) == Some("p");
            let own = !exe.is_empty() && header.path == exe;
            current = Some((
                Clean {
                    range: header.range,
                    own,
                },
                eligible,
            ));
        } else if let Some((key, kib)) = field(line)
            && key == "Anonymous"
            && kib != 0
            && let Some((_, eligible)) = current.as_mut()
        {
            *eligible = false;
        }
    }
    close(current);
    out
}

/// A mapping's first line: `start-end perms offset dev inode [path]`.
struct Header<'a> {
    range: Range<usize>,
    perms: &'a str,
    path: &'a str,
}

impl<'a> Header<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let range = usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?;
        let perms = fields.next()?;
        let (_offset, _dev, _inode) = (fields.next()?, fields.next()?, fields.next()?);
        let path = fields.next().unwrap_or_default().trim_start();
        (perms.len() == 4).then_some(Self { range, perms, path })
    }
}

/// A `Key:   123 kB` line of a mapping.
fn field(line: &str) -> Option<(&str, u64)> {
    let (key, rest) = line.split_once(':')?;
    let kib = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some((key, kib))
}

/// What was handed back: bytes of mappings dropped, and whether the
/// binary's cached pages were evicted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HandedBack {
    pub bytes: usize,
    pub evicted: bool,
}

/// Drops the clean read-only file pages from this process's page tables,
/// and evicts the binary's own pages from the page cache (module doc).
/// Failing costs memory, never correctness, so a failed step is skipped.
///
/// Not inlined: `link/hot-functions.txt` is written from a profile split
/// where this returns (README, "The release binary's code order").
#[inline(never)]
pub fn hand_back() -> HandedBack {
    #[cfg(target_os = "linux")]
    {
        use rustix::mm::{Advice, madvise};
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return HandedBack::default();
        };
        let exe = std::fs::read_link("/proc/self/exe")
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
            .unwrap_or_default();
        let clean = clean_mappings(&smaps, &exe);
        let advise = |range: &Range<usize>, advice| {
            // SAFETY: the range is a whole private, read-only file mapping
            // without a page of its own (see the module doc). MADV_RANDOM
            // only turns read-ahead off; after MADV_DONTNEED every access
            // maps the same bytes of the file again, so no byte behind any
            // reference into it changes.
            unsafe { madvise(range.start as *mut std::ffi::c_void, range.len(), advice) }.is_ok()
        };
        // Before the drop, so that no fault in between reads ahead.
        for c in clean.iter().filter(|c| c.own) {
            advise(&c.range, Advice::Random);
        }
        let mut handed = HandedBack::default();
        for c in &clean {
            if advise(&c.range, Advice::LinuxDontNeed) {
                handed.bytes += c.range.len();
            }
        }
        handed.evicted = clean.iter().any(|c| c.own) && evict_binary();
        handed
    }
    #[cfg(not(target_os = "linux"))]
    HandedBack::default()
}

/// Evicts the binary's cached pages that no process maps (module doc);
/// false if that could not be asked.
fn evict_binary() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::File::open("/proc/self/exe").is_ok_and(|file| {
            rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).is_ok()
        })
    }
    #[cfg(not(target_os = "linux"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/usr/local/bin/modelservice-operator";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

    /// The ranges among `clean`, and which of them are the binary's.
    fn ranges(clean: Vec<Clean>) -> Vec<(Range<usize>, bool)> {
        clean.into_iter().map(|c| (c.range, c.own)).collect()
    }

    fn mapping(range: &str, perms: &str, path: &str, anonymous: u64, dirty: u64) -> String {
        format!(
            "{range} {perms} 00000000 08:01 1234                       {path}\n\
             Size:               2048 kB\n\
             Rss:                 512 kB\n\
             Private_Clean:       512 kB\n\
             Private_Dirty:      {dirty} kB\n\
             Anonymous:          {anonymous} kB\n\
             VmFlags: rd mr mw me\n"
        )
    }

    #[test]
    fn only_clean_read_only_private_file_mappings_are_handed_back() {
        let smaps = [
            mapping("1000-2000", "r--p", EXE, 0, 0),   // read-only data
            mapping("2000-5000", "r-xp", EXE, 0, 0),   // code
            mapping("5000-6000", "r--p", EXE, 12, 12), // RELRO, relocated
            mapping("6000-7000", "rw-p", EXE, 0, 0),   // data
            mapping("7000-8000", "r-xp", LIBC, 0, 0),  // a library's code
            mapping("8000-9000", "r--s", EXE, 0, 0),   // shared: not ours to drop
            mapping("9000-a000", "rw-p", "", 40, 40),  // the heap
            mapping("a000-b000", "r--p", "", 0, 0),    // anonymous, no file behind it
            mapping("b000-c000", "r-xp", "[vdso]", 0, 0),
            mapping("c000-d000", "r-xp", EXE, 0, 0), // last in the text
        ]
        .concat();
        assert_eq!(
            ranges(clean_mappings(&smaps, EXE)),
            vec![
                (0x1000..0x2000, true),
                (0x2000..0x5000, true),
                (0x7000..0x8000, false),
                (0xc000..0xd000, true)
            ]
        );
    }

    #[test]
    fn a_page_copied_on_write_keeps_its_mapping_and_a_dirty_file_page_does_not() {
        for copied in [
            mapping("1000-2000", "r-xp", EXE, 4, 0),
            mapping("1000-2000", "r-xp", EXE, 4, 4),
        ] {
            assert_eq!(clean_mappings(&copied, EXE), vec![]);
        }
        // A binary written a moment ago (a fresh build, a copy) is dirty in
        // the page cache: its pages show as dirty, but they are the file's,
        // not anonymous copies, and mapping them again reads the same bytes.
        // Keeping such mappings handed nothing back in the bench's first
        // runs after a build.
        let fresh = mapping("1000-2000", "r-xp", EXE, 0, 4);
        let shared = mapping("1000-2000", "r-xp", EXE, 0, 0)
            .replace("Private_Clean:       512 kB", "Shared_Dirty:        4 kB");
        for dirty in [fresh, shared] {
            assert_eq!(
                ranges(clean_mappings(&dirty, EXE)),
                vec![(0x1000..0x2000, true)]
            );
        }
    }

    #[test]
    fn unreadable_lines_drop_nothing_and_keep_the_verdicts_of_the_rest() {
        let smaps = format!(
            "garbage\nzz-yy r-xp 0 0 0 {EXE}\n1000-2000 r-xp\n{}Private_Dirty: lots kB\n",
            mapping("3000-4000", "r-xp", EXE, 0, 0)
        );
        assert_eq!(
            ranges(clean_mappings(&smaps, EXE)),
            vec![(0x3000..0x4000, true)]
        );
    }

    #[test]
    fn only_the_binary_named_exactly_is_its_own() {
        let smaps = [
            mapping("1000-2000", "r-xp", EXE, 0, 0),
            mapping("2000-3000", "r-xp", &format!("{EXE}-old"), 0, 0),
            mapping("3000-4000", "r-xp", &format!("{EXE} (deleted)"), 0, 0),
            mapping("4000-5000", "r-xp", "/usr/local/bin/other", 0, 0),
        ]
        .concat();
        let own = |exe: &str| -> Vec<bool> {
            clean_mappings(&smaps, exe)
                .into_iter()
                .map(|c| c.own)
                .collect()
        };
        assert_eq!(own(EXE), vec![true, false, false, false]);
        // Without a name for the binary, no mapping is taken for it.
        assert_eq!(own(""), vec![false, false, false, false]);
    }

    #[test]
    fn handing_back_leaves_the_code_and_data_as_they_were() {
        static TABLE: [u64; 4] = [1, 2, 3, 5];
        let before: u64 = std::hint::black_box(&TABLE).iter().sum();
        let handed = hand_back();
        let after: u64 = std::hint::black_box(&TABLE).iter().sum();
        assert_eq!((before, after), (11, 11));
        if cfg!(target_os = "linux") {
            assert!(
                handed.bytes > 0,
                "the test binary's code is a clean mapping"
            );
            assert!(handed.evicted, "the test binary is a file to evict");
        }
    }
}
