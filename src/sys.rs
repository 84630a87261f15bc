//! Process facts read from the OS: resident and peak memory, CPU time and the
//! open-file limit (Linux `/proc`), the memory the process may use (the
//! machine's, or its control group's limit) for choosing default budgets, and
//! the one allocator setting budgeted runs need.

fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Current resident set size in bytes (0 where unknown).
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:").map_or(0, |k| k * 1024)
}

/// Peak resident set size in bytes (0 where unknown).
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:").map_or(0, |k| k * 1024)
}

/// CPU time (user plus system, all threads) this process has used, in seconds
/// (0 where unknown). `/proc` counts in USER_HZ, which Linux fixes at 100.
pub fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // fields after the parenthesised command name; utime and stime are 14 and 15
    let Some(rest) = s.rfind(')').map(|i| &s[i + 1..]) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) as f64 / 100.0
}

/// The memory this process may use, in bytes, if known: the machine's
/// physical memory, or the memory limit of its control group where that is
/// lower (a container started with `--memory 4g`, a Kubernetes pod's limit),
/// so that budgets chosen from it fit where the process runs. Read once per
/// process: each solve of a collection's levels asks for it several times.
pub fn total_memory_bytes() -> Option<u64> {
    static TOTAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(read_total_memory)
}

fn read_total_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let machine = line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = cgroup_memory_limit(&cgroups, |path| std::fs::read_to_string(path).ok());
    Some(limit.map_or(machine, |l| l.min(machine)))
}

/// The lowest memory limit on the control groups `cgroups` (the text of
/// `/proc/self/cgroup`) names and their ancestors, cgroup v2
/// (`memory.max`) or v1 (`memory.limit_in_bytes`), reading files with
/// `read`. `None` where no group sets one.
fn cgroup_memory_limit(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let mut files = Vec::new();
    for line in cgroups.lines() {
        // "hierarchy-id:controllers:path"
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else { continue };
        let (root, file) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max"),
            c if c.split(',').any(|c| c == "memory") => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
            _ => continue,
        };
        // the group and each group above it; inside a container's own
        // namespace the path is "/" and the root holds the limit
        let mut dir = path.trim_end_matches('/');
        loop {
            files.push(format!("{root}{dir}/{file}"));
            match dir.rfind('/') {
                Some(i) => dir = &dir[..i],
                None => break,
            }
        }
    }
    // v1 writes "no limit" as a number near 2^63
    files.iter().filter_map(|f| read(f)?.trim().parse::<u64>().ok()).filter(|&l| l < 1 << 62).min()
}

/// The soft limit on open file descriptors, if known (Linux `/proc`). The disk
/// store keeps shard files open up to a share of it.
pub fn open_files_limit() -> Option<u64> {
    static LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(read_open_files_limit)
}

fn read_open_files_limit() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    // "Max open files            1024                 4096                 files"
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// Makes the allocator hand large freed blocks straight back to the OS, for runs
/// under a memory budget. glibc raises its mmap threshold to the largest block
/// freed so far (up to 32 MiB), after which big vectors come from heap arenas that
/// keep their pages when freed: resident memory then stays at its high-water mark
/// plus fragmentation instead of following what is live. A fixed 64 KiB threshold
/// (the vectors that matter are far larger) keeps the overhead fixed. glibc also
/// gives each thread that meets a locked arena a new one, up to eight per core,
/// each keeping its own free pages: `arenas` (the compute threads) caps them.
/// Measured on a cluster worker under `--mem 1MiB` (Microban I #144, plain, four
/// runs each): peak RSS 8.5 to 13.7 MiB above idle without either, 7.0 to 10.2
/// with the threshold alone, 6.3 to 7.3 with both (docs/cluster.md). No effect
/// on other C libraries.
pub fn release_large_frees(arenas: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before the
    // worker threads allocate anything large and takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, arenas.clamp(1, i32::MAX as usize) as i32);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Takes an exclusive advisory lock on `file` without waiting (`flock`):
/// `Ok(false)` when another process holds it. The lock goes when the file is
/// closed, so also when the process ends, however it ends. Where the platform
/// has no `flock`, `Ok(true)`: no lock is taken.
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock only reads the descriptor, which `file` keeps open
        // until the call returns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::WouldBlock { Ok(false) } else { Err(e) };
        }
        Ok(true)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(true)
    }
}

/// Flushes every written file and directory entry of the filesystem holding
/// `path` to disk in one call (Linux `syncfs`), instead of an fsync per file and
/// per directory. `Ok(false)` where the platform has no such call: the caller
/// then syncs file by file.
pub fn sync_filesystem(path: &std::path::Path) -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path)?;
        // SAFETY: syncfs only reads the descriptor, which `f` keeps open until
        // the call returns.
        let r = unsafe { libc::syncfs(f.as_raw_fd()) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Ok(false)
    }
}

/// Whether [`sync_filesystem`] does its work on this platform.
pub const SYNC_FILESYSTEM: bool = cfg!(target_os = "linux");

/// Formats a byte count with a binary unit.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::cgroup_memory_limit;
    use std::collections::HashMap;

    fn limit(cgroups: &str, files: &[(&str, &str)]) -> Option<u64> {
        let files: HashMap<String, String> = files.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        cgroup_memory_limit(cgroups, |p| files.get(p).cloned())
    }

    #[test]
    fn a_containers_memory_limit_caps_the_memory_a_default_budget_is_cut_from() {
        // cgroup v2 in the container's namespace: the root holds the limit
        assert_eq!(limit("0::/\n", &[("/sys/fs/cgroup/memory.max", "4294967296\n")]), Some(4 << 30));
        assert_eq!(limit("0::/\n", &[("/sys/fs/cgroup/memory.max", "max\n")]), None);
        // v2 seen from the host: the lowest limit of the group and its parents
        let v2 = [
            ("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max"),
            ("/sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648"),
            ("/sys/fs/cgroup/kubepods/memory.max", "8589934592"),
        ];
        assert_eq!(limit("0::/kubepods/pod1/c1\n", &v2), Some(2 << 30));
        // cgroup v1: "no limit" is a number near 2^63; other controllers are ignored
        let v1 = "4:memory:/process_api/abc\n3:cpuset:/\n";
        let unlimited = [("/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712")];
        assert_eq!(limit(v1, &unlimited), None);
        let limited = [("/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "1073741824")];
        assert_eq!(limit("4:cpuacct,memory:/process_api/abc\n", &limited), Some(1 << 30));
        assert_eq!(limit("", &[]), None);
        assert_eq!(limit("garbage\n1:memory\n", &[]), None);
    }
}
