//! One edgecore at a time on this machine: its metaServer (10550) and kubelet endpoint (10350)
//! are fixed ports.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::Path;

use crate::binary::cache_dir;
use crate::error::{Error, Result};
use crate::process::reap_orphans;

/// Holds the machine-wide edgecore lock (an advisory `flock` on a file in the cache folder)
/// until dropped. The lock is per open file, so it serializes threads of one test binary as
/// well as separate test binaries; the kernel releases it when the holder dies.
#[derive(Debug)]
pub struct Serial {
    _file: File,
}

impl Serial {
    /// Blocks until no other edgecore test runs; says on stderr when it has to wait.
    /// Then it kills what a killed earlier run left behind: orphaned edgecores of the cached
    /// binary and orphaned cloudcores started on a `cloudcore-interop-*` config.
    pub fn acquire() -> Result<Serial> {
        let dir = cache_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let serial = Serial::acquire_at(&dir.join("edgecore.lock"))?;
        let cache = dir.display().to_string();
        let interop_dirs = std::env::temp_dir()
            .join("cloudcore-interop-")
            .display()
            .to_string();
        let reaped = reap_orphans(|argv| {
            argv[0].starts_with(&cache)
                || argv
                    .windows(2)
                    .any(|w| w[0] == "--config" && w[1].starts_with(&interop_dirs))
        });
        if !reaped.is_empty() {
            eprintln!("edgecore-interop: killed leftovers of an earlier run: {reaped:?}");
        }
        Ok(serial)
    }

    fn acquire_at(path: &Path) -> Result<Serial> {
        let mut file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                eprintln!(
                    "edgecore-interop: waiting for another edgecore test ({} is locked)",
                    path.display()
                );
                file.lock().map_err(|e| Error::io(path, e))?;
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(path, e)),
        }
        // For whoever wonders who holds it.
        let _ = file.set_len(0);
        let _ = writeln!(file, "{}", std::process::id());
        Ok(Serial { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn holders_never_overlap() {
        let dir = std::env::temp_dir().join(format!("edgecore-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (inside, max, path) = (inside.clone(), max.clone(), path.clone());
                std::thread::spawn(move || {
                    let _g = Serial::acquire_at(&path).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
