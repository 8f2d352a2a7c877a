//! `aimdb`: list, read, write and watch the records of a running AimDB
//! node over MQTT or a framed link (TCP, serial). See README.md.

mod cmd;
mod query;
mod table;
mod transport;
mod view;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0  ok
  2  usage (bad arguments)
  3  unreachable (connect failed, or the connection closed)
  4  timeout (no answer from the node)
  5  node error (e.g. no such record, record is read-only)
  6  schema/JSON mismatch (the value does not fit the record's schema)
  7  not allowed (the broker refused to let this client read the node's
     answers: its ACL)
  1  anything else";

/// Talk to a running AimDB node: list its records, read, write and watch
/// them, through the node's remote-access responder.
///
/// Connect with one of --mqtt (with --node), --tcp or --serial. On a framed
/// link (TCP, serial) requests go on `aimdb/req` and answers come on
/// `aimdb/rsp`; on MQTT on `<node>/aimdb/req` and `<node>/aimdb/rsp`.
#[derive(Parser, Debug)]
#[command(name = "aimdb", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// MQTT broker: mqtt://HOST:PORT (mqtts://HOST:PORT for TLS).
    #[arg(long, global = true, value_name = "URL", conflicts_with_all = ["tcp", "serial"])]
    mqtt: Option<String>,
    /// The node's MQTT topic prefix (e.g. `aimdb/dev7`); with --mqtt.
    #[arg(long, global = true, value_name = "PREFIX")]
    node: Option<String>,
    /// MQTT user name.
    #[arg(long, global = true)]
    username: Option<String>,
    /// MQTT password.
    #[arg(long, global = true)]
    password: Option<String>,
    /// CA certificate (PEM) to verify the broker with; turns TLS on.
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) to present to the broker; with --tls-key.
    #[arg(long, global = true, value_name = "PEM", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM); with --tls-cert.
    #[arg(long, global = true, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Framed link over TCP: HOST:PORT.
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        conflicts_with = "serial"
    )]
    tcp: Option<String>,
    /// Framed link over a serial device or pty, opened read/write. Line
    /// settings (baud rate, raw mode) are yours to set, e.g.
    /// `stty -F /dev/ttyUSB0 115200 raw -echo`.
    #[arg(long, global = true, value_name = "PATH")]
    serial: Option<PathBuf>,
    /// Seconds to wait for a connection and for each answer.
    #[arg(long, global = true, default_value_t = 3.0, value_name = "SECS")]
    timeout: f64,
    /// Machine-readable output (JSON).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every node the broker knows (MQTT only): retained `<prefix>/presence`
    /// messages, and whether each node answers requests.
    Nodes,
    /// The described records: name, kind, capacity, writable, type, topics.
    Ls,
    /// One record's description, its schema included.
    Describe {
        /// Record name.
        record: String,
    },
    /// A record's newest value, decoded to JSON with its schema, and its
    /// write count.
    Get {
        /// Record name.
        record: String,
    },
    /// Writes a value (JSON, encoded with the record's schema) to a
    /// writable record.
    Set {
        /// Record name.
        record: String,
        /// The value as JSON, e.g. `true`, `3`, `{"seq":1,"millideg":-5}`.
        #[arg(value_name = "JSON")]
        value: String,
    },
    /// A live table, refreshed every second: record, kind, writes,
    /// writes/s, lag, last value.
    ///
    /// Each record is watched: the node sends its value after writes
    /// (the newest, with the write count it covers), at most 64 before the
    /// watch is renewed. WRITES/S counts every write (from the node's write
    /// counter); LAG counts the writes since the start that arrived as no
    /// value (a stream written faster than updates go). A record the node
    /// will not watch (no free reader slot, all watches taken) is polled
    /// with `get` once a second instead. On exit (--seconds, Ctrl-C) the
    /// watches are stopped. With --json, one JSON line per sample.
    Watch {
        /// Records to watch (default: all).
        records: Vec<String>,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
    },
    /// Writes, and writes that replaced a value no reader took, per record.
    Stats,
}

/// Why a command failed; each maps to an exit code.
#[derive(Debug)]
pub enum Fail {
    Usage(String),
    Unreachable(String),
    Timeout(String),
    Node(aimdb_core::remote::RequestError),
    Schema(String),
    NotAllowed(String),
    Other(String),
}

impl Fail {
    fn code(&self) -> u8 {
        match self {
            Fail::Usage(_) => 2,
            Fail::Unreachable(_) => 3,
            Fail::Timeout(_) => 4,
            Fail::Node(_) => 5,
            Fail::Schema(_) => 6,
            Fail::NotAllowed(_) => 7,
            Fail::Other(_) => 1,
        }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Node(e) => write!(f, "{e}"),
            Fail::Usage(m)
            | Fail::Unreachable(m)
            | Fail::Timeout(m)
            | Fail::Schema(m)
            | Fail::NotAllowed(m)
            | Fail::Other(m) => f.write_str(m),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aimdb: {e}");
            return ExitCode::from(1);
        }
    };
    let (context, result) = rt.block_on(cmd::run(&cli));
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("aimdb: {context}: {e}");
            e.code()
        }
    };
    // Exit without waiting for the runtime's blocking threads (a serial
    // read that never returns).
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code.into());
}

impl Cli {
    fn timeout(&self) -> Result<Duration, Fail> {
        Duration::try_from_secs_f64(self.timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                Fail::Usage(format!("--timeout {}: not a positive number", self.timeout))
            })
    }
}
