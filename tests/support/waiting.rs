//! Futures that must keep waiting, for the tests that measure what waiting holds: each is
//! polled as its task would be on a wake-up, by hand, so that nothing else (a task, a set of
//! futures) allocates beside them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

/// Polls each of `futures` once: none may have finished (`why` says why they wait).
pub fn poll_all<F: Future + ?Sized>(futures: &mut [Pin<Box<F>>], why: &str) {
    let mut cx = Context::from_waker(Waker::noop());
    for future in futures {
        assert!(future.as_mut().poll(&mut cx).is_pending(), "{why}");
    }
}
