//! The attempts of one exchange that are listening, polled by the exchange itself rather than
//! run as tasks of their own: at most two ([`MAX_LISTENING`]). The first is kept inline, in
//! the exchange's own future; room for a second is allocated only when one starts while the
//! first still listens (a hedge, the next endpoint after a silent one). An exchange that one
//! endpoint answers — almost every miss — so carries no room for a second attempt and
//! allocates nothing for its attempts.
//!
//! It owns only that room: when an attempt starts is the `failover` module's, what it does on
//! the wire the `exchange` module's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::MAX_LISTENING;

const _: () = assert!(MAX_LISTENING == 2, "Slots holds two attempts");

/// Two slots of attempt futures; emptying a slot drops, and so stops, its attempt.
pub(super) struct Slots<'a, F> {
    first: Pin<&'a mut Option<F>>,
    second: Option<Pin<Box<Option<F>>>>,
}

impl<'a, F: Future> Slots<'a, F> {
    /// Empty slots, the first of them `first` (pinned in the caller's future).
    pub(super) fn new(first: Pin<&'a mut Option<F>>) -> Self {
        Self {
            first,
            second: None,
        }
    }

    fn get(&mut self, slot: usize) -> Option<Pin<&mut Option<F>>> {
        match slot {
            0 => Some(self.first.as_mut()),
            _ => self.second.as_mut().map(Pin::as_mut),
        }
    }

    /// Starts `attempt` in `slot` (0 or 1), stopping the one that was there.
    pub(super) fn start(&mut self, slot: usize, attempt: F) {
        match (slot, &mut self.second) {
            (0, _) => self.first.set(Some(attempt)),
            (_, Some(second)) => second.set(Some(attempt)),
            (_, None) => self.second = Some(Box::pin(Some(attempt))),
        }
    }

    /// Polls every attempt: the first that finished, and its slot, now empty.
    pub(super) fn poll_finished(&mut self, cx: &mut Context<'_>) -> Poll<(usize, F::Output)> {
        for slot in 0..MAX_LISTENING {
            if let Some(mut held) = self.get(slot)
                && let Some(attempt) = held.as_mut().as_pin_mut()
                && let Poll::Ready(outcome) = attempt.poll(cx)
            {
                held.set(None);
                return Poll::Ready((slot, outcome));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, ready};
    use std::pin::pin;
    use std::task::Waker;

    use super::*;

    /// An attempt that finishes at once with `value`, or never.
    async fn attempt(value: Option<u8>) -> u8 {
        match value {
            Some(value) => ready(value).await,
            None => pending().await,
        }
    }

    #[test]
    fn the_attempt_that_finishes_is_returned_with_its_slot_and_its_slot_emptied() {
        let mut cx = Context::from_waker(Waker::noop());
        let first = pin!(None);
        let mut slots = Slots::new(first);
        assert!(
            slots.second.is_none(),
            "no room for a second until one starts"
        );
        slots.start(0, attempt(None));
        assert!(slots.poll_finished(&mut cx).is_pending());
        slots.start(1, attempt(Some(7)));
        assert_eq!(slots.poll_finished(&mut cx), Poll::Ready((1, 7)));
        assert!(slots.get(1).is_some_and(|slot| slot.is_none()));
        assert!(
            slots.poll_finished(&mut cx).is_pending(),
            "the first still listens"
        );
        slots.start(0, attempt(Some(8)));
        assert_eq!(slots.poll_finished(&mut cx), Poll::Ready((0, 8)));
    }
}
