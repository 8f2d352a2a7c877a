//! Flash and static RAM of an ELF, read from its section headers, and
//! `data/baselines/firmware_size.json`.

use crate::Result;
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Section sizes of one ELF.
pub struct Sizes {
    /// `.vector_table + .text + .rodata + .data`: what the image puts in flash.
    pub flash: u64,
    /// `.data + .bss + .uninit`: static RAM.
    pub ram: u64,
    /// Berkeley `size` columns: read-only allocated sections, writable
    /// ones with contents, and zero-filled ones.
    text: u64,
    data: u64,
    bss: u64,
}

fn read(elf: &Path) -> Result<Vec<u8>> {
    std::fs::read(elf).map_err(|e| format!("{}: {e}", elf.display()))
}

fn parse<'a>(elf: &Path, bytes: &'a [u8]) -> Result<object::File<'a>> {
    object::File::parse(bytes).map_err(|e| format!("{}: {e}", elf.display()))
}

/// The sizes of `elf`.
pub fn sizes(elf: &Path) -> Result<Sizes> {
    let bytes = read(elf)?;
    let file = parse(elf, &bytes)?;
    let mut s = Sizes {
        flash: 0,
        ram: 0,
        text: 0,
        data: 0,
        bss: 0,
    };
    for section in file.sections() {
        let size = section.size();
        match section.name().unwrap_or_default() {
            ".vector_table" | ".text" | ".rodata" => s.flash += size,
            ".data" => {
                s.flash += size;
                s.ram += size;
            }
            ".bss" | ".uninit" => s.ram += size,
            _ => {}
        }
        let SectionFlags::Elf { sh_flags } = section.flags() else {
            continue;
        };
        if sh_flags & u64::from(object::elf::SHF_ALLOC) == 0 {
            continue;
        }
        if matches!(
            section.kind(),
            SectionKind::UninitializedData | SectionKind::UninitializedTls
        ) {
            s.bss += size;
        } else if sh_flags & u64::from(object::elf::SHF_WRITE) != 0 {
            s.data += size;
        } else {
            s.text += size;
        }
    }
    Ok(s)
}

/// Prints the sizes of `elf` the way `size` and the flash/RAM sums do, on
/// stdout or (`to_stderr`) stderr.
pub fn print(elf: &Path, to_stderr: bool) -> Result<()> {
    let s = sizes(elf)?;
    let dec = s.text + s.data + s.bss;
    let text = format!(
        "   text\t   data\t    bss\t    dec\t    hex\tfilename\n{:>7}\t{:>7}\t{:>7}\t{:>7}\t{:>7x}\t{}\n\
         flash (.vector_table+.text+.rodata+.data): {} bytes\n\
         static RAM (.data+.bss+.uninit): {} bytes",
        s.text,
        s.data,
        s.bss,
        dec,
        dec,
        elf.display(),
        s.flash,
        s.ram
    );
    if to_stderr {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
    Ok(())
}

/// The symbols of `elf` that only an allocator brings.
pub fn allocator_symbols(elf: &Path) -> Result<Vec<String>> {
    const ALLOC: [&str; 5] = [
        "__rust_alloc",
        "__rdl_alloc",
        "__rg_alloc",
        "__rust_alloc_error_handler",
        "__rust_no_alloc_shim",
    ];
    let bytes = read(elf)?;
    let file = parse(elf, &bytes)?;
    let mut found: Vec<String> = file
        .symbols()
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| ALLOC.iter().any(|a| n.contains(a)))
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// Flash and static RAM of one build.
#[derive(Serialize, Deserialize)]
pub struct FlashRam {
    pub flash_bytes: u64,
    pub static_ram_bytes: u64,
}

impl From<&Sizes> for FlashRam {
    fn from(s: &Sizes) -> Self {
        FlashRam {
            flash_bytes: s.flash,
            static_ram_bytes: s.ram,
        }
    }
}

/// A board firmware's line: built, not run.
#[derive(Serialize, Deserialize)]
pub struct Board {
    pub target: String,
    pub toolchain: String,
    pub flash_bytes: u64,
    pub static_ram_bytes: u64,
}

#[derive(Serialize, Deserialize)]
pub struct DeviceMqtt {
    pub flash_bytes: u64,
    pub static_ram_bytes: u64,
    pub mqtt_rx_bytes: u64,
    pub mqtt_tx_bytes: u64,
    pub target_static_ram_bytes: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Probe {
    pub routes_base: u64,
    pub base: FlashRam,
    pub double_out: FlashRam,
    pub double_in: FlashRam,
}

/// What `footprint` measures.
#[derive(Serialize, Deserialize)]
pub struct Footprint {
    pub bench: String,
    pub date: String,
    pub toolchain: String,
    pub target: String,
    pub device: FlashRam,
    pub device_mqtt: DeviceMqtt,
    /// `device-mqtt` over TLS 1.3 (embedded-tls, its buffers included).
    #[serde(default)]
    pub device_mqtt_tls: Option<FlashRam>,
    /// `device-mqtt` with its readings through a backlog on flash
    /// (sequential-storage; the flash driver is QEMU's host file).
    #[serde(default)]
    pub device_mqtt_backlog: Option<FlashRam>,
    pub footprint_probe: Probe,
    pub ram_per_outbound_route_bytes: f64,
    pub ram_per_inbound_route_bytes: f64,
    pub target_ram_per_outbound_route_bytes: u64,
}

/// `data/baselines/firmware_size.json`: `board-eth` writes the board's
/// entry, `footprint` the rest; each keeps what the other wrote.
#[derive(Serialize, Deserialize)]
pub struct SizesFile {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub board_stm32f767_eth: Option<Board>,
    /// The same board firmware with MQTT over TLS 1.3 (feature `tls`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub board_stm32f767_eth_tls: Option<Board>,
    #[serde(flatten)]
    pub footprint: Option<Footprint>,
}

impl SizesFile {
    /// The file as it is, or `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<SizesFile>> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        text.push('\n');
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of day `z` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_790), (2026, 12, 3));
    }

    #[test]
    fn sizes_file_round_trips_without_board() {
        let text = r#"{ "board_stm32f767_eth": { "target": "t", "toolchain": "r", "flash_bytes": 1, "static_ram_bytes": 2 } }"#;
        let f: SizesFile = serde_json::from_str(text).unwrap();
        assert!(f.footprint.is_none());
        assert_eq!(f.board_stm32f767_eth.unwrap().static_ram_bytes, 2);
    }
}
