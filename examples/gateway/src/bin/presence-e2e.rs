//! Presence end to end (`make e2e`): the framed `device` firmware under
//! QEMU, the `gateway` binary bridging it to a mosquitto this program
//! starts (loopback, free ports), and `mosquitto_sub` watching the two
//! presence topics — no aimdb code on the watching side:
//!
//! 1. the gateway is born on `<prefix>/gateway/presence` and the device on
//!    `<prefix>/presence`, with the device's own birth sequence;
//! 2. QEMU frozen (SIGSTOP: the device goes silent, its TCP stream stays
//!    open) → the device is `offline` with cause `silent` within the
//!    heartbeat timeout; resumed (SIGCONT) → `online` again;
//! 3. QEMU killed (SIGKILL: the stream closes) → `offline`, cause
//!    `closed` (or `io` if a write met the dead socket first; never
//!    `silent`); a new QEMU → `online`;
//! 4. the gateway killed (SIGKILL) → its will: `offline`, cause `lost`,
//!    the sequence of its birth;
//! 5. a gateway that started its own QEMU and mosquitto killed (SIGKILL)
//!    → both of its children end too.
//!
//! Exits 0 only if every check held; every process it started is stopped
//! by PID on the way out.
//!
//! ```text
//! presence-e2e --qemu DEVICE.elf [--gateway PATH]
//! ```

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use aimdb_core::codec::{Decode, Json};
use aimdb_core::presence::{Cause, LinkState, Status};
use gateway::{broker, qemu};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const PREFIX: &str = "aimdb/presence-e2e";
/// The device firmware's and the gateway's heartbeat timeout.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);
/// Slack over a bound for a loaded machine (the watcher, the broker).
const SLACK: Duration = Duration::from_secs(2);
/// Bound on waits that are not about how soon a death is seen.
const WAIT: Duration = Duration::from_secs(20);

/// Which presence topic a line was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Device,
    Gateway,
}

struct Watcher {
    _child: Child,
    lines: mpsc::UnboundedReceiver<Result<(Who, LinkState), String>>,
}

impl Watcher {
    /// Births are retained, so a subscription that lands after one still
    /// gets it.
    fn start(port: u16) -> Result<Self, String> {
        let device = format!("{PREFIX}/presence");
        let gateway = format!("{PREFIX}/gateway/presence");
        let mut child = Command::new("mosquitto_sub")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-i", "presence-watcher", "-q", "1"])
            .args(["-t", &device, "-t", &gateway, "-F", "%t %p"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("mosquitto_sub: {e} (Debian package mosquitto-clients)"))?;
        let out = child.stdout.take().ok_or("mosquitto_sub: no stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut out = BufReader::new(out).lines();
            while let Ok(Some(line)) = out.next_line().await {
                let parsed = line
                    .split_once(' ')
                    .and_then(|(topic, payload)| {
                        let who = if topic == device {
                            Who::Device
                        } else if topic == gateway {
                            Who::Gateway
                        } else {
                            return None;
                        };
                        Json.decode(payload.as_bytes()).ok().map(|p| (who, p))
                    })
                    .ok_or_else(|| format!("not a presence line: {line:?}"));
                if tx.send(parsed).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            _child: child,
            lines,
        })
    }

    /// The next presence change of `who` matching `want`, within `bound`;
    /// changes of the other node are printed and skipped.
    async fn until(
        &mut self,
        who: Who,
        what: &str,
        bound: Duration,
        want: impl Fn(&LinkState) -> bool,
    ) -> Result<(LinkState, Duration), String> {
        let t = Instant::now();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(Ok((w, p)))) => {
                    println!("presence-e2e: {w:?} {p:?} ({:.0?})", t.elapsed());
                    if w == who && want(&p) {
                        return Ok((p, t.elapsed()));
                    }
                }
                Ok(Some(Err(e))) => return Err(e),
                Ok(None) => return Err("mosquitto_sub ended".into()),
                Err(_) => return Err(format!("no {what} within {bound:?}")),
            }
        }
    }
}

/// Sends `signal` to a process this program started.
fn signal(child: &Child, signal: &str) -> Result<(), String> {
    let pid = child.id().ok_or("the process already exited")?;
    let ok = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!("kill -{signal} {pid} failed"))
    }
}

struct Args {
    elf: PathBuf,
    gateway: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut elf = None;
    // Beside this program, where cargo builds the package's binaries.
    let mut gateway = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("gateway");
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--qemu" => elf = Some(PathBuf::from(value()?)),
            "--gateway" => gateway = PathBuf::from(value()?),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(Args {
        elf: elf.ok_or(USAGE)?,
        gateway,
    })
}

const USAGE: &str = "usage: presence-e2e --qemu DEVICE.elf [--gateway PATH]";

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args).await {
        Ok(summary) => {
            println!(
                "presence-e2e: passed in {:.1} s: {summary}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("presence-e2e: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<String, String> {
    let broker = broker::start()?;
    let port = broker.addr().port();
    let mut watch = Watcher::start(port)?;

    // A free loopback port for the gateway's device side.
    let device_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let mut gw = Command::new(&args.gateway)
        .args(["--listen", &format!("127.0.0.1:{device_port}")])
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--prefix", PREFIX])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", args.gateway.display()))?;
    let serial = format!("tcp:127.0.0.1:{device_port},reconnect=1");
    let mut device = qemu::spawn_serial(&args.elf, &serial)
        .map_err(|e| format!("cannot start qemu-system-arm: {e}"))?;

    // 1. Births.
    let (gw_birth, _) = watch
        .until(Who::Gateway, "gateway birth", WAIT, LinkState::is_online)
        .await?;
    let (born, _) = watch
        .until(Who::Device, "device birth", WAIT, LinkState::is_online)
        .await?;

    // 2. Frozen: silent, the stream open.
    signal(&device, "STOP")?;
    let (silent, after) = watch
        .until(
            Who::Device,
            "device offline after SIGSTOP",
            HEARTBEAT_TIMEOUT + SLACK,
            |p| p.status == Status::Offline,
        )
        .await?;
    if silent != LinkState::offline(born.seq, Cause::Silent) {
        return Err(format!("frozen device reported {silent:?}"));
    }
    println!("presence-e2e: frozen device offline after {after:.1?}: {silent:?}");
    signal(&device, "CONT")?;
    watch
        .until(
            Who::Device,
            "device back after SIGCONT",
            WAIT,
            LinkState::is_online,
        )
        .await?;

    // 3. Killed: the stream closes.
    device.kill().await.map_err(|e| format!("kill QEMU: {e}"))?;
    let (closed, after) = watch
        .until(
            Who::Device,
            "device offline after SIGKILL",
            HEARTBEAT_TIMEOUT + SLACK,
            |p| p.status == Status::Offline,
        )
        .await?;
    // The stream ends, seen as `closed` when the gateway reads the end
    // first, or `io` when a write to the dead socket comes first (the
    // gateway reads the device's table at each birth, so a request may be
    // on its way); never `silent`, which would mean the end went unseen.
    if !matches!(closed.cause, Some(Cause::Closed | Cause::Io)) {
        return Err(format!("killed device reported {closed:?}"));
    }
    println!("presence-e2e: killed device offline after {after:.1?}: {closed:?}");
    device = qemu::spawn_serial(&args.elf, &serial)
        .map_err(|e| format!("cannot restart qemu-system-arm: {e}"))?;
    let (reborn, _) = watch
        .until(
            Who::Device,
            "restarted device birth",
            WAIT,
            LinkState::is_online,
        )
        .await?;

    // 4. The gateway killed: its will.
    gw.kill()
        .await
        .map_err(|e| format!("kill the gateway: {e}"))?;
    let (will, after) = watch
        .until(Who::Gateway, "gateway will", WAIT, |p| {
            p.status == Status::Offline
        })
        .await?;
    if will != LinkState::offline(gw_birth.seq, Cause::Lost) {
        return Err(format!("gateway will {will:?} after birth {gw_birth:?}"));
    }
    println!("presence-e2e: gateway will {after:.1?} after SIGKILL: {will:?}");
    device.kill().await.map_err(|e| format!("kill QEMU: {e}"))?;
    drop(broker);

    // 5. A gateway with children of its own, killed.
    let orphans = children_end_with_gateway(args).await?;
    Ok(format!(
        "device born (seq {}), silent → offline after SIGSTOP, back after SIGCONT, \
         closed → offline after SIGKILL, reborn (seq {}); gateway born (seq {}) and its \
         will after SIGKILL; {orphans}",
        born.seq, reborn.seq, gw_birth.seq
    ))
}

/// Starts a gateway that starts QEMU and mosquitto itself, SIGKILLs it
/// once both run, and checks that both end with it.
async fn children_end_with_gateway(args: &Args) -> Result<String, String> {
    let mut gw = Command::new(&args.gateway)
        .args(["--qemu".as_ref(), args.elf.as_os_str()])
        .args(["--prefix", &format!("{PREFIX}/children")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", args.gateway.display()))?;
    let pid = gw.id().ok_or("the gateway exited at once")?;
    let deadline = Instant::now() + WAIT;
    let children = loop {
        let c = children_of(pid);
        let named = |n: &str| c.iter().any(|(_, name)| name.starts_with(n));
        if named("qemu-system") && named("mosquitto") {
            break c;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the gateway did not start QEMU and mosquitto: {c:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    gw.kill()
        .await
        .map_err(|e| format!("kill the gateway: {e}"))?;
    let deadline = Instant::now() + WAIT;
    loop {
        let left: Vec<_> = children.iter().filter(|(p, _)| running(*p)).collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            // Stopped here, so that no run leaves them behind.
            for (p, _) in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &p.to_string()])
                    .status();
            }
            return Err(format!(
                "still running {WAIT:?} after the gateway's SIGKILL: {left:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let names: Vec<_> = children.iter().map(|(_, n)| n.as_str()).collect();
    println!("presence-e2e: the killed gateway's children ended with it: {names:?}");
    Ok(format!(
        "the killed gateway's {} ended with it",
        names.join(" and ")
    ))
}

/// The running processes whose parent is `parent`: pid and name.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid = e.ok()?.file_name().to_str()?.parse().ok()?;
        let (name, state, ppid) = stat(pid)?;
        (ppid == parent && state != 'Z').then_some((pid, name))
    })
    .collect()
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state != 'Z')
}

/// A process's name, state and parent from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(String, char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (NAME) STATE PPID ...": the name may hold spaces and ')'.
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_string();
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((name, state, ppid))
}
