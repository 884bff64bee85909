//! Finding runner processes by what their command line mentions (a server's
//! data directory, under which its runner roots live), through `/proc`.

use std::time::{Duration, Instant};

/// A process, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub started: u64,
    /// The command line, arguments joined by spaces.
    pub cmdline: String,
}

/// Live (not zombie) processes other than this one whose command line
/// contains `needle`.
pub fn mentioning(needle: &str) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            if !cmdline.contains(needle) {
                return None;
            }
            let started = live_start_time(pid)?;
            Some(Process {
                pid,
                started,
                cmdline: cmdline.trim_end().to_owned(),
            })
        })
        .collect()
}

/// Whether `process` still runs (same pid and start time, not a zombie).
pub fn is_alive(process: &Process) -> bool {
    live_start_time(process.pid) == Some(process.started)
}

/// Waits up to `grace` for every one of `processes` to end; returns those
/// still alive then.
pub async fn survivors(processes: Vec<Process>, grace: Duration) -> Vec<Process> {
    let started = Instant::now();
    loop {
        let alive: Vec<Process> = processes.iter().filter(|p| is_alive(p)).cloned().collect();
        if alive.is_empty() || started.elapsed() >= grace {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends SIGKILL to `process` if it is still the same process.
pub async fn kill(process: &Process) {
    if is_alive(process) {
        signal(process.pid, "KILL").await;
    }
}

/// Sends signal `name` (e.g. `TERM`) to `pid` with `kill(1)`.
pub async fn signal(pid: u32, name: &str) {
    let _ = tokio::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
}

/// The start time of `pid` unless it is gone or a zombie.
fn live_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start behind the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = *fields.first()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_is_found_by_its_arguments_and_seen_to_end() {
        let marker = format!("chaos-procs-test-{}", std::process::id());
        // `sleep` itself under the marker's name: a shell would fork a child
        // that bears the shell's command line until it execs.
        let mut child = tokio::process::Command::new("sleep")
            .arg0(&marker)
            .arg("30")
            .kill_on_drop(true)
            .spawn()
            .expect("sh runs");
        // Until the child has exec'd, its command line is still ours.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut found = mentioning(&marker);
        while found.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            found = mentioning(&marker);
        }
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(is_alive(&found[0]));
        assert_eq!(
            survivors(found.clone(), Duration::from_millis(200))
                .await
                .len(),
            1
        );
        kill(&found[0]).await;
        let _ = child.wait().await;
        assert!(survivors(found, Duration::from_secs(2)).await.is_empty());
    }
}
