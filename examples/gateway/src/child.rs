//! Child processes that end with the process that started them, however
//! it ends.
//!
//! Dropping a child handle stops it when the gateway exits normally or
//! panics; a SIGKILL runs no destructor, so on Linux the child also gets
//! the kernel's parent-death signal (`PR_SET_PDEATHSIG`, here SIGKILL),
//! set by util-linux's `setpriv` just before it executes the program: no
//! `unsafe` `pre_exec` hook in this crate. The signal follows the thread
//! that spawned the child, so spawn from a thread that lives as long as
//! the process (the main thread, or a runtime worker; not a blocking-pool
//! thread, which exits when idle).

use std::ffi::OsStr;
use std::process::Command;

/// A command for `program` that dies with this process on Linux (through
/// `setpriv --pdeathsig KILL`); elsewhere a plain command.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    if cfg!(target_os = "linux") {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}
