//! What the load tools read about a server process from `/proc` (each includes this file with
//! `#[path]`; cargo does not build `examples/support/` as an example of its own). Linux only:
//! elsewhere every figure reads 0.

/// A `kB` or count field of `/proc/<pid>/status` (`VmRSS`, `Threads`, …); 0 when unreadable.
fn status_field(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident memory in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS")
}

/// OS threads. Tokio tasks are not visible from outside the process.
pub(crate) fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads")
}

/// Open file descriptors (entries of `/proc/<pid>/fd`).
pub(crate) fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Read and write system calls the whole process made so far (`syscr`, `syscw` of
/// `/proc/<pid>/io`, every thread, live or ended); zeros when unreadable.
// Not every tool that includes this file counts system calls.
#[allow(dead_code)]
pub(crate) fn io_calls(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("syscr"), field("syscw"))
}

/// Context switches of the process's live threads so far, voluntary (waiting for something)
/// plus involuntary (preempted), summed over `/proc/<pid>/task/*/status`.
// Not every tool that includes this file counts context switches.
#[allow(dead_code)]
pub(crate) fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|s| {
            s.lines()
                .filter_map(|l| {
                    l.strip_prefix("voluntary_ctxt_switches:")
                        .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                })
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// KiB as MiB for tables.
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Established TCP connections of process `pid` to port `port` (its sockets, from
/// `/proc/<pid>/fd`, matched in `/proc/<pid>/net/tcp`).
// Not every tool that includes this file counts connections.
#[allow(dead_code)]
pub(crate) fn connections_to(pid: u32, port: u16) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let inodes: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            let t = target.to_string_lossy();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let want = format!(":{port:04X}");
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        // sl local remote st … inode: established (01) to the port, owned by the process.
        count += text
            .lines()
            .skip(1)
            .filter(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 9 && c[2].ends_with(&want) && c[3] == "01" && inodes.contains(c[9])
            })
            .count();
    }
    count
}

/// CPU seconds the whole machine spent busy so far (every core, every process: `/proc/stat`'s
/// first line less idle and iowait, in clock ticks of 10 ms); 0 when unreadable.
// Not every tool that includes this file reads the machine's CPU.
#[allow(dead_code)]
pub(crate) fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    // user nice system idle iowait irq softirq steal …
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: f64 = ticks
        .iter()
        .enumerate()
        .take(8)
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    busy / 100.0
}

/// The cores this process may run on.
#[allow(dead_code)]
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
