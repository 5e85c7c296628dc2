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
//! own (none copied on write, none dirty) is dropped: each of its pages is
//! then the page cache's page of the file, and after the drop the next
//! access maps that same page again, so no thread can read a different
//! byte. The relocated read-only data (RELRO) was written by the loader
//! before `main`, holds pages of its own, and so is never dropped.

use std::ops::Range;

/// The ranges of `smaps` (the text of `/proc/self/smaps`) that map a file
/// privately and read-only, with no page of their own.
pub fn clean_mappings(smaps: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut current: Option<(Range<usize>, bool)> = None;
    let mut close = |m: Option<(Range<usize>, bool)>| {
        if let Some((range, true)) = m {
            out.push(range);
        }
    };
    for line in smaps.lines() {
        if let Some(header) = Header::parse(line) {
            close(current.take());
            let eligible = header.path.starts_with('/')
                && header.perms.starts_with('r')
                && header.perms.get(1..2) == Some("-")
                && header.perms.get(3..4) == Some("p");
            current = Some((header.range, eligible));
        } else if let Some((key, kib)) = field(line)
            && matches!(key, "Anonymous" | "Private_Dirty" | "Shared_Dirty")
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

/// Drops the clean read-only file pages from this process's page tables;
/// returns how many bytes of mappings were dropped. Failing costs memory, never
/// correctness, so every failure just returns 0.
///
/// Not inlined: `link/hot-functions.txt` is written from a profile split
/// where this returns (README, "The release binary's code order").
#[inline(never)]
pub fn hand_back() -> usize {
    #[cfg(target_os = "linux")]
    {
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return 0;
        };
        let mut bytes = 0;
        for range in clean_mappings(&smaps) {
            // SAFETY: the range is a whole private, read-only file mapping
            // without a page of its own (see the module doc): after
            // MADV_DONTNEED every access maps the same page of the file
            // again, so no byte behind any reference into it changes.
            let done = unsafe {
                rustix::mm::madvise(
                    range.start as *mut std::ffi::c_void,
                    range.len(),
                    rustix::mm::Advice::LinuxDontNeed,
                )
            };
            if done.is_ok() {
                bytes += range.len();
            }
        }
        bytes
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/usr/local/bin/modelservice-operator";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

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
            clean_mappings(&smaps),
            vec![
                0x1000..0x2000,
                0x2000..0x5000,
                0x7000..0x8000,
                0xc000..0xd000
            ]
        );
    }

    #[test]
    fn a_mapping_with_a_page_of_its_own_is_kept_whichever_counter_shows_it() {
        for (anonymous, dirty) in [(4, 0), (0, 4), (4, 4)] {
            let smaps = mapping("1000-2000", "r-xp", EXE, anonymous, dirty);
            assert_eq!(
                clean_mappings(&smaps),
                Vec::<Range<usize>>::new(),
                "{anonymous} {dirty}"
            );
        }
        let shared_dirty = mapping("1000-2000", "r-xp", EXE, 0, 0)
            .replace("Private_Clean:       512 kB", "Shared_Dirty:        4 kB");
        assert!(clean_mappings(&shared_dirty).is_empty());
    }

    #[test]
    fn unreadable_lines_drop_nothing_and_keep_the_verdicts_of_the_rest() {
        let smaps = format!(
            "garbage\nzz-yy r-xp 0 0 0 {EXE}\n1000-2000 r-xp\n{}Private_Dirty: lots kB\n",
            mapping("3000-4000", "r-xp", EXE, 0, 0)
        );
        assert_eq!(clean_mappings(&smaps), vec![0x3000..0x4000]);
    }

    #[test]
    fn handing_back_leaves_the_code_and_data_as_they_were() {
        static TABLE: [u64; 4] = [1, 2, 3, 5];
        let before: u64 = std::hint::black_box(&TABLE).iter().sum();
        let handed = hand_back();
        let after: u64 = std::hint::black_box(&TABLE).iter().sum();
        assert_eq!((before, after), (11, 11));
        if cfg!(target_os = "linux") {
            assert!(handed > 0, "the test binary's code is a clean mapping");
        }
    }
}
