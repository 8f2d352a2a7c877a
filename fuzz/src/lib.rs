//! Shared pieces of the fuzz targets: structured inputs, the reference
//! topic rules, the inbound fixture and its model, a tiny executor.

pub mod fixture;
pub mod reference;

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

use arbitrary::Arbitrary;

/// One topic level: a piece the route table knows, or raw bytes.
#[derive(Arbitrary, Debug, Clone)]
pub enum Piece {
    Known(u8),
    Raw(Vec<u8>),
}

/// A topic: levels joined by `/` (reaches the routes quickly), or raw bytes.
#[derive(Arbitrary, Debug, Clone)]
pub enum TopicIn {
    Levels(Vec<Piece>),
    Raw(Vec<u8>),
}

impl TopicIn {
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Raw(b) => b.clone(),
            Self::Levels(levels) => {
                let mut out = Vec::new();
                for (i, p) in levels.iter().enumerate() {
                    if i > 0 {
                        out.push(b'/');
                    }
                    match p {
                        Piece::Known(k) => out.extend_from_slice(
                            fixture::PIECES[*k as usize % fixture::PIECES.len()].as_bytes(),
                        ),
                        Piece::Raw(b) => out.extend_from_slice(b),
                    }
                }
                out
            }
        }
    }
}

/// Polls `f` with a no-op waker at most `polls` times: its output, or
/// `None` if it is still pending (nothing here waits on a real event).
pub fn poll_bounded<F: Future>(f: F, polls: usize) -> Option<F::Output> {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..polls {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
    }
    None
}
