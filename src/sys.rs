//! Process facts read from the OS: resident and peak memory (Linux `/proc`), and
//! the machine's total memory for choosing default budgets.

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

/// Total physical memory in bytes, if known.
pub fn total_memory_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// The soft limit on open file descriptors, if known (Linux `/proc`). The disk
/// store keeps shard files open up to a share of it.
pub fn open_files_limit() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    // "Max open files            1024                 4096                 files"
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

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
