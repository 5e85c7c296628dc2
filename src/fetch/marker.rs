//! The marker that says a model's directory is complete and verified.
//!
//! It is written last, by rename, so it exists only when every file does:
//! a restarted Job (or a pod that mounts the cache) reads it instead of
//! listing the source again, and a half-written marker cannot exist.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The marker's file name in the model's directory.
pub const MARKER: &str = ".modelservice-complete";

/// The marker's content.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The source URI, as given to `fetch`.
    pub source: String,
    /// The revision or digest it resolved to.
    pub revision: String,
    pub files: u32,
    pub bytes: u64,
}

/// The marker of `dir`, if there is a readable one. An unreadable marker is
/// no marker: the download runs and writes a good one.
pub fn read(dir: &Path) -> Option<Marker> {
    let text = std::fs::read(dir.join(MARKER)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes the marker through a temporary file, synced, then renamed.
pub(crate) fn write(dir: &Path, marker: &Marker) -> std::io::Result<()> {
    let tmp = dir.join(format!("{MARKER}.tmp"));
    let json = serde_json::to_vec(marker).map_err(std::io::Error::other)?;
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&json)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(MARKER))?;
    // The rename itself is durable only once the directory is synced.
    std::fs::File::open(dir)?.sync_all()
}

/// Removes a marker that does not describe what is about to be written.
pub(crate) fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(MARKER)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_markers_read_back_and_garbage_reads_as_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()), None);
        let m = Marker {
            source: "hf://o/m@r".into(),
            revision: "r".into(),
            files: 2,
            bytes: 9,
        };
        write(dir.path(), &m).expect("write");
        assert_eq!(read(dir.path()), Some(m));
        assert!(!dir.path().join(format!("{MARKER}.tmp")).exists());
        std::fs::write(dir.path().join(MARKER), b"{half").expect("write");
        assert_eq!(read(dir.path()), None);
        remove(dir.path()).expect("remove");
        remove(dir.path()).expect("removing nothing is fine");
        assert!(!dir.path().join(MARKER).exists());
    }
}
