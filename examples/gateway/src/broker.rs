//! The MQTT broker the gateway starts when no `--broker` is given: a
//! mosquitto child process listening on a free loopback port (anonymous,
//! no persistence), stopped by PID when the gateway exits (and by the
//! kernel when the gateway is killed: [`crate::child`]). The MQTT-device
//! end-to-end run starts one with persistence ([`start_persistent`]) and
//! restarts it mid-run ([`Broker::restart`]), with a TLS 1.3 listener
//! beside the plain one for the device that speaks TLS ([`Tls`]).
//!
//! A child process rather than a broker crate in-process: an in-process
//! broker would pull about 170 crates into the gateway's build, most of the
//! demo's first-run time; mosquitto is what the tests use anyway, installed
//! by `scripts/install-deps.sh`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The running broker; killed (by its PID) and its config removed on drop.
pub struct Broker {
    child: Child,
    dir: PathBuf,
    conf: PathBuf,
    exe: PathBuf,
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
}

/// A TLS 1.3 listener's certificate files (PEM).
#[derive(Debug, Clone)]
pub struct Tls {
    /// The CA (what clients that present a certificate are checked with).
    pub ca: PathBuf,
    /// The broker's certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl Broker {
    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The loopback address of the TLS listener, if it has one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the broker with SIGTERM (a persistent broker saves its
    /// sessions and queued messages), waits for it to exit, and starts it
    /// again on the same port with the same configuration.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop()?;
        self.resume()
    }

    /// Stops the broker with SIGTERM (a persistent broker saves its
    /// sessions and queued messages) and waits for it to exit: an outage
    /// until [`Broker::resume`].
    pub fn stop(&mut self) -> Result<(), String> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .map_err(|e| format!("kill -TERM {pid}: {e}"))?;
        if !sent.success() {
            return Err(format!("kill -TERM {pid}: {sent}"));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => return Err(format!("mosquitto {pid} ignored SIGTERM")),
                Err(e) => return Err(format!("waiting for mosquitto {pid}: {e}")),
            }
        }
        Ok(())
    }

    /// Starts the stopped broker again on the same port with the same
    /// configuration (and, with persistence, what it saved).
    pub fn resume(&mut self) -> Result<(), String> {
        self.child = spawn(&self.exe, &self.conf)?;
        self.wait_listening()
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        for addr in [Some(self.addr), self.tls_addr].into_iter().flatten() {
            self.wait_port(addr)?;
        }
        Ok(())
    }

    fn wait_port(&mut self, addr: SocketAddr) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "mosquitto exited before listening on {addr}: {status}"
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("mosquitto did not listen on {addr}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

fn spawn(exe: &PathBuf, conf: &PathBuf) -> Result<Child, String> {
    crate::child::command(exe)
        .arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `mosquitto` from `PATH`, else Debian's `/usr/sbin/mosquitto`.
fn mosquitto() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("mosquitto"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/mosquitto")).filter(|p| p.is_file()))
        .ok_or_else(|| {
            "mosquitto not found: install the Debian package `mosquitto` \
             (scripts/install-deps.sh does), or give --broker"
                .to_string()
        })
}

/// Starts mosquitto (no persistence) and waits until it accepts
/// connections.
pub fn start() -> Result<Broker, String> {
    start_with(false, None)
}

/// Starts mosquitto with persistence in its own temporary directory
/// (saved on SIGTERM, loaded on start: sessions, subscriptions and queued
/// QoS 1/2 messages survive [`Broker::restart`]).
pub fn start_persistent() -> Result<Broker, String> {
    start_with(true, None)
}

/// [`start_persistent`] with a second listener, TLS 1.3 only, on another
/// free loopback port ([`Broker::tls_addr`]).
pub fn start_persistent_tls(tls: &Tls) -> Result<Broker, String> {
    start_with(true, Some(tls))
}

/// A free loopback port, asked from the OS and handed to the broker.
/// Another process could take it in between; the wait for the broker then
/// fails loudly (mosquitto exits when it cannot bind).
fn free_addr() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))
}

fn start_with(persistent: bool, tls: Option<&Tls>) -> Result<Broker, String> {
    let exe = mosquitto()?;
    let addr = free_addr()?;
    let tls_addr = tls.map(|_| free_addr()).transpose()?;
    let dir = std::env::temp_dir().join(format!(
        "aimdb-gateway-{}-{}",
        std::process::id(),
        addr.port()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let conf = dir.join("mosquitto.conf");
    let persistence = if persistent {
        format!(
            "persistence true\npersistence_location {}/\n",
            dir.display()
        )
    } else {
        "persistence false\n".to_string()
    };
    // `user root`: run as root (CI), mosquitto would otherwise switch to a
    // `mosquitto` user, which cannot write this directory and which clears
    // the parent-death signal (a change of user does); as any other user
    // the line has no effect.
    let mut text = format!(
        "allow_anonymous true\nuser root\n{persistence}\
         log_dest stderr\nlog_type error\nlog_type warning\n\
         listener {} 127.0.0.1\n",
        addr.port()
    );
    if let (Some(tls), Some(at)) = (tls, tls_addr) {
        text.push_str(&format!(
            "listener {} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\ntls_version tlsv1.3\n",
            at.port(),
            tls.ca.display(),
            tls.cert.display(),
            tls.key.display()
        ));
    }
    std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
    let child = spawn(&exe, &conf)?;
    let mut broker = Broker {
        child,
        dir,
        conf,
        exe,
        addr,
        tls_addr,
    };
    broker.wait_listening()?;
    Ok(broker)
}
