use core::task::Waker;

use super::*;

fn leaked<const W: usize>() -> &'static Readiness<W> {
    std::boxed::Box::leak(std::boxed::Box::new(Readiness::new()))
}

#[test]
fn direct_hand_over_moves_the_cursor_as_pop_would() {
    let r = leaked::<4>();
    let mut p = Scheduler::<4>::new();
    assert!(p.park(r, Waker::noop()));
    r.mark(5);
    assert_eq!(p.take(r), Some(5), "handed over while parked");
    // Not parked now: these go through the bitmap.
    r.mark(3);
    r.mark(7);
    assert_eq!(
        [p.take(r), p.take(r), p.take(r)],
        [Some(7), Some(3), None],
        "round-robin resumes past the route served directly"
    );
}

#[test]
fn direct_hand_over_waits_its_turn_behind_routes_already_pending() {
    let r = leaked::<4>();
    let mut p = Scheduler::<4>::new();
    p.set(5);
    assert_eq!(p.take(r), Some(5));
    assert!(p.park(r, Waker::noop()));
    // A route set while parked (as `Routes::mark_all` does), then a hand-
    // over: both are pending, and the cursor (past 5) says 2 goes first.
    p.set(2);
    r.mark(5);
    assert_eq!([p.take(r), p.take(r), p.take(r)], [Some(2), Some(5), None]);
}

#[test]
fn direct_hand_over_of_an_urgent_route_moves_the_urgent_cursor() {
    let r = leaked::<4>();
    let mut p = Scheduler::<4>::new();
    p.set_urgent(3, 8);
    assert!(p.park(r, Waker::noop()));
    r.mark(1);
    assert_eq!(p.take(r), Some(1));
    r.mark(0);
    r.mark(2);
    r.mark(40);
    assert_eq!(
        [p.take(r), p.take(r), p.take(r), p.take(r)],
        [Some(2), Some(0), Some(40), None],
        "urgent first, from past route 1"
    );
}
