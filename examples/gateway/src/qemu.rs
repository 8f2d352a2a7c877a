//! Starts the device firmware under QEMU with UART0 connected to the
//! gateway, and forwards what it prints (semihosting) with a prefix.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `qemu-system-arm` running `elf` on the lm3s6965evb, its UART0 a TCP
/// client of `127.0.0.1:port`. Killed when the handle is dropped, and
/// with the process that started it ([`crate::child`]).
pub fn spawn(elf: &Path, port: u16) -> std::io::Result<Child> {
    spawn_serial(elf, &format!("tcp:127.0.0.1:{port}"))
}

/// The same with UART0 on any QEMU character device: `serial` is the
/// `-serial` argument (`tcp:127.0.0.1:PORT,reconnect=1` for a broker that
/// may restart). Semihosting output is printed with the prefix `qemu| `.
pub fn spawn_serial(elf: &Path, serial: &str) -> std::io::Result<Child> {
    spawn_in(elf, serial, None)
}

/// [`spawn_serial`] with QEMU working in `dir`: the firmware's semihosting
/// file reads are relative to it.
pub fn spawn_in(elf: &Path, serial: &str, dir: Option<&Path>) -> std::io::Result<Child> {
    let mut command = Command::from(crate::child::command("qemu-system-arm"));
    // The firmware's path as given, from this process's directory.
    let elf = std::fs::canonicalize(elf)?;
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command
        .args(["-cpu", "cortex-m3", "-machine", "lm3s6965evb", "-nographic"])
        .args([
            "-monitor",
            "none",
            "-semihosting-config",
            "enable=on,target=native",
        ])
        .args(["-serial", serial])
        .arg("-kernel")
        .arg(&elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(out) = child.stdout.take() {
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                println!("qemu| {line}");
            }
        });
    }
    Ok(child)
}
