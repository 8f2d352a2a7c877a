//! Pins the auto traits the design relies on, at compile time (after
//! tokio's `tests/async_send_sync.rs`): records with a thread-safe mutex are
//! shared between threads and interrupts, readers and producers move into
//! tasks, the readiness bitmap is reached from any thread's route waker, and
//! errors box into `Box<dyn Error + Send + Sync>`. A field that silently
//! took one of these away (a `Cell`, an `Rc`, a raw pointer) fails this
//! file's build, not a user's.
//!
//! The routing tables are `Send` in their default flavour (links erased as
//! `dyn outbound::Route + Send` / `dyn inbound::Route + Sync`), so a connector that owns or
//! borrows them can be `tokio::spawn`ed.
//!
//! The other direction matters too: a record over `NoopRawMutex` has no
//! lock at all, so it must never be `Sync`, its readers never `Send`, and
//! the `Local` tables that hold links over it never `Send`.
#![cfg(not(aimdb_loom))]

use aimdb_core::codec::{DecodeError, EncodeError, Postcard};
use aimdb_core::connector::DispatchError;
use aimdb_core::inbound::{self, Dispatch, LocalDispatch};
use aimdb_core::outbound::{self, LocalRoutes, RouteError, Routes};
use aimdb_core::record::{
    KeyError, Keyed, Latest, Mailbox, Producer, Reader, Record, RecvError, Ring, SubscribeError,
    TryRecvError,
};
use aimdb_core::sync::Readiness;
use aimdb_core::topic::TopicError;
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};

fn send_sync<T: ?Sized + Send + Sync>() {}
fn send<T: ?Sized + Send>() {}
fn error<T: std::error::Error + Send + Sync + Copy + 'static>() {}

/// Fails to compile if `$t: Sync` (two impls would then apply and the call
/// is ambiguous).
/// Fails to compile if `$t: Send`.
macro_rules! assert_not_send {
    ($t:ty) => {{
        trait AmbiguousIfSend<A> {
            fn check() {}
        }
        impl<T: ?Sized> AmbiguousIfSend<()> for T {}
        impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
        <$t as AmbiguousIfSend<_>>::check();
    }};
}

macro_rules! assert_not_sync {
    ($t:ty) => {{
        trait AmbiguousIfSync<A> {
            fn check() {}
        }
        impl<T: ?Sized> AmbiguousIfSync<()> for T {}
        impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}
        <$t as AmbiguousIfSync<_>>::check();
    }};
}

type Rec = Record<Cs, Latest<u32>, 2>;

#[test]
fn records_with_a_thread_safe_mutex_are_send_and_sync() {
    send_sync::<Rec>();
    send_sync::<Record<Cs, Ring<u32, 8>, 4>>();
    send_sync::<Record<Cs, Mailbox<[u8; 16]>, 1>>();
    send_sync::<Keyed<Cs, Latest<u32>, 4, 1>>();
    send_sync::<Producer<'static, Cs, Latest<u32>, 2>>();
    send::<Reader<'static, Cs, Latest<u32>, 2>>();
}

#[test]
fn a_record_without_a_lock_is_not_sync() {
    // Moving one to another thread is fine; sharing it is not.
    send::<Record<NoopRawMutex, Latest<u32>, 1>>();
    assert_not_sync!(Record<NoopRawMutex, Latest<u32>, 1>);
    assert_not_sync!(Record<NoopRawMutex, Ring<u32, 8>, 1>);
    assert_not_send!(Reader<'static, NoopRawMutex, Latest<u32>, 1>);
    assert_not_send!(
        outbound::Link<Reader<'static, NoopRawMutex, Latest<u32>, 1>, &'static str, Postcard>
    );
    assert_not_sync!(inbound::Link<'static, Record<NoopRawMutex, Latest<u32>, 1>, Postcard, u32>);
}

#[cfg(feature = "std")]
#[test]
fn records_over_the_host_lock_are_send_and_sync() {
    use aimdb_core::sync::HostRawMutex;
    send_sync::<HostRawMutex>();
    send_sync::<Record<HostRawMutex, Latest<u32>, 2>>();
    send_sync::<Record<HostRawMutex, Ring<u32, 8>, 4>>();
    send_sync::<Keyed<HostRawMutex, Latest<u32>, 4, 1>>();
    send::<Reader<'static, HostRawMutex, Latest<u32>, 2>>();
}

type Ready = &'static Readiness<1>;

#[test]
fn default_tables_are_send() {
    send::<Routes<'static, Ready, 1, 4>>();
    send::<outbound::Builder<'static, Ready, 1, 4>>();
    send::<Dispatch<'static, 4, 4>>();
    send_sync::<Dispatch<'static, 4, 4>>();
    send::<inbound::Builder<'static, 4, 4>>();
    #[cfg(feature = "alloc")]
    send::<Routes<'static, std::sync::Arc<Readiness<1>>, 1, 4>>();
}

#[test]
fn local_tables_are_not_send() {
    assert_not_send!(LocalRoutes<'static, Ready, 1, 4>);
    assert_not_send!(LocalDispatch<'static, 4, 4>);
    assert_not_sync!(LocalDispatch<'static, 4, 4>);
}

#[test]
fn readiness_and_route_wakers_cross_threads() {
    send_sync::<Readiness<1>>();
    send_sync::<Readiness<128>>();
    send_sync::<std::sync::Arc<Readiness<4>>>();
}

#[test]
fn links_move_into_the_task_that_runs_the_connector() {
    send::<outbound::Link<Reader<'static, Cs, Latest<u32>, 2>, &'static str, Postcard>>();
    send_sync::<inbound::Link<'static, Rec, Postcard, u32>>();
    send_sync::<inbound::KeyedLink<'static, Keyed<Cs, Latest<u32>, 4, 1>, Postcard, u32>>();
}

#[test]
fn errors_box_into_send_sync_errors() {
    error::<DispatchError>();
    error::<RouteError>();
    error::<RecvError>();
    error::<TryRecvError>();
    error::<SubscribeError>();
    error::<KeyError>();
    error::<TopicError>();
    error::<EncodeError>();
    error::<DecodeError>();
    send_sync::<outbound::ConfigErrors>();
    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(DispatchError::UnknownTopic);
    assert!(!e.to_string().is_empty());
}
