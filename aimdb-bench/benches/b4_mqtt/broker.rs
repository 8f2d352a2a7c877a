//! The mosquitto b4 publishes through, and CPU time read from `/proc`.
//!
//! The broker is the system's `mosquitto` (`aimdb_bench::tools::mosquitto`;
//! `MOSQUITTO=/path` picks another), started on 127.0.0.1 and a free port with its files in a
//! temporary directory, and killed by PID when dropped. Its queue to a
//! client is unbounded (`max_queued_messages 0`): mosquitto otherwise
//! drops QoS 0 messages for a subscriber more than 1,000 packets behind,
//! and a message lost there would be the bench's subscriber, not the
//! publisher under test. Its receive maximum is [`IN_FLIGHT`] (mosquitto's
//! default is 20), so both publishers keep the same window. It logs
//! errors and warnings only (to a file):
//! `log_type all` writes a line per message.
//!
//! CPU time is the kernel's per-thread run time in nanoseconds
//! (`/proc/PID/task/TID/schedstat`, first field), summed over threads
//! where a process is meant: exact, unlike the 10 ms ticks of
//! `/proc/PID/stat`, and no `unsafe` (`clock_gettime` would need it).

use std::collections::BTreeMap;

/// QoS 1 publishes unacknowledged at most, for both publishers: rumqttc's
/// default (`MqttOptions::set_inflight`), our `Config::max_in_flight`, and
/// the broker's receive maximum (`max_inflight_messages`).
pub const IN_FLIGHT: u16 = 100;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aimdb_bench::tools::{self, Tool};

/// Bound on the broker's start.
const START_WAIT: Duration = Duration::from_secs(10);

/// A mosquitto process, killed (by its PID) on drop.
pub struct Broker {
    child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: PathBuf,
}

fn binary() -> Result<PathBuf, String> {
    tools::mosquitto().ok_or_else(|| Tool::Mosquitto.missing().to_string())
}

/// A port on 127.0.0.1 nothing listened on a moment ago.
fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

impl Broker {
    /// Starts mosquitto and waits until its port accepts TCP.
    pub fn start() -> Result<Self, String> {
        let bin = binary()?;
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!("aimdb-b4-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = dir.join("mosquitto.log");
        // `user root`: run as root (CI), keep root instead of switching to
        // a `mosquitto` user that may not exist; ignored otherwise.
        let conf = format!(
            "user root\nlog_dest file {}\nlog_type error\nlog_type warning\n\
             listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n\
             max_inflight_messages {IN_FLIGHT}\n",
            log.display()
        );
        let conf_path = dir.join("mosquitto.conf");
        std::fs::write(&conf_path, conf).map_err(|e| format!("{}: {e}", conf_path.display()))?;
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let mut broker = Self { child, port, dir };
        let deadline = Instant::now() + START_WAIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = broker.child.try_wait() {
                return Err(format!(
                    "mosquitto exited ({status}) before listening:\n{}",
                    broker.log()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("mosquitto not listening within {START_WAIT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(broker)
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time of every thread of the broker, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        threads_cpu(self.pid()).values().sum()
    }

    /// What the broker logged (errors and warnings).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("mosquitto.log")).unwrap_or_default()
    }

    /// `mosquitto version X.Y.Z`, from `mosquitto -h`.
    pub fn version() -> String {
        binary()
            .ok()
            .and_then(|b| Command::new(b).arg("-h").output().ok())
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(|l| l.trim().to_string())
            })
            .unwrap_or_else(|| "mosquitto (version unknown)".to_string())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run time (ns) of one thread from its `schedstat` file.
fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time (ns) of every live thread of process `pid`, by thread id.
pub fn threads_cpu(pid: u32) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let tid = task.file_name().to_str().and_then(|t| t.parse().ok());
        if let (Some(tid), Some(ns)) = (tid, schedstat_ns(&task.path().join("schedstat"))) {
            out.insert(tid, ns);
        }
    }
    out
}

/// The calling thread's id (`/proc/thread-self` links to `PID/task/TID`).
pub fn own_tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// The host's load average over 1, 5 and 15 minutes.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
