//! The schema check: a host compares its types with a device's
//! descriptions when the link comes up. See the [module docs](super).

use core::fmt;

use portable_atomic::{AtomicU8, Ordering};

use super::{schema_hash, Schema};
use crate::connector::DispatchError;
use crate::inbound::{KeyedLink, Link, Route};

/// Where a [`Checked`] link's schema check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Verdict {
    /// Not checked yet: the link is down, or the device's description has
    /// not arrived. Payloads are refused with
    /// [`DispatchError::SchemaUnverified`].
    Unverified,
    /// The device describes the record with the host's schema: payloads
    /// are decoded.
    Match,
    /// The device describes the record with another schema. Payloads are
    /// refused with [`DispatchError::SchemaMismatch`].
    Mismatch,
    /// The device does not describe the record at all, so its schema
    /// cannot be confirmed. Payloads are refused with
    /// [`DispatchError::SchemaMismatch`].
    Unlisted,
}

impl Verdict {
    const fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Match,
            2 => Self::Mismatch,
            3 => Self::Unlisted,
            _ => Self::Unverified,
        }
    }

    const fn to_u8(self) -> u8 {
        match self {
            Self::Unverified => 0,
            Self::Match => 1,
            Self::Mismatch => 2,
            Self::Unlisted => 3,
        }
    }
}

/// An inbound link whose decoded value type is known: what
/// [`Checked::new`] takes the schema from.
pub trait Typed {
    /// The type payloads are decoded as.
    type Value: ?Sized;
}

impl<S: ?Sized, D, T> Typed for Link<'_, S, D, T> {
    type Value = T;
}

impl<K: ?Sized, D, T> Typed for KeyedLink<'_, K, D, T> {
    type Value = T;
}

/// A schema-checked link, type-erased: what a [`Verifier`](super::Verifier)
/// sets. Implemented by [`Checked`].
pub trait Check {
    /// The device's record name the link expects.
    fn record(&self) -> &str;
    /// The schema hash the host's type has.
    fn expected(&self) -> [u8; 8];
    /// The check's state.
    fn verdict(&self) -> Verdict;
    /// Sets the check's state.
    fn set_verdict(&self, verdict: Verdict);
    /// Compares `hash` (the device's description) with [`Self::expected`]
    /// and records the result.
    fn compare(&self, hash: [u8; 8]) -> Verdict {
        let v = if hash == self.expected() {
            Verdict::Match
        } else {
            Verdict::Mismatch
        };
        self.set_verdict(v);
        v
    }
}

/// An inbound link that decodes nothing until the device's description of
/// its record has the host type's schema hash.
///
/// It wraps the link `L` (a [`Link`] into a record of type `T`, say) with
/// the device's record name and `T`'s [`schema_hash`]. In state
/// [`Verdict::Match`] each payload goes to `L`; otherwise it is refused
/// unread, with [`DispatchError::SchemaUnverified`] before the check has
/// answered and [`DispatchError::SchemaMismatch`] after it found another
/// schema (or none), and the dispatch counts it. A [`Verifier`](super::Verifier)
/// sets the state. No allocation, `no_std`.
///
/// A payload refused while unverified is gone: state that arrives right
/// at link-up (a framed peer's `Latest` replay, an MQTT broker's
/// retained message) reaches the record with the device's next write of
/// it, not before.
pub struct Checked<L> {
    inner: L,
    record: &'static str,
    hash: [u8; 8],
    state: AtomicU8,
}

impl<L> Checked<L> {
    /// Checks `inner` against the device's record `record`, with the
    /// schema of the type `inner` decodes.
    pub const fn new(record: &'static str, inner: L) -> Self
    where
        L: Typed,
        L::Value: Schema,
    {
        Self::with_hash(record, schema_hash::<L::Value>(), inner)
    }

    /// Checks `inner` against the device's record `record` with an
    /// explicit schema hash (for a route that is not a [`Link`]).
    pub const fn with_hash(record: &'static str, hash: [u8; 8], inner: L) -> Self {
        Self {
            inner,
            record,
            hash,
            state: AtomicU8::new(0),
        }
    }

    /// The wrapped link.
    pub const fn inner(&self) -> &L {
        &self.inner
    }
}

impl<L> Check for Checked<L> {
    fn record(&self) -> &str {
        self.record
    }
    fn expected(&self) -> [u8; 8] {
        self.hash
    }
    fn verdict(&self) -> Verdict {
        Verdict::from_u8(self.state.load(Ordering::Acquire))
    }
    fn set_verdict(&self, verdict: Verdict) {
        self.state.store(verdict.to_u8(), Ordering::Release);
    }
}

impl<L: Route> Route for Checked<L> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn max_payload(&self) -> usize {
        self.inner.max_payload()
    }
    fn deliver(&self, key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError> {
        match self.verdict() {
            Verdict::Match => self.inner.deliver(key, payload),
            Verdict::Unverified => Err(DispatchError::SchemaUnverified),
            Verdict::Mismatch | Verdict::Unlisted => Err(DispatchError::SchemaMismatch),
        }
    }
    fn apply_retained(&self) -> bool {
        self.inner.apply_retained()
    }
}

impl<L> fmt::Debug for Checked<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("record", &self.record)
            .field("verdict", &self.verdict())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "alloc")]
pub use verifier::*;

#[cfg(feature = "alloc")]
mod verifier {
    use core::cell::RefCell;
    use core::task::{Context, Poll, Waker};

    use embassy_sync::blocking_mutex::raw::RawMutex;
    use embassy_sync::blocking_mutex::Mutex;

    use super::{Check, Verdict};
    use crate::connector::DispatchError;
    use crate::counters::bump;
    use crate::presence::{LinkState, Status};
    use crate::record::{Kind, RecvError, Source};
    use crate::remote::proto::{Body, Host, Op, Request, RequestError, Response};

    crate::counter_set! {
        /// The atomics behind [`VerifierStats`] (one writer: the task that
        /// polls the verifier).
        struct Counters;
        /// Counters of a [`Verifier`].
        pub struct VerifierStats {
            /// `List` requests sent (one per page).
            asked,
            /// Checks completed: the device's whole table was read.
            checks,
            /// Records found with another schema than the host's.
            mismatches,
            /// Records the device does not describe.
            unlisted,
            /// Answers to the verifier that were errors other than `Busy`, or
            /// not a listing (the check stays unverified until the link comes
            /// up again).
            failed,
        }
    }

    struct State {
        /// The birth sequence of the link the check is for; `None` while
        /// the link is down.
        online: Option<u64>,
        /// The id of this check's requests.
        id: u32,
        /// A page to ask for.
        ask: Option<u16>,
        /// The page asked for and not answered yet.
        asked: Option<u16>,
        waker: Option<Waker>,
    }

    /// Checks [`Checked`](super::Checked) links against a device's
    /// descriptions each time the link comes up (host side, feature
    /// `alloc`).
    ///
    /// Link it like a [`Responder`](crate::remote::Responder) on the node:
    /// [`Self::asks`] (with the `Postcard` codec) as an outbound route on
    /// the request topic, and the verifier itself as an inbound route on
    /// the response topic. It follows a `Latest<LinkState>` record's
    /// reader (a connector's `with_link` record): when the link turns
    /// online (or comes back with another birth sequence) it sets every
    /// check to [`Verdict::Unverified`] and asks for the device's table,
    /// page by page; each listed record sets the checks of that name to
    /// [`Verdict::Match`] or [`Verdict::Mismatch`], and after the last page
    /// the checks the device did not list are [`Verdict::Unlisted`]. When
    /// the link goes down every check is unverified again: another device
    /// may come back.
    ///
    /// Answers to other clients' requests on the same topic (another id)
    /// are accepted and ignored.
    pub struct Verifier<'a, M: RawMutex> {
        checks: &'a [&'a (dyn Check + Sync)],
        state: Mutex<M, RefCell<State>>,
        counters: Counters,
        max_payload: usize,
    }

    impl<'a, M: RawMutex> Verifier<'a, M> {
        /// A verifier for `checks`; request ids start at `first_id`
        /// (pick one other clients of the same device do not use).
        pub const fn new(checks: &'a [&'a (dyn Check + Sync)], first_id: u32) -> Self {
            Self {
                checks,
                state: Mutex::new(RefCell::new(State {
                    online: None,
                    id: first_id,
                    ask: None,
                    asked: None,
                    waker: None,
                })),
                counters: Counters::new(),
                max_payload: crate::inbound::DEFAULT_MAX_PAYLOAD,
            }
        }

        /// Sets the largest answer accepted (default
        /// [`DEFAULT_MAX_PAYLOAD`](crate::inbound::DEFAULT_MAX_PAYLOAD)).
        #[must_use]
        pub const fn with_max_payload(mut self, bytes: usize) -> Self {
            self.max_payload = bytes;
            self
        }

        /// The counters.
        pub fn stats(&self) -> VerifierStats {
            self.counters.snapshot()
        }

        /// The request side: an outbound source of `List` requests,
        /// following `link` (a `Latest<LinkState>` record's reader). Link
        /// it with the `Postcard` codec on the request topic.
        pub fn asks<S: Source<Item = LinkState>>(&self, link: S) -> Asks<'_, 'a, M, S> {
            Asks {
                verifier: self,
                link,
            }
        }

        fn reset(&self) {
            for c in self.checks {
                c.set_verdict(Verdict::Unverified);
            }
        }

        /// The link reported `state`.
        fn link(&self, state: LinkState) {
            let up = state.status == Status::Online;
            let changed = self.state.lock(|s| {
                let mut s = s.borrow_mut();
                if up && s.online == Some(state.seq) {
                    return false;
                }
                s.online = up.then_some(state.seq);
                s.asked = None;
                if up {
                    s.id = s.id.wrapping_add(1);
                    s.ask = Some(0);
                } else {
                    s.ask = None;
                }
                true
            });
            if changed {
                self.reset();
            }
        }

        /// A listing page arrived: the next page to ask for, if any.
        fn page(
            &self,
            total: u16,
            from: u16,
            entries: &[crate::remote::proto::Entry],
        ) -> Option<u16> {
            for e in entries {
                for c in self.checks.iter().filter(|c| c.record() == e.name) {
                    if c.compare(e.schema_hash) == Verdict::Mismatch {
                        bump(&self.counters.mismatches, 1);
                    }
                }
            }
            let end = usize::from(from) + entries.len();
            if !entries.is_empty() && end < usize::from(total) {
                return u16::try_from(end).ok();
            }
            for c in self.checks {
                if c.verdict() == Verdict::Unverified {
                    c.set_verdict(Verdict::Unlisted);
                    bump(&self.counters.unlisted, 1);
                }
            }
            bump(&self.counters.checks, 1);
            None
        }
    }

    impl<M: RawMutex> crate::inbound::Route for Verifier<'_, M> {
        fn name(&self) -> &'static str {
            "aimdb/remote-check"
        }

        fn max_payload(&self) -> usize {
            self.max_payload
        }

        fn deliver(&self, _key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError> {
            let r: Response<Body<'_, Host>> = crate::codec::Postcard
                .decode_borrowed(payload)
                .map_err(DispatchError::MalformedPayload)?;
            // Is it the answer to the page asked for?
            let asked = self.state.lock(|s| {
                let mut s = s.borrow_mut();
                if s.online.is_none() || r.id != s.id {
                    return None;
                }
                s.asked.take()
            });
            let Some(asked) = asked else {
                return Ok(());
            };
            let next = match r.result {
                Ok(Body::List {
                    total,
                    from,
                    entries,
                }) if from == asked => self.page(total, from, &entries),
                Err(RequestError::Busy) => Some(asked),
                _ => {
                    bump(&self.counters.failed, 1);
                    None
                }
            };
            let waker = self.state.lock(|s| {
                let mut s = s.borrow_mut();
                s.ask = next;
                if next.is_some() {
                    s.waker.take()
                } else {
                    None
                }
            });
            if let Some(w) = waker {
                w.wake();
            }
            Ok(())
        }

        /// An answer kept by a broker belongs to an earlier check.
        fn apply_retained(&self) -> bool {
            false
        }
    }

    /// A [`Verifier`]'s requests, as an outbound [`Source`].
    pub struct Asks<'v, 'a, M: RawMutex, S> {
        verifier: &'v Verifier<'a, M>,
        link: S,
    }

    impl<M: RawMutex, S: Source<Item = LinkState>> Source for Asks<'_, '_, M, S> {
        type Item = Request<'static>;

        fn name(&self) -> &'static str {
            "aimdb/remote-check"
        }

        fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Request<'static>, RecvError>> {
            let v = self.verifier;
            // Take every link change; a lagged reader reads on.
            while let Poll::Ready(r) = self.link.poll_recv(cx) {
                if let Ok(state) = r {
                    v.link(state);
                }
            }
            let mut old = None;
            let ask = v.state.lock(|s| {
                let mut s = s.borrow_mut();
                if let Some(from) = s.ask.take() {
                    s.asked = Some(from);
                    return Some(Request {
                        id: s.id,
                        op: Op::List { from },
                    });
                }
                match &s.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => old = s.waker.replace(cx.waker().clone()),
                }
                None
            });
            drop(old);
            match ask {
                Some(r) => {
                    bump(&v.counters.asked, 1);
                    Poll::Ready(Ok(r))
                }
                None => Poll::Pending,
            }
        }

        /// Requests are a stream: not retained, not replayed.
        fn kind(&self) -> Kind {
            Kind::Ring
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use core::task::{Context, Poll, Waker};

    use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

    use super::*;
    use crate::codec::Postcard;
    use crate::presence::{Cause, LinkState};
    use crate::record::{Kind, Latest, Record, Source as _};
    use crate::remote::proto::{Body, Entry, Host, Op, RequestError, Response};
    use crate::remote::Verifier;

    fn entry(name: &str, schema_hash: [u8; 8]) -> Entry<'_> {
        Entry {
            name,
            kind: Kind::Latest,
            capacity: 1,
            writable: false,
            schema_hash,
        }
    }

    fn answer(id: u32, result: Result<Body<'_, Host>, RequestError>) -> Vec<u8> {
        postcard::to_allocvec(&Response { id, result }).unwrap()
    }

    fn list(
        total: u16,
        from: u16,
        entries: Vec<Entry<'_>>,
    ) -> Result<Body<'_, Host>, RequestError> {
        Ok(Body::List {
            total,
            from,
            entries,
        })
    }

    #[test]
    fn verifier_checks_pages_resets_on_link_down_and_ignores_others() {
        static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link");
        static A: Record<Cs, Latest<u32>, 1> = Record::new("a");
        static B: Record<Cs, Latest<u32>, 1> = Record::new("b");
        let a = Checked::new("dev_a", crate::inbound::Link::new(&A, Postcard));
        let b = Checked::new("dev_b", crate::inbound::Link::new(&B, Postcard));
        let checks: [&(dyn Check + Sync); 2] = [&a, &b];
        let v = Verifier::<Cs>::new(&checks, 100);
        let mut asks = v.asks(LINK.subscribe().unwrap());
        let mut cx = Context::from_waker(Waker::noop());
        let mut poll = || match asks.poll_recv(&mut cx) {
            Poll::Ready(Ok(r)) => Some(r),
            _ => None,
        };
        let hash = schema_hash::<u32>();
        let one = postcard::to_allocvec(&7u32).unwrap();

        // Link not up: nothing asked, payloads refused as unverified.
        assert_eq!(poll(), None);
        assert_eq!(a.deliver(None, &one), Err(DispatchError::SchemaUnverified));

        LINK.write(LinkState::online(1));
        let r = poll().expect("asks when the link comes up");
        assert_eq!(r.op, Op::List { from: 0 });
        let id = r.id;
        assert_eq!(poll(), None, "one request at a time");

        // Another client's answer, and a malformed one: no change.
        assert_eq!(v.deliver(None, &answer(id + 7, list(1, 0, vec![]))), Ok(()));
        assert!(matches!(
            v.deliver(None, &[0xff; 3]),
            Err(DispatchError::MalformedPayload(_))
        ));
        assert_eq!(a.verdict(), Verdict::Unverified);
        // Busy: asked again.
        v.deliver(None, &answer(id, Err(RequestError::Busy)))
            .unwrap();
        assert_eq!(poll().map(|r| r.op), Some(Op::List { from: 0 }));
        // Two pages: a matches on the second; b is not listed.
        v.deliver(
            None,
            &answer(id, list(3, 0, vec![entry("x", [0; 8]), entry("y", hash)])),
        )
        .unwrap();
        assert_eq!(a.verdict(), Verdict::Unverified, "not listed yet");
        assert_eq!(poll().map(|r| r.op), Some(Op::List { from: 2 }));
        v.deliver(None, &answer(id, list(3, 2, vec![entry("dev_a", hash)])))
            .unwrap();
        assert_eq!(poll(), None, "last page");
        assert_eq!(
            (a.verdict(), b.verdict()),
            (Verdict::Match, Verdict::Unlisted)
        );
        let s = v.stats();
        assert_eq!((s.asked, s.checks, s.unlisted, s.mismatches), (3, 1, 1, 0));
        assert_eq!(a.deliver(None, &one), Ok(()));
        assert_eq!(A.latest(), Some(7));
        assert_eq!(b.deliver(None, &one), Err(DispatchError::SchemaMismatch));

        // Down: unverified again. Up with another device: a mismatch.
        LINK.write(LinkState::offline(1, Cause::Closed));
        assert_eq!(poll(), None);
        assert_eq!(a.verdict(), Verdict::Unverified);
        assert_eq!(a.deliver(None, &one), Err(DispatchError::SchemaUnverified));
        // A late answer to the old check changes nothing.
        v.deliver(None, &answer(id, list(1, 0, vec![entry("dev_a", hash)])))
            .unwrap();
        assert_eq!(a.verdict(), Verdict::Unverified);
        LINK.write(LinkState::online(2));
        let r = poll().expect("asks again");
        assert_ne!(r.id, id, "a new check, a new id");
        let other = [1u8; 8];
        v.deliver(
            None,
            &answer(
                r.id,
                list(2, 0, vec![entry("dev_a", other), entry("dev_b", hash)]),
            ),
        )
        .unwrap();
        assert_eq!(
            (a.verdict(), b.verdict()),
            (Verdict::Mismatch, Verdict::Match)
        );
        assert_eq!(a.deliver(None, &one), Err(DispatchError::SchemaMismatch));
        assert_eq!(v.stats().mismatches, 1);
        assert_eq!(v.stats().checks, 2);
    }
}
