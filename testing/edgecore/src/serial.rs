//! Who may run an edgecore scenario when.
//!
//! The scenarios of one test binary share that binary's API server, and each one starts by
//! clearing its edge Nodes and KubeEdge CA: they take turns ([`Serial`]). Separate test binaries
//! have API servers of their own and run side by side. The one port a real edgecore cannot be
//! told to change is the kubelet endpoint its edgestream relays to (127.0.0.1:10350): a
//! scenario with a kubelet stand-in there holds it machine-wide ([`KubeletPort`], taken by
//! [`crate::FakeKubelet::start_on_kubelet_port`]).

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::Path;
use std::sync::{Condvar, Mutex, Once};

use crate::binary::cache_dir;
use crate::error::{Error, Result};
use crate::process::reap_orphans;

/// This test binary's turn for an edgecore scenario, until dropped.
#[derive(Debug)]
pub struct Serial {
    _private: (),
}

/// Whether a scenario of this process holds its turn, and who waits for it.
static TURN: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

impl Serial {
    /// Blocks until no other edgecore scenario of this test binary runs. The first call in a
    /// process also kills what a killed earlier run left behind: orphaned edgecores of the
    /// cached binary and orphaned cloudcores started on a `cloudcore-interop-*` config (their
    /// parent died, so no running test owns them).
    pub fn acquire() -> Result<Serial> {
        static REAPED: Once = Once::new();
        REAPED.call_once(reap_leftovers);
        let (held, freed) = &TURN;
        let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
        while *held {
            held = freed.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        *held = true;
        Ok(Serial { _private: () })
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        let (held, freed) = &TURN;
        *held.lock().unwrap_or_else(|e| e.into_inner()) = false;
        freed.notify_one();
    }
}

fn reap_leftovers() {
    let cache = cache_dir().display().to_string();
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
}

/// The machine-wide right to listen on edgecore's kubelet endpoint ([`crate::KUBELET`]), until
/// dropped (held by [`crate::FakeKubelet::start_on_kubelet_port`]'s listener): an advisory
/// `flock` on a file in the cache folder. The lock is per open file, so it orders threads of one
/// test binary as well as separate binaries; the kernel releases it when the holder dies.
/// Load tools that run a real edgecore with a kubelet stand-in of their own hold it too.
///
/// Dropping it unlocks explicitly before closing. A child process another thread is spawning
/// holds a copy of every descriptor from its fork until its exec closes them, and a `flock`
/// stays held until its last descriptor closes; `LOCK_UN` releases it whatever copies exist.
/// (The stand-in's listener is shut down before, for the same reason: see `kubelet.rs`.)
#[derive(Debug)]
pub struct KubeletPort {
    file: File,
}

impl KubeletPort {
    /// The lock file, for tests that copy its descriptor.
    #[cfg(test)]
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for KubeletPort {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

impl KubeletPort {
    /// Waits (on a blocking-pool thread, so the caller's runtime keeps running) until no
    /// other scenario on this machine holds the kubelet port; says on stderr when it has to.
    pub async fn acquire() -> Result<KubeletPort> {
        let dir = cache_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join("kubelet-port.lock");
        tokio::task::spawn_blocking(move || KubeletPort::acquire_at(&path))
            .await
            .map_err(|e| Error::io("kubelet port lock", std::io::Error::other(e)))?
    }

    pub(crate) fn acquire_at(path: &Path) -> Result<KubeletPort> {
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
                    "edgecore-interop: waiting for the kubelet port ({} is locked)",
                    path.display()
                );
                file.lock().map_err(|e| Error::io(path, e))?;
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(path, e)),
        }
        // For whoever wonders who holds it.
        let _ = file.set_len(0);
        let _ = writeln!(file, "{}", std::process::id());
        Ok(KubeletPort { file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Runs `enter` on 4 threads at once; returns how many were ever inside together.
    fn most_inside_at_once(
        enter: impl Fn() -> Box<dyn std::any::Any> + Send + Sync + 'static,
    ) -> usize {
        let enter = Arc::new(enter);
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (inside, max, enter) = (inside.clone(), max.clone(), enter.clone());
                std::thread::spawn(move || {
                    let _g = enter();
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
        max.load(Ordering::SeqCst)
    }

    #[test]
    fn turns_never_overlap() {
        assert_eq!(
            most_inside_at_once(|| Box::new(Serial::acquire().unwrap())),
            1
        );
    }

    /// A child process another thread is spawning holds a copy of every descriptor until its
    /// exec; a copy made here (`try_clone`, a `dup`) stands in for it deterministically.
    #[test]
    fn the_kubelet_port_is_free_once_dropped_even_while_a_copy_of_its_descriptor_lives() {
        let dir = std::env::temp_dir().join(format!("edgecore-copy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let port = KubeletPort::acquire_at(&path).unwrap();
        let copy = port.file().try_clone().unwrap();
        drop(port);
        let next = File::open(&path).unwrap();
        assert!(next.try_lock().is_ok(), "the lock outlived its holder");
        drop(copy);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn kubelet_port_holders_never_overlap() {
        let dir = std::env::temp_dir().join(format!("edgecore-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        let at = path.clone();
        assert_eq!(
            most_inside_at_once(move || Box::new(KubeletPort::acquire_at(&at).unwrap())),
            1
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
