//! The framed-stream connector over real sockets: TCP on loopback and a
//! Unix-domain socket, each end on its own thread with its own tokio
//! runtime (as two processes would be).
#![cfg(feature = "tokio")]

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use aimdb_connectors::framed::Counters;
use aimdb_connectors::tokio_io;
use common::{expect_all, produce, side, Side};
use embassy_futures::join::join;

const ROUTES: usize = 64;
const ROUNDS: u32 = 48;
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `f` on a new thread with its own current-thread runtime
/// (`tokio_io::run_on_thread`), bounded by [`LIMIT`].
fn on_own_runtime<F, Fut>(f: F) -> std::thread::JoinHandle<Fut::Output>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future,
    Fut::Output: Send + 'static,
{
    tokio_io::run_on_thread("end", move || async move {
        tokio::time::timeout(LIMIT, f()).await.expect("timed out")
    })
    .expect("runtime thread")
}

/// One end: produce on every outbound route, check every inbound route,
/// then wait for the other end before hanging up.
async fn end<R, W>(me: Side, rx: R, tx: W, both: Arc<tokio::sync::Barrier>) -> u32
where
    R: embedded_io_async::Read,
    W: embedded_io_async::Write,
{
    let mut readers = me.in_readers();
    let stats = Counters::new();
    let work = async {
        join(produce(&me.out, ROUNDS), expect_all(&mut readers, ROUNDS)).await;
        both.wait().await;
    };
    me.run(rx, tx, &stats, work).await.expect("transport");
    let s = stats.snapshot();
    assert_eq!(s.errors_in(), 0, "{s:?}");
    s.received
}

#[test]
fn tcp_between_two_runtimes_both_ways() {
    let both = Arc::new(tokio::sync::Barrier::new(2));
    let (port_tx, port_rx) = mpsc::channel();
    let (a, b) = (
        side("dev/out", "dev/in", ROUTES),
        side("dev/in", "dev/out", ROUTES),
    );
    let both_a = both.clone();
    let server = on_own_runtime(move || async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        port_tx.send(listener.local_addr().unwrap().port()).unwrap();
        let (stream, _) = listener.accept().await.expect("accept");
        let (rx, tx) = tokio_io::tcp(stream);
        end(a, rx, tx, both_a).await
    });
    let port = port_rx.recv_timeout(LIMIT).expect("server port");
    let client = on_own_runtime(move || async move {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let (rx, tx) = tokio_io::tcp(stream);
        end(b, rx, tx, both).await
    });
    let total = ROUTES as u32 * ROUNDS;
    assert_eq!(server.join().expect("server thread"), total);
    assert_eq!(client.join().expect("client thread"), total);
}

#[test]
fn unix_socket_between_two_runtimes_both_ways() {
    let dir = std::env::temp_dir().join(format!("aimdb-uds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("framed.sock");
    let _ = std::fs::remove_file(&path);
    let listener_path = path.clone();
    let both = Arc::new(tokio::sync::Barrier::new(2));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (a, b) = (side("u/a", "u/b", ROUTES), side("u/b", "u/a", ROUTES));
    let both_a = both.clone();
    let server = on_own_runtime(move || async move {
        let listener = tokio::net::UnixListener::bind(&listener_path).expect("bind");
        ready_tx.send(()).unwrap();
        let (stream, _) = listener.accept().await.expect("accept");
        let (rx, tx) = tokio_io::unix(stream);
        end(a, rx, tx, both_a).await
    });
    ready_rx.recv_timeout(LIMIT).expect("server ready");
    let client_path = path.clone();
    let client = on_own_runtime(move || async move {
        let stream = tokio::net::UnixStream::connect(&client_path)
            .await
            .expect("connect");
        let (rx, tx) = tokio_io::unix(stream);
        end(b, rx, tx, both).await
    });
    let total = ROUTES as u32 * ROUNDS;
    assert_eq!(server.join().expect("server thread"), total);
    assert_eq!(client.join().expect("client thread"), total);
    let _ = std::fs::remove_dir_all(&dir);
}
