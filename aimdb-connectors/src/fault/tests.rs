//! Unit tests of the fault transport: each fault the same on both sides
//! and for any chunking; random faults depend only on the seed.

use super::*;
use crate::loopback::Pair;
use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use futures::executor::block_on;

/// Pushes `data` through a write-side `Faulty` in `chunk`-byte calls
/// and returns what came out, plus the counts.
fn through_writer(data: &[u8], plan: Plan<'_>, chunk: usize) -> (heapless::Vec<u8, 512>, Injected) {
    let pair = Pair::<NoopRawMutex, 512>::new();
    let ((_, tx), (mut rx, _)) = (pair.a(), pair.b());
    let mut tx = Faulty::new(tx, plan);
    block_on(async {
        let mut at = 0;
        while at < data.len() {
            let end = (at + chunk).min(data.len());
            match tx.write(&data[at..end]).await {
                Ok(n) => at += n,
                Err(_) => break,
            }
        }
        pair.a_to_b().close();
        let mut out = heapless::Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = rx.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]).unwrap();
        }
        (out, tx.injected())
    })
}

/// The same through a read-side `Faulty`, reading `chunk` bytes a call.
fn through_reader(data: &[u8], plan: Plan<'_>, chunk: usize) -> (heapless::Vec<u8, 512>, Injected) {
    let pair = Pair::<NoopRawMutex, 512>::new();
    let ((_, mut tx), (rx, _)) = (pair.a(), pair.b());
    let mut rx = Faulty::new(rx, plan);
    block_on(async {
        tx.write(data).await.unwrap();
        pair.a_to_b().close();
        let mut out = heapless::Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = rx.read(&mut buf[..chunk]).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]).unwrap();
        }
        (out, rx.injected())
    })
}

const DATA: &[u8] = b"abc\0defgh\0ijklmnop\0qrs\0";

#[test]
fn each_fault_does_the_same_on_both_sides_for_any_chunking() {
    let cases: &[(&[Fault], &[u8])] = &[
        (&[Fault::Drop { at: 1, len: 3 }], b"adefgh\0ijklmnop\0qrs\0"),
        (&[Fault::Truncate { at: 5 }], b"abc\0d\0ijklmnop\0qrs\0"),
        (
            &[Fault::Duplicate { at: 10, len: 4 }],
            b"abc\0defgh\0ijklijklmnop\0qrs\0",
        ),
        (
            &[Fault::Corrupt { at: 0, xor: 0x20 }],
            b"Abc\0defgh\0ijklmnop\0qrs\0",
        ),
        (&[Fault::Delay { at: 3, polls: 3 }], DATA),
        (&[Fault::Close { at: 12 }], b"abc\0defgh\0ij"),
        (
            &[
                Fault::Drop { at: 0, len: 2 },
                Fault::Corrupt { at: 1, xor: 1 },
                Fault::Duplicate { at: 19, len: 3 },
            ],
            b"b\0defgh\0ijklmnop\0qrsqrs\0",
        ),
    ];
    for (script, want) in cases {
        for chunk in [1, 2, 5, 64] {
            for split in [0, 1, 3] {
                let plan = Plan::new().script(script).split(split);
                let (w, wi) = through_writer(DATA, plan, chunk);
                assert_eq!(
                    &w[..],
                    *want,
                    "write {script:?} chunk {chunk} split {split}"
                );
                let (r, ri) = through_reader(DATA, plan, chunk);
                assert_eq!(&r[..], *want, "read {script:?} chunk {chunk} split {split}");
                assert_eq!(wi, ri);
                assert_eq!(wi.faults as usize, script.len());
            }
        }
    }
}

#[test]
fn random_faults_depend_on_the_seed_not_the_chunking() {
    let mut data = [0u8; 400];
    for (i, b) in data.iter_mut().enumerate() {
        *b = if i % 17 == 16 { 0 } else { (i % 251) as u8 + 1 };
    }
    let plan = |seed| {
        Plan::new().random(Random {
            seed,
            mean_gap: 20,
            max_len: 5,
            kinds: Kinds::DAMAGE | Kinds::DELAY,
            end: u64::MAX,
        })
    };
    let (a, ai) = through_writer(&data, plan(7), 400);
    let (b, bi) = through_writer(&data, plan(7).split_random(9, 3), 13);
    let (c, ci) = through_reader(&data, plan(7), 7);
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!((ai, ai), (bi, ci));
    assert!(ai.faults > 5, "{ai:?}");
    let (d, _) = through_writer(&data, plan(8), 400);
    assert_ne!(a, d, "another seed, other faults");
}

#[test]
fn an_empty_plan_passes_everything() {
    let (out, i) = through_writer(DATA, Plan::new(), 3);
    assert_eq!(&out[..], DATA);
    assert_eq!(i, Injected::default());
}
