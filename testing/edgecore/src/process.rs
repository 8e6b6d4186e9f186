//! A child process in its own process group with its output in a log file; the whole group is
//! killed on drop, also while a test panics, so no orphan survives a test.

use std::fs::File;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use crate::error::{Error, Result};

/// A running child and its log. Dropping it sends SIGKILL to its process group and reaps it.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    pgid: Option<Pid>,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

impl Process {
    /// Starts `cmd` in a new process group, stdin closed, stdout and stderr appended to `log`
    /// after a marker line (so a restarted process keeps the earlier output above).
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Process> {
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(log, e))?;
        let _ = writeln!(
            file,
            "===== edgecore-interop: starting {name}: {cmd:?} at {:?} =====",
            std::time::SystemTime::now()
        );
        let err = file.try_clone().map_err(|e| Error::io(log, e))?;
        cmd.stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().map_err(|e| Error::Process {
            what: format!("cannot start {name}: {e}"),
            log: String::new(),
        })?;
        let pgid = Pid::from_child(&child);
        Ok(Process {
            name: name.to_owned(),
            child,
            pgid: Some(pgid),
            log: log.to_path_buf(),
            exited: None,
        })
    }

    /// The process id (also its process group id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log (all runs of this process name).
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// The whole log as text (lossy).
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Sends `signal` to the whole group; a group that is gone is not an error.
    pub fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = kill_process_group(pgid, signal);
        }
    }

    /// Freezes the group (SIGSTOP): sockets stay open, nothing is sent.
    pub fn pause(&self) {
        self.signal(Signal::STOP);
    }

    /// Thaws the group (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::CONT);
    }

    /// The exit status if the process has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits up to `limit` for the process to end by itself.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL to the group, then reaps the process.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.signal(Signal::KILL);
        // A stopped process dies of SIGKILL too; reaping cannot block for long.
        let status = self.exited.or_else(|| self.child.wait().ok());
        self.exited = status;
        self.pgid = None;
        status
    }

    /// SIGTERM to the group; SIGKILL when it has not ended within `grace`. Returns how it
    /// ended and whether it ended by itself within the grace period.
    pub async fn terminate(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        self.signal(Signal::TERM);
        match self.wait_exit(grace).await {
            Some(s) => {
                // Whatever else is left in its group.
                self.signal(Signal::KILL);
                self.pgid = None;
                (Some(s), true)
            }
            None => (self.kill(), false),
        }
    }

    /// What this process is called in messages.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.pgid.is_some() {
            self.kill();
        }
    }
}

/// Kills what an earlier, killed test run left behind: process groups whose leader was
/// reparented to init (its test binary died without running `Drop`, e.g. on Ctrl-C, which does
/// not reach our children's own process groups) and that `is_ours` recognises by their
/// command line. Returns the leaders' pids. Safe beside running scenarios, in this test binary
/// or another: [`Process::spawn`] makes each process a direct child of its test binary, so it is
/// reparented only once that binary is gone.
pub fn reap_orphans(is_ours: impl Fn(&[String]) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces, so split after ")".
        let fields: Vec<&str> = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.split(' ').collect())
            .unwrap_or_default();
        let (Some(ppid), Some(pgrp)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        if *ppid != "1" || *pgrp != pid.to_string() {
            continue;
        }
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.is_empty() || !is_ours(&argv) {
            continue;
        }
        if let Some(pgid) = Pid::from_raw(pid as i32) {
            let _ = kill_process_group(pgid, Signal::KILL);
            killed.push(pid);
        }
    }
    killed
}

/// The last `lines` lines of a file (lossy UTF-8); empty when unreadable.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry: look at its state.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
            .unwrap_or(false)
    }

    fn grandchild_pid(log: &Path) -> u32 {
        for _ in 0..100 {
            if let Some(pid) = std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("child ").and_then(|p| p.trim().parse().ok()))
            {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no grandchild pid in {}", tail(log, 10));
    }

    #[test]
    fn drop_kills_the_whole_group_even_on_panic() {
        let dir = std::env::temp_dir().join(format!("edgecore-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("sh.log");
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("sleep 300 & echo child $!; wait");
        let p = Process::spawn("sh", cmd, &log).unwrap();
        let (parent, child) = (p.id(), grandchild_pid(&log));
        assert!(alive(child));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _p = p;
            panic!("test failure");
        }));
        assert!(r.is_err());
        assert!(!alive(parent), "the process was reaped");
        // The grandchild is reparented to init and reaped there; give it a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(child) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(child), "grandchild {child} survived");
        assert!(tail(&log, 5).contains("starting sh"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn orphans_recognised_as_ours_are_reaped_and_others_left_alone() {
        // Unique per run: an orphan of an earlier run whose test binary had the same pid must
        // not look like this one.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir =
            std::env::temp_dir().join(format!("edgecore-orphan-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ours = dir.join("fake-edgecore");
        std::fs::copy("/bin/sleep", &ours).unwrap();
        // A group leader (setsid) started by a shell that exits at once: reparented to init,
        // as a test binary's child is after the binary dies.
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "setsid {} 300 >/dev/null 2>&1 & echo $!",
                ours.display()
            ))
            .output()
            .unwrap();
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let ours_text = ours.display().to_string();
        // Reparented to init, its own group leader, and running our binary: the shell may exit
        // before its child has called setsid(2) and exec'd, and until then it is not an orphan
        // of ours.
        let settled = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<String> = stat
                .rsplit_once(") ")
                .map(|(_, r)| r.split(' ').map(str::to_owned).collect())
                .unwrap_or_default();
            let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
                .unwrap_or_default()
                .split(|b| *b == 0)
                .next()
                .map(|a| String::from_utf8_lossy(a).into_owned());
            fields.get(1).map(String::as_str) == Some("1")
                && fields.get(2) == Some(&pid.to_string())
                && argv0.as_deref() == Some(ours_text.as_str())
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !settled() {
            assert!(
                Instant::now() < deadline,
                "not an orphan group leader running ours"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(reap_orphans(|argv| argv[0] == "no-such-binary").is_empty());
        assert!(alive(pid));
        let reaped = reap_orphans(|argv| argv[0] == ours_text);
        assert_eq!(reaped, vec![pid], "reaped {reaped:?}, started {pid}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn terminate_reports_a_graceful_exit() {
        let dir = std::env::temp_dir().join(format!("edgecore-term-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("300");
        let mut p = Process::spawn("sleep", cmd, &dir.join("log")).unwrap();
        let (status, graceful) = p.terminate(Duration::from_secs(5)).await;
        assert!(graceful);
        assert!(!status.unwrap().success());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
