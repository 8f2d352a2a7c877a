//! An in-memory duplex byte stream: two [`Pipe`]s, one per direction.
//!
//! For tests, examples and benches: a connector runs over it exactly as over
//! a UART or a socket (it implements `embedded-io-async` [`Read`] and
//! [`Write`]), with no sockets and no heap. `const fn new()`, so a pair can
//! be a `static`; the `RawMutex` parameter decides who may share it
//! (`CriticalSectionRawMutex` across interrupts and threads,
//! `NoopRawMutex` within one executor).
//!
//! A pipe can be closed ([`Pipe::close`], [`Pair::close`]): readers then
//! drain what is buffered and see end-of-stream, writers get
//! [`ErrorKind::BrokenPipe`]. [`Pipe::reopen`] empties it and opens it
//! again, which is how tests model a reconnect.
//!
//! ```
//! use aimdb_connectors::loopback::Pair;
//! use embassy_sync::blocking_mutex::raw::NoopRawMutex;
//! use embedded_io_async::{Read, Write};
//!
//! let pair = Pair::<NoopRawMutex, 64>::new();
//! let ((_, mut a_tx), (mut b_rx, _)) = (pair.a(), pair.b());
//! futures::executor::block_on(async {
//!     a_tx.write(b"hi").await.unwrap();
//!     let mut buf = [0u8; 8];
//!     assert_eq!(b_rx.read(&mut buf).await.unwrap(), 2);
//!     assert_eq!(&buf[..2], b"hi");
//! });
//! ```

use core::cell::RefCell;
use core::future::poll_fn;
use core::task::Poll;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use embassy_sync::waitqueue::WakerRegistration;
use embedded_io_async::{ErrorKind, ErrorType, Read, ReadReady, Write};

struct State<const N: usize> {
    buf: [u8; N],
    head: usize,
    len: usize,
    closed: bool,
    reader: WakerRegistration,
    writer: WakerRegistration,
}

/// One direction: a bounded byte queue of `N` bytes with one waiting
/// reader and one waiting writer.
pub struct Pipe<M: RawMutex, const N: usize> {
    state: Mutex<M, RefCell<State<N>>>,
}

impl<M: RawMutex, const N: usize> Default for Pipe<M, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: RawMutex, const N: usize> Pipe<M, N> {
    /// An empty, open pipe.
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(RefCell::new(State {
                buf: [0; N],
                head: 0,
                len: 0,
                closed: false,
                reader: WakerRegistration::new(),
                writer: WakerRegistration::new(),
            })),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State<N>) -> R) -> R {
        self.state.lock(|s| f(&mut s.borrow_mut()))
    }

    /// Bytes buffered now.
    pub fn len(&self) -> usize {
        self.with(|s| s.len)
    }

    /// Nothing buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the pipe: the reader drains, then sees end-of-stream; the
    /// writer gets `BrokenPipe`.
    pub fn close(&self) {
        self.with(|s| {
            s.closed = true;
            s.reader.wake();
            s.writer.wake();
        });
    }

    /// Drops buffered bytes and opens the pipe again.
    pub fn reopen(&self) {
        self.with(|s| {
            s.head = 0;
            s.len = 0;
            s.closed = false;
        });
    }

    /// The reading end.
    pub fn reader(&self) -> PipeReader<'_, M, N> {
        PipeReader { pipe: self }
    }

    /// The writing end.
    pub fn writer(&self) -> PipeWriter<'_, M, N> {
        PipeWriter { pipe: self }
    }

    async fn read(&self, out: &mut [u8]) -> usize {
        if out.is_empty() {
            return 0;
        }
        poll_fn(|cx| {
            self.with(|s| {
                if s.len == 0 {
                    if s.closed {
                        return Poll::Ready(0);
                    }
                    s.reader.register(cx.waker());
                    return Poll::Pending;
                }
                let n = out.len().min(s.len);
                for (i, o) in out[..n].iter_mut().enumerate() {
                    *o = s.buf[(s.head + i) % N];
                }
                s.head = (s.head + n) % N;
                s.len -= n;
                s.writer.wake();
                Poll::Ready(n)
            })
        })
        .await
    }

    async fn write(&self, data: &[u8]) -> Result<usize, ErrorKind> {
        if data.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| {
            self.with(|s| {
                if s.closed {
                    return Poll::Ready(Err(ErrorKind::BrokenPipe));
                }
                if s.len == N {
                    s.writer.register(cx.waker());
                    return Poll::Pending;
                }
                let n = data.len().min(N - s.len);
                let tail = s.head + s.len;
                for (i, &b) in data[..n].iter().enumerate() {
                    s.buf[(tail + i) % N] = b;
                }
                s.len += n;
                s.reader.wake();
                Poll::Ready(Ok(n))
            })
        })
        .await
    }
}

/// Reading end of a [`Pipe`].
pub struct PipeReader<'p, M: RawMutex, const N: usize> {
    pipe: &'p Pipe<M, N>,
}

/// Writing end of a [`Pipe`].
pub struct PipeWriter<'p, M: RawMutex, const N: usize> {
    pipe: &'p Pipe<M, N>,
}

impl<M: RawMutex, const N: usize> ErrorType for PipeReader<'_, M, N> {
    type Error = ErrorKind;
}

impl<M: RawMutex, const N: usize> ErrorType for PipeWriter<'_, M, N> {
    type Error = ErrorKind;
}

impl<M: RawMutex, const N: usize> Read for PipeReader<'_, M, N> {
    /// Waits for at least one byte; `Ok(0)` once the pipe is closed and
    /// drained.
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        Ok(self.pipe.read(buf).await)
    }
}

impl<M: RawMutex, const N: usize> ReadReady for PipeReader<'_, M, N> {
    /// A `read` would not wait: bytes are buffered, or the pipe is closed.
    fn read_ready(&mut self) -> Result<bool, ErrorKind> {
        Ok(self.pipe.with(|s| s.len > 0 || s.closed))
    }
}

impl<M: RawMutex, const N: usize> Write for PipeWriter<'_, M, N> {
    /// Waits for room for at least one byte; `BrokenPipe` once closed.
    async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        self.pipe.write(buf).await
    }

    async fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}

/// Two pipes crossed: end `a` writes what end `b` reads and back.
pub struct Pair<M: RawMutex, const N: usize> {
    a_to_b: Pipe<M, N>,
    b_to_a: Pipe<M, N>,
}

impl<M: RawMutex, const N: usize> Default for Pair<M, N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The halves of one end of a [`Pair`].
pub type End<'p, M, const N: usize> = (PipeReader<'p, M, N>, PipeWriter<'p, M, N>);

impl<M: RawMutex, const N: usize> Pair<M, N> {
    /// Two empty, open pipes.
    pub const fn new() -> Self {
        Self {
            a_to_b: Pipe::new(),
            b_to_a: Pipe::new(),
        }
    }

    /// End `a`: reads what `b` writes, writes what `b` reads.
    pub fn a(&self) -> End<'_, M, N> {
        (self.b_to_a.reader(), self.a_to_b.writer())
    }

    /// End `b`.
    pub fn b(&self) -> End<'_, M, N> {
        (self.a_to_b.reader(), self.b_to_a.writer())
    }

    /// The pipe from `a` to `b`.
    pub fn a_to_b(&self) -> &Pipe<M, N> {
        &self.a_to_b
    }

    /// The pipe from `b` to `a`.
    pub fn b_to_a(&self) -> &Pipe<M, N> {
        &self.b_to_a
    }

    /// Closes both directions (a dropped connection).
    pub fn close(&self) {
        self.a_to_b.close();
        self.b_to_a.close();
    }

    /// Empties and reopens both directions (a new connection).
    pub fn reopen(&self) {
        self.a_to_b.reopen();
        self.b_to_a.reopen();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    use futures::executor::block_on;

    #[test]
    fn bytes_cross_in_order_through_a_full_pipe() {
        let pair = Pair::<NoopRawMutex, 4>::new();
        let ((mut a_rx, mut a_tx), (mut b_rx, mut b_tx)) = (pair.a(), pair.b());
        block_on(async {
            let data: [u8; 10] = core::array::from_fn(|i| i as u8 + 1);
            let send = async {
                let mut rest = &data[..];
                while !rest.is_empty() {
                    let n = a_tx.write(rest).await.unwrap();
                    assert!(n > 0 && n <= 4);
                    rest = &rest[n..];
                }
            };
            let recv = async {
                let mut got = [0u8; 10];
                let mut at = 0;
                while at < 10 {
                    at += b_rx.read(&mut got[at..]).await.unwrap();
                }
                got
            };
            let ((), got) = embassy_futures::join::join(send, recv).await;
            assert_eq!(got, data);
            b_tx.write(b"x").await.unwrap();
            let mut one = [0u8; 1];
            assert_eq!(a_rx.read(&mut one).await.unwrap(), 1);
            assert_eq!(&one, b"x");
        });
    }

    #[test]
    fn close_drains_then_ends_and_breaks_writes() {
        let pair = Pair::<NoopRawMutex, 8>::new();
        let ((_, mut a_tx), (mut b_rx, _)) = (pair.a(), pair.b());
        block_on(async {
            a_tx.write(b"ab").await.unwrap();
            pair.close();
            let mut buf = [0u8; 8];
            assert_eq!(b_rx.read(&mut buf).await.unwrap(), 2);
            assert_eq!(b_rx.read(&mut buf).await.unwrap(), 0);
            assert_eq!(a_tx.write(b"c").await, Err(ErrorKind::BrokenPipe));
            pair.reopen();
            assert_eq!(a_tx.write(b"c").await, Ok(1));
            assert_eq!(b_rx.read(&mut buf).await.unwrap(), 1);
            assert_eq!(buf[0], b'c');
        });
    }

    #[test]
    fn read_ready_says_whether_a_read_would_wait() {
        let pair = Pair::<NoopRawMutex, 8>::new();
        let ((_, mut a_tx), (mut b_rx, _)) = (pair.a(), pair.b());
        assert_eq!(b_rx.read_ready(), Ok(false));
        block_on(async {
            a_tx.write(b"a").await.unwrap();
            assert_eq!(b_rx.read_ready(), Ok(true));
            let mut buf = [0u8; 4];
            assert_eq!(b_rx.read(&mut buf).await.unwrap(), 1);
        });
        assert_eq!(b_rx.read_ready(), Ok(false));
        pair.close();
        assert_eq!(b_rx.read_ready(), Ok(true), "a closed pipe reads 0 at once");
    }

    #[test]
    fn close_wakes_a_parked_reader() {
        let pair = Pair::<NoopRawMutex, 8>::new();
        let (mut b_rx, _) = pair.b();
        block_on(async {
            let read = async {
                let mut buf = [0u8; 4];
                b_rx.read(&mut buf).await.unwrap()
            };
            let close = async {
                // Let the reader park first.
                embassy_futures::yield_now().await;
                pair.close();
            };
            let (n, ()) = embassy_futures::join::join(read, close).await;
            assert_eq!(n, 0);
        });
    }
}
