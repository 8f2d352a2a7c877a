//! The TLS session over a connection: staging buffers between the socket
//! and embedded-tls, so that the runner may drop any pending read or write.
//!
//! embedded-tls reads a record as a header then a body, each with a loop
//! of reads, and writes a record with `write_all`: a future dropped in the
//! middle loses or repeats bytes. Here embedded-tls only ever talks to
//! [`Staged`], which hands it a record only once the record has arrived
//! whole and takes an encrypted record whole into the send staging
//! buffer. So each embedded-tls call either completes in one poll or
//! returns `Pending` having consumed nothing, and the socket is read and
//! written by the halves with the socket's own cancel-safe calls.

use core::cell::RefCell;
use core::fmt;
use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::{ready, Context, Poll};

use embedded_io_async::{Error as _, ErrorKind, ErrorType, Read, Write};
use embedded_tls::{TlsConnection, TlsError};

use super::{ConnectError, Counters, Suite};
use crate::connect::Connection;

/// A TLS record header: type, version, length.
const HEADER: usize = 5;

/// The two staging buffers.
pub(crate) struct Wire<'d> {
    rx: &'d mut [u8],
    /// Received bytes not yet given to embedded-tls: `rx[rx_start..rx_end]`.
    rx_start: usize,
    rx_end: usize,
    /// Bytes of the record being handed over that embedded-tls has not
    /// taken yet (the record is all in `rx`).
    rx_record: usize,
    tx: &'d mut [u8],
    /// Encrypted bytes not yet written: `tx[tx_start..tx_end]`.
    tx_start: usize,
    tx_end: usize,
}

impl<'d> Wire<'d> {
    pub(crate) fn new(rx: &'d mut [u8], tx: &'d mut [u8]) -> Self {
        Self {
            rx,
            rx_start: 0,
            rx_end: 0,
            rx_record: 0,
            tx,
            tx_start: 0,
            tx_end: 0,
        }
    }

    /// Empty, for a new connection.
    pub(crate) fn clear(&mut self) {
        (self.rx_start, self.rx_end, self.rx_record) = (0, 0, 0);
        (self.tx_start, self.tx_end) = (0, 0);
    }

    /// Bytes embedded-tls may read now: the rest of the record under way,
    /// or the next record if it is all here.
    fn readable(&mut self) -> usize {
        if self.rx_record == 0 {
            let have = &self.rx[self.rx_start..self.rx_end];
            if have.len() >= HEADER {
                let len = HEADER + usize::from(u16::from_be_bytes([have[3], have[4]]));
                if have.len() >= len {
                    self.rx_record = len;
                }
            }
        }
        self.rx_record
    }

    /// Room to receive into, moving what is unread to the front first.
    fn rx_room(&mut self) -> &mut [u8] {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        &mut self.rx[self.rx_end..]
    }

    fn tx_pending(&self) -> &[u8] {
        &self.tx[self.tx_start..self.tx_end]
    }

    fn tx_taken(&mut self, n: usize) {
        self.tx_start += n;
        if self.tx_start == self.tx_end {
            (self.tx_start, self.tx_end) = (0, 0);
        }
    }
}

/// What embedded-tls reads from and writes to: the staging buffers.
pub(crate) struct Staged<'c, 'd> {
    wire: &'c RefCell<Wire<'d>>,
}

impl<'c, 'd> Staged<'c, 'd> {
    pub(crate) fn new(wire: &'c RefCell<Wire<'d>>) -> Self {
        Self { wire }
    }
}

/// A staging buffer was in use by the other side: cannot happen, as both
/// borrow only inside one synchronous poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TLS staging buffer busy")
    }
}
impl core::error::Error for Busy {}

impl embedded_io_async::Error for Busy {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Other
    }
}

impl ErrorType for Staged<'_, '_> {
    type Error = Busy;
}

impl Read for Staged<'_, '_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Busy> {
        poll_fn(|_| {
            let Ok(mut w) = self.wire.try_borrow_mut() else {
                return Poll::Ready(Err(Busy));
            };
            let n = w.readable().min(buf.len());
            if n == 0 {
                // Nothing taken: the caller's future may be dropped.
                return Poll::Pending;
            }
            buf[..n].copy_from_slice(&w.rx[w.rx_start..w.rx_start + n]);
            w.rx_start += n;
            w.rx_record -= n;
            Poll::Ready(Ok(n))
        })
        .await
    }
}

impl Write for Staged<'_, '_> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Busy> {
        poll_fn(|_| {
            let Ok(mut w) = self.wire.try_borrow_mut() else {
                return Poll::Ready(Err(Busy));
            };
            let end = w.tx_end;
            let n = (w.tx.len() - end).min(buf.len());
            if n == 0 && !buf.is_empty() {
                // Only in the handshake, whose future is kept: the pump
                // empties the buffer and polls again.
                return Poll::Pending;
            }
            w.tx[end..end + n].copy_from_slice(&buf[..n]);
            w.tx_end += n;
            Poll::Ready(Ok(n))
        })
        .await
    }

    async fn flush(&mut self) -> Result<(), Busy> {
        // The halves flush the socket once the staged bytes are out.
        Ok(())
    }
}

/// Writes staged bytes until none is left (`Ready(Ok(moved))`) or the
/// socket takes no more now (`Pending`, its waker registered).
fn drain<W: Write>(
    wire: &RefCell<Wire<'_>>,
    tx: &mut W,
    cx: &mut Context<'_>,
) -> Poll<Result<bool, Error>> {
    let mut moved = false;
    loop {
        let Ok(mut w) = wire.try_borrow_mut() else {
            return Poll::Ready(Err(Error::Busy));
        };
        if w.tx_pending().is_empty() {
            return Poll::Ready(Ok(moved));
        }
        let polled = pin!(tx.write(w.tx_pending())).poll(cx);
        match polled {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(Error::Io(ErrorKind::WriteZero))),
            Poll::Ready(Ok(n)) => {
                w.tx_taken(n);
                moved = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Io(e.kind()))),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Reads from the socket into the receive staging buffer once:
/// `Ready(Ok(0))` at the end of the stream.
fn fill<R: Read>(
    wire: &RefCell<Wire<'_>>,
    rx: &mut R,
    cx: &mut Context<'_>,
) -> Poll<Result<usize, Error>> {
    let Ok(mut w) = wire.try_borrow_mut() else {
        return Poll::Ready(Err(Error::Busy));
    };
    let room = w.rx_room();
    if room.is_empty() {
        // A record larger than the staging buffer (and no record whole).
        return Poll::Ready(Err(Error::RecordTooLarge));
    }
    let polled = pin!(rx.read(room)).poll(cx);
    match polled {
        Poll::Ready(Ok(n)) => {
            w.rx_end += n;
            Poll::Ready(Ok(n))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(Error::Io(e.kind()))),
        Poll::Pending => Poll::Pending,
    }
}

/// Drives embedded-tls's `open` over the socket halves until it completes
/// and its last flight is written.
pub(crate) async fn handshake<F, R, W, E>(
    mut open: Pin<&mut F>,
    wire: &RefCell<Wire<'_>>,
    rx: &mut R,
    tx: &mut W,
) -> Result<(), ConnectError<E>>
where
    F: Future<Output = Result<(), TlsError>>,
    R: Read,
    W: Write,
{
    let io = |e: Error| match e {
        Error::Io(k) => ConnectError::Io(k),
        Error::Tls(e) => ConnectError::Handshake(e),
        Error::RecordTooLarge => ConnectError::Handshake(TlsError::InsufficientSpace),
        Error::Busy => ConnectError::Handshake(TlsError::InternalError),
    };
    let mut done = false;
    poll_fn(|cx| loop {
        let drained = drain(wire, tx, cx);
        let mut progress = match drained {
            Poll::Ready(Ok(moved)) => moved,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(io(e))),
            Poll::Pending => false,
        };
        if !done {
            match open.as_mut().poll(cx) {
                Poll::Ready(Ok(())) => {
                    done = true;
                    progress = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(ConnectError::Handshake(e))),
                Poll::Pending => {}
            }
        }
        let waiting = wire.try_borrow().is_ok_and(|w| !w.tx_pending().is_empty());
        if waiting && drained.is_ready() {
            // What `open` just staged goes before anything is awaited.
            continue;
        }
        if done {
            if waiting {
                return Poll::Pending;
            }
            return match pin!(tx.flush()).poll(cx) {
                Poll::Ready(r) => Poll::Ready(r.map_err(|e| ConnectError::Io(e.kind()))),
                Poll::Pending => Poll::Pending,
            };
        }
        match fill(wire, rx, cx) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(ConnectError::Closed)),
            Poll::Ready(Ok(_)) => progress = true,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(io(e))),
            Poll::Pending => {}
        }
        if !progress {
            return Poll::Pending;
        }
    })
    .await
}

/// An open TLS session over an inner connection; the runner splits it.
pub struct Session<'c, 'd, I> {
    inner: I,
    tls: RefCell<TlsConnection<'c, Staged<'c, 'd>, Suite>>,
    wire: &'c RefCell<Wire<'d>>,
    counters: Option<&'d Counters>,
}

impl<'c, 'd, I> Session<'c, 'd, I> {
    pub(crate) fn new(
        inner: I,
        tls: TlsConnection<'c, Staged<'c, 'd>, Suite>,
        wire: &'c RefCell<Wire<'d>>,
        counters: Option<&'d Counters>,
    ) -> Self {
        Self {
            inner,
            tls: RefCell::new(tls),
            wire,
            counters,
        }
    }
}

/// `e`, counted in [`Counters::session_errors`] when it is the session's
/// fault (not the transport's, not the broker's orderly close).
fn counted(counters: Option<&Counters>, e: Error) -> Error {
    let session = match e {
        Error::Tls(TlsError::ConnectionClosed) | Error::Io(_) | Error::Busy => false,
        Error::Tls(_) | Error::RecordTooLarge => true,
    };
    if let (true, Some(c)) = (session, counters) {
        aimdb_core::counters::bump(&c.session_errors, 1);
    }
    e
}

impl<I> fmt::Debug for Session<'_, '_, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl<'c, 'd, I: Connection> Connection for Session<'c, 'd, I> {
    type Rx<'h>
        = Rx<'h, 'c, 'd, I::Rx<'h>>
    where
        Self: 'h;
    type Tx<'h>
        = Tx<'h, 'c, 'd, I::Tx<'h>>
    where
        Self: 'h;

    fn split(&mut self) -> (Self::Rx<'_>, Self::Tx<'_>) {
        let (rx, tx) = self.inner.split();
        let s = Shared {
            tls: &self.tls,
            wire: self.wire,
            counters: self.counters,
        };
        (Rx { s, rx }, Tx { s, tx })
    }
}

/// Why a read or write of a TLS session failed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Error {
    /// embedded-tls's error: a bad record, an alert from the broker
    /// (`ConnectionClosed` for its close_notify), …
    Tls(TlsError),
    /// The transport under TLS failed.
    Io(ErrorKind),
    /// The broker sent a record larger than the receiving buffers hold.
    RecordTooLarge,
    /// A half was used while the other had the session (cannot happen
    /// through the runner, which polls one at a time).
    Busy,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tls(e) => write!(f, "TLS: {e:?}"),
            Self::Io(k) => write!(f, "transport under TLS: {k:?}"),
            Self::RecordTooLarge => f.write_str("TLS record larger than the receive buffer"),
            Self::Busy => f.write_str("TLS session busy"),
        }
    }
}
impl core::error::Error for Error {}

impl embedded_io_async::Error for Error {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Io(k) => *k,
            Self::Tls(TlsError::ConnectionClosed) => ErrorKind::ConnectionAborted,
            Self::Tls(_) => ErrorKind::InvalidData,
            Self::RecordTooLarge => ErrorKind::OutOfMemory,
            Self::Busy => ErrorKind::Other,
        }
    }
}

/// Polls an embedded-tls call once, with the session borrowed for that
/// poll only.
macro_rules! once {
    ($tls:expr, $cx:expr, |$t:ident| $call:expr) => {
        match $tls.try_borrow_mut() {
            Err(_) => Poll::Ready(Err(Error::Busy)),
            Ok(mut guard) => {
                let $t = &mut *guard;
                match pin!($call).poll($cx) {
                    Poll::Ready(r) => Poll::Ready(r.map_err(Error::Tls)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    };
}

/// What both halves of a [`Session`] share.
#[derive(Clone, Copy)]
struct Shared<'h, 'c, 'd> {
    tls: &'h RefCell<TlsConnection<'c, Staged<'c, 'd>, Suite>>,
    wire: &'c RefCell<Wire<'d>>,
    counters: Option<&'d Counters>,
}

/// The receiving half of a [`Session`].
pub struct Rx<'h, 'c, 'd, R> {
    s: Shared<'h, 'c, 'd>,
    rx: R,
}

impl<R> ErrorType for Rx<'_, '_, '_, R> {
    type Error = Error;
}

impl<R: Read> Read for Rx<'_, '_, '_, R> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let s = self.s;
        poll_fn(|cx| loop {
            // Decrypted bytes, or a whole record to decrypt: done now.
            // Otherwise embedded-tls took nothing and waits for more.
            if let Poll::Ready(r) = once!(s.tls, cx, |t| t.read(&mut *buf)) {
                return Poll::Ready(r.map_err(|e| counted(s.counters, e)));
            }
            let n = ready!(fill(s.wire, &mut self.rx, cx)).map_err(|e| counted(s.counters, e))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
        })
        .await
    }
}

/// The sending half of a [`Session`].
pub struct Tx<'h, 'c, 'd, W> {
    s: Shared<'h, 'c, 'd>,
    tx: W,
}

impl<W> ErrorType for Tx<'_, '_, '_, W> {
    type Error = Error;
}

/// An embedded-tls call fits the empty staging buffer (it holds a whole
/// record), so it never waits.
fn fits<T>(p: Poll<Result<T, Error>>) -> Result<T, Error> {
    match p {
        Poll::Ready(r) => r,
        Poll::Pending => Err(Error::RecordTooLarge),
    }
}

impl<W: Write> Write for Tx<'_, '_, '_, W> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Error> {
        let s = self.s;
        poll_fn(|cx| {
            // Staged bytes out first.
            ready!(drain(s.wire, &mut self.tx, cx))?;
            let n = fits(once!(s.tls, cx, |t| t.write(buf))).map_err(|e| counted(s.counters, e))?;
            // A record embedded-tls closed on the way (its buffer was
            // full) goes now if the socket takes it; the rest later.
            if let Poll::Ready(Err(e)) = drain(s.wire, &mut self.tx, cx) {
                return Poll::Ready(Err(e));
            }
            Poll::Ready(Ok(n))
        })
        .await
    }

    async fn flush(&mut self) -> Result<(), Error> {
        let s = self.s;
        poll_fn(|cx| {
            ready!(drain(s.wire, &mut self.tx, cx))?;
            // What embedded-tls holds becomes a record in the staging
            // buffer, then goes.
            fits(once!(s.tls, cx, |t| t.flush())).map_err(|e| counted(s.counters, e))?;
            ready!(drain(s.wire, &mut self.tx, cx))?;
            let flushed = ready!(pin!(self.tx.flush()).poll(cx));
            Poll::Ready(flushed.map_err(|e| Error::Io(e.kind())))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use futures::executor::block_on;
    use futures::FutureExt;
    use std::vec;
    use std::vec::Vec;

    /// A record header for `len` bytes of body.
    fn header(len: u16) -> [u8; HEADER] {
        let [hi, lo] = len.to_be_bytes();
        [0x17, 3, 3, hi, lo]
    }

    fn arrive(wire: &RefCell<Wire<'_>>, bytes: &[u8]) {
        let mut w = wire.borrow_mut();
        let room = w.rx_room();
        room[..bytes.len()].copy_from_slice(bytes);
        w.rx_end += bytes.len();
    }

    /// One read by embedded-tls's side, polled once: `None` if it waits.
    fn read_once(staged: &mut Staged<'_, '_>, n: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let got = staged.read(&mut buf).now_or_never()?.unwrap();
        Some(buf[..got].to_vec())
    }

    #[test]
    fn a_record_is_handed_over_only_once_it_is_all_here() {
        let (mut rx, mut tx) = ([0u8; 64], [0u8; 16]);
        let wire = RefCell::new(Wire::new(&mut rx, &mut tx));
        let mut staged = Staged::new(&wire);
        // Half a header, then the header and half the body: nothing yet,
        // and nothing taken (a dropped read loses no byte).
        arrive(&wire, &header(4)[..3]);
        assert_eq!(read_once(&mut staged, 5), None);
        arrive(&wire, &header(4)[3..]);
        arrive(&wire, &[1, 2]);
        assert_eq!(read_once(&mut staged, 5), None);
        // The rest of the body, and half of the next record's header.
        arrive(&wire, &[3, 4]);
        arrive(&wire, &header(2)[..2]);
        assert_eq!(read_once(&mut staged, 5).unwrap(), header(4));
        assert_eq!(read_once(&mut staged, 8).unwrap(), [1, 2, 3, 4]);
        // The next record is not whole: its two bytes stay.
        assert_eq!(read_once(&mut staged, 5), None);
        assert_eq!(wire.borrow().rx_end - wire.borrow().rx_start, 2);
        arrive(&wire, &header(2)[2..]);
        arrive(&wire, &[9, 9]);
        assert_eq!(
            read_once(&mut staged, 7).unwrap(),
            [&header(2)[..], &[9, 9]].concat()
        );
    }

    #[test]
    fn a_write_waits_only_when_the_staging_buffer_is_full() {
        let (mut rx, mut tx) = ([0u8; 8], [0u8; 6]);
        let wire = RefCell::new(Wire::new(&mut rx, &mut tx));
        let mut staged = Staged::new(&wire);
        assert_eq!(block_on(staged.write(&[1, 2, 3, 4])), Ok(4));
        assert_eq!(staged.write(&[5, 6, 7]).now_or_never(), Some(Ok(2)));
        assert_eq!(staged.write(&[7]).now_or_never(), None);
        assert_eq!(wire.borrow().tx_pending(), [1, 2, 3, 4, 5, 6]);
        wire.borrow_mut().tx_taken(6);
        assert_eq!(staged.write(&[7]).now_or_never(), Some(Ok(1)));
    }
}
