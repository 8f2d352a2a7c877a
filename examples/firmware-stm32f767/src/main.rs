//! The demo device on a board with Ethernet: a NUCLEO-F767ZI (STM32F767ZI,
//! LAN8742A PHY on RMII), the same application as the other firmware
//! (`device-app`: readings, status, commands) with its MQTT connector
//! straight to a broker over embassy-net, through
//! `aimdb_connectors::embassy_net::TcpConnect`. No gateway, no UART.
//!
//! The board takes its address by DHCP; the broker's address is fixed at
//! build time (`AIMDB_BROKER=address:port`, default 10.42.0.1:1883, checked
//! by build.rs). Plug the board's RJ45 into the broker's network and run
//! `AIMDB_BROKER=... cargo run --release` (probe-rs through the on-board
//! ST-LINK). The README's "Running on hardware" has the rest.
//!
//! With feature `tls` the connection is MQTT over TLS 1.3
//! (`aimdb_connectors::tls::TlsConnect`): the broker's certificate must be
//! signed by the CA built in from `AIMDB_BROKER_CA` (DER) and be valid for
//! `AIMDB_BROKER_NAME`; the key exchange draws on the chip's RNG. The
//! board has no wall clock here, so validity periods are not checked
//! (`tls::WallClock` stays unset until the firmware sets it, e.g. from
//! SNTP).
#![no_std]
#![no_main]

use core::net::SocketAddrV4;

use aimdb_connectors::embassy_net::TcpConnect;
use embassy_executor::Spawner;
use embassy_net::{Runner, StackResources};
use embassy_stm32::eth::{Ethernet, GenericPhy, PacketQueue, Sma};
use embassy_stm32::peripherals::{ETH, ETH_SMA, RNG};
use embassy_stm32::rng::{self, Rng};
use embassy_stm32::time::Hertz;
use embassy_stm32::{bind_interrupts, eth, Config};
use embassy_time::{Duration, Timer};
use panic_halt as _;
use static_cell::StaticCell;

bind_interrupts!(struct Irqs {
    ETH => eth::InterruptHandler;
    RNG => rng::InterruptHandler<RNG>;
});

type Device = Ethernet<'static, ETH, GenericPhy<Sma<'static, ETH_SMA>>>;

/// DMA descriptors and frame buffers (about 1.5 KiB each): four frames
/// each way are plenty for one MQTT connection.
static PACKETS: StaticCell<PacketQueue<4, 4>> = StaticCell::new();
/// Two sockets: DHCP and the broker connection.
static RESOURCES: StaticCell<StackResources<2>> = StaticCell::new();

#[embassy_executor::task]
async fn net_task(mut runner: Runner<'static, Device>) -> ! {
    runner.run().await
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let p = embassy_stm32::init(clocks());
    // The stack's seed (TCP initial sequence numbers, local ports) from
    // the hardware RNG; the MAC address from the chip's unique id,
    // locally administered, so two boards on one network differ.
    let mut seed = [0u8; 8];
    let mut rng = Rng::new(p.RNG, Irqs);
    rng.fill_bytes(&mut seed);
    let uid = embassy_stm32::uid::uid();
    let mac = [0x02, uid[0], uid[2], uid[4], uid[6], uid[8]];

    let device = Ethernet::new(
        PACKETS.init(PacketQueue::new()),
        p.ETH,
        Irqs,
        p.PA1,  // REF_CLK
        p.PA7,  // CRS_DV
        p.PC4,  // RXD0
        p.PC5,  // RXD1
        p.PG13, // TXD0
        p.PB13, // TXD1
        p.PG11, // TX_EN
        mac,
        p.ETH_SMA,
        p.PA2, // MDIO
        p.PC1, // MDC
    );
    let config = embassy_net::Config::dhcpv4(Default::default());
    let (stack, runner) = embassy_net::new(
        device,
        config,
        RESOURCES.init(StackResources::new()),
        u64::from_le_bytes(seed),
    );
    if let Ok(t) = net_task(runner) {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::control_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::sensor_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::link_stats_task() {
        spawner.spawn(t);
    }

    // Until DHCP has given an address, every attempt would fail (and be
    // counted) as unreachable.
    stack.wait_config_up().await;
    let Ok(broker) = env!("AIMDB_BROKER").parse::<SocketAddrV4>() else {
        unreachable!("build.rs checked AIMDB_BROKER")
    };
    // The TCP socket's buffers and the MQTT session's, in this task's
    // state (static RAM).
    let (mut sock_rx, mut sock_tx) = ([0u8; 1024], [0u8; 1024]);
    let (mut rx, mut tx) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    // MQTT pings every 2 s (device_app::KEEP_ALIVE_SECS): a broker silent
    // for 5 s is gone even if the MQTT side has not noticed yet.
    let connect =
        TcpConnect::new(stack, broker, &mut sock_rx, &mut sock_tx).timeout(Duration::from_secs(5));
    #[cfg(not(feature = "tls"))]
    let _ = (
        device_app::mqtt_connector(connect, &mut rx, &mut tx).await,
        rng,
    );
    #[cfg(feature = "tls")]
    {
        use aimdb_connectors::tls::{MaxFragmentLength, TlsConnect};
        const CA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/broker-ca.der"));
        // Records of up to 4 KiB from the broker, 1 KiB to it.
        let (mut tls_rx, mut tls_tx) = ([0u8; 2 * (4096 + 256 + 5)], [0u8; 2 * 1280]);
        let tls = TlsConnect::new(
            connect,
            env!("AIMDB_BROKER_NAME"),
            CA,
            rng,
            &mut tls_rx,
            &mut tls_tx,
        )
        .max_fragment_length(MaxFragmentLength::Bits12);
        let _ = device_app::mqtt_connector(tls, &mut rx, &mut tx).await;
    }
    // The connector gave up (device-app built with `no-reconnect`): idle.
    loop {
        Timer::after_secs(60).await;
    }
}

/// 216 MHz from the 8 MHz the ST-LINK feeds the HSE pin (bypass): PLL
/// 8 / 4 * 216 / 2; APB1 54 MHz and APB2 108 MHz, their maxima. Ethernet
/// needs HCLK of 25 MHz or more.
fn clocks() -> Config {
    use embassy_stm32::rcc::{
        AHBPrescaler, APBPrescaler, Hse, HseMode, Pll, PllMul, PllPDiv, PllPreDiv, PllSource,
        Sysclk,
    };
    let mut config = Config::default();
    config.rcc.hse = Some(Hse {
        freq: Hertz(8_000_000),
        mode: HseMode::Bypass,
    });
    config.rcc.pll_src = PllSource::HSE;
    config.rcc.pll = Some(Pll {
        prediv: PllPreDiv::DIV4,
        mul: PllMul::MUL216,
        divp: Some(PllPDiv::DIV2),
        divq: None,
        divr: None,
    });
    config.rcc.ahb_pre = AHBPrescaler::DIV1;
    config.rcc.apb1_pre = APBPrescaler::DIV4;
    config.rcc.apb2_pre = APBPrescaler::DIV2;
    config.rcc.sys = Sysclk::PLL1_P;
    config
}
