//! What a runner uses, read from `/proc` and its directory.

use std::collections::HashMap;
use std::path::Path;

/// Process `root` and every process below it, found by reading every
/// process's parent from `/proc` (for a runner without a cgroup).
pub fn process_tree(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![root];
    };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let parent = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| parse_stat(&stat));
        if let Some((parent, _)) = parent {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut tree = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        tree.push(pid);
        pending.extend(children.get(&pid).into_iter().flatten());
    }
    tree
}

/// CPU time of `pids` (user and system, and of their reaped children), in
/// clock ticks; a process that is gone counts nothing.
pub fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| parse_stat(&stat))
        .map(|(_, used)| used)
        .sum()
}

/// The parent and the CPU ticks (user, system, and of reaped children) in a
/// `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    // The command name (field 2) may hold anything but ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): ppid is field 4, utime..cstime 14..17.
    let parent = fields.get(1)?.parse().ok()?;
    let used = fields
        .get(11..15)?
        .iter()
        .map(|field| field.parse::<u64>().unwrap_or(0))
        .sum();
    Some((parent, used))
}

/// The smallest share of disk any file or directory counts for.
const BLOCK: u64 = 4096;

/// Disk taken under `dir`: allocated bytes, each entry at least one block.
/// Stops counting once past `cap`.
pub fn disk_use(dir: &Path, cap: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // Not following symlinks, and relative to the open directory.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            total += (meta.blocks() * 512).max(BLOCK);
            if total > cap {
                return total;
            }
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_parent_and_cpu_even_with_a_strange_command_name() {
        let stat =
            "4242 (no de) x) S 17 4242 4242 0 -1 4194560 500 0 0 0 120 30 7 3 20 0 11 0 9 1 2";
        assert_eq!(parse_stat(stat), Some((17, 160)));
    }

    #[test]
    fn this_process_uses_some_cpu_and_a_directory_counts_its_files() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {}
        let tree = process_tree(std::process::id());
        assert_eq!(tree[0], std::process::id());
        assert!(cpu_ticks(&tree) > 0);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 100_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), b"x").unwrap();
        let used = disk_use(dir.path(), u64::MAX);
        assert!((100_000 + 2 * BLOCK..200_000).contains(&used), "{used}");
        assert!(
            disk_use(dir.path(), 10) <= 100_000 + BLOCK,
            "stops once past the cap"
        );
    }
}
