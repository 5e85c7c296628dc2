//! Room on the cache volume: old revisions are removed first, then a
//! download that cannot fit is refused before its first byte, with sizes a
//! person can act on, instead of failing hours later on a full disk.

use std::io;
use std::path::Path;

/// A directory that ext4 volumes create at their root and that only root
/// may remove: it is no revision of ours.
const LOST_FOUND: &str = "lost+found";

/// The room check's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// The model's size.
    pub total: u64,
    /// What is still to download: `total` minus what the volume holds of it.
    pub needed: u64,
    /// Free bytes: the least of the filesystem's free space and the
    /// claim's capacity minus what the volume holds.
    pub available: u64,
    /// The claim's size.
    pub capacity: u64,
}

impl Room {
    pub fn fits(&self) -> bool {
        self.needed <= self.available
    }

    /// e.g. "the model needs 86.0 GiB (86.0 GiB left to download), the
    /// claim has 50.0 GiB free of 50.0 GiB".
    pub fn message(&self) -> String {
        format!(
            "the model needs {} ({} left to download), the claim has {} free of {}",
            human_bytes(self.total),
            human_bytes(self.needed),
            human_bytes(self.available),
            human_bytes(self.capacity)
        )
    }
}

/// Sizes in messages read as status reads them.
pub use crate::core::download::human_bytes;

/// Measures the room for `needed` more bytes of a `total`-byte model.
pub(crate) fn measure(dest: &Path, capacity: u64, total: u64, needed: u64) -> io::Result<Room> {
    let stat = rustix::fs::statvfs(dest)?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    let used = used_bytes(dest)?;
    Ok(Room {
        total,
        needed,
        available: free.min(capacity.saturating_sub(used)),
        capacity,
    })
}

/// Removes every directory right under `dest` that is neither `key` nor
/// kept: the revisions no ModelService serves any more. A directory that
/// cannot be removed is logged and left, for the room check to judge.
pub(crate) fn prune(dest: &Path, key: &str, keep: &[String]) -> io::Result<()> {
    for entry in std::fs::read_dir(dest)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_dir = entry.file_type()?.is_dir();
        if !is_dir || name == key || name == LOST_FOUND || keep.iter().any(|k| k == name) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!("removed {name} from the cache: no ModelService uses it"),
            Err(e) => tracing::warn!("cannot remove {name} from the cache: {e}"),
        }
    }
    Ok(())
}

/// The length of every file under `dir` (symlinks not followed).
pub(crate) fn used_bytes(dir: &Path) -> io::Result<u64> {
    let mut sum = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                sum = sum.saturating_add(meta.len());
            }
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn room_message_names_both_sizes() {
        let room = Room {
            total: 86 * GIB,
            needed: 86 * GIB,
            available: 50 * GIB,
            capacity: 50 * GIB,
        };
        assert!(!room.fits());
        assert_eq!(
            room.message(),
            "the model needs 86.0 GiB (86.0 GiB left to download), the claim has 50.0 GiB free of 50.0 GiB"
        );
        assert!(
            Room {
                needed: 50 * GIB,
                ..room
            }
            .fits()
        );
    }

    #[test]
    fn available_is_the_claim_minus_what_it_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        std::fs::write(dir.path().join("a/b/x"), [0u8; 300]).expect("write");
        std::fs::write(dir.path().join("y"), [0u8; 200]).expect("write");
        assert_eq!(used_bytes(dir.path()).expect("walk"), 500);
        let room = measure(dir.path(), 1_000, 900, 600).expect("room");
        assert_eq!(room.available, 500);
        assert!(!room.fits());
        let room = measure(dir.path(), 100, 900, 0).expect("room");
        assert_eq!(
            room.available, 0,
            "a claim fuller than its size has no room"
        );
        assert!(room.fits(), "nothing left to download fits anywhere");
    }

    #[test]
    fn prune_keeps_the_key_the_kept_and_plain_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["new", "old", "serving", "lost+found"] {
            std::fs::create_dir(dir.path().join(d)).expect("mkdir");
            std::fs::write(dir.path().join(d).join("f"), b"x").expect("write");
        }
        std::fs::write(dir.path().join("note"), b"x").expect("write");
        prune(dir.path(), "new", &["serving".to_string()]).expect("prune");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("read")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        left.sort();
        assert_eq!(left, ["lost+found", "new", "note", "serving"]);
    }
}
