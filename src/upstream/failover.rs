//! One exchange's failover: which endpoint each attempt asks and with how many sends, the
//! attempts listening at once, their timeouts, and the first acceptable reply winning (the
//! policy is the parent module's paragraph). It owns the state of one exchange, nothing that
//! outlives it: endpoints' health is told to the endpoints, counts to the group's series.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::endpoint::Endpoint;
use super::exchange::ResendAt;
use super::listening::Slots;
use super::marker::Marked;
use super::{
    Answered, AttemptError, AttemptResult, Current, Dialing, MAX_LISTENING, MAX_RETRANSMITS,
    Progress, Upstream, UpstreamError,
};

/// How attempt `number` of an exchange is made.
pub(super) struct Plan<'a> {
    endpoint: &'a Arc<Endpoint>,
    /// Datagrams the attempt may send (UDP), its retransmissions included.
    pub(super) sends: u32,
    /// The attempt's retransmission is the next attempt, at the next endpoint (up and not yet
    /// asked), after its RTO.
    hedge: bool,
}

/// Attempt `number` of `attempts` over `order` (cycled: the retry comes back to the first),
/// taking its retransmissions from the exchange's `retransmits` left. A hedge goes only to an
/// endpoint that is up and not yet asked; an endpoint that is down or whose last attempt
/// failed, or one asked over a stream, gets one send: a datagram lost on the way is what
/// retransmission is for, and an endpoint that stopped answering is not sent the same query
/// again and again (during an outage each stale answer's refresh would cost three datagrams
/// instead of one per attempt).
pub(super) fn plan<'a>(
    order: &[&'a Arc<Endpoint>],
    number: usize,
    attempts: usize,
    udp: bool,
    retransmits: &mut u32,
) -> Option<Plan<'a>> {
    if number >= attempts {
        return None;
    }
    let endpoint = *order.get(number % order.len().max(1))?;
    let next = order
        .get(number + 1)
        .filter(|_| number + 1 < attempts)
        .copied();
    let hedge =
        udp && *retransmits > 0 && endpoint.is_up() && next.is_some_and(|next| next.is_up());
    let sends = if hedge {
        *retransmits -= 1;
        1
    } else if udp && endpoint.is_up() && !endpoint.is_failing() {
        1 + std::mem::take(retransmits)
    } else {
        1
    };
    Some(Plan {
        endpoint,
        sends,
        hedge,
    })
}

/// An attempt still listening, in the slot its future is polled in.
#[derive(Debug)]
struct Listener<'a> {
    number: usize,
    endpoint: &'a Arc<Endpoint>,
    started: Instant,
    /// When it counts as timed out; `None` once counted.
    silent_at: Option<Instant>,
}

impl Upstream {
    pub(super) async fn failover(
        &self,
        query: &Marked,
        deadline: Instant,
        progress: Option<&Progress>,
        tcp_first: bool,
    ) -> Result<Answered, UpstreamError> {
        let endpoints = self.endpoints.load_full();
        if endpoints.is_empty() {
            return Err(UpstreamError::NoEndpoint);
        }
        let mut order: Vec<&Arc<Endpoint>> = endpoints.iter().collect();
        // Healthy endpoints first, in configuration order; down ones stay as a last resort
        // so that a group whose every endpoint is marked down is still tried.
        order.sort_by_key(|e| !e.is_up());
        let attempts = self.max_attempts(deadline, order.len());
        let ceiling = self.spec.attempt_timeout;
        let udp = matches!(self.dialing, Dialing::Udp(_)) && !tcp_first;
        // The attempts listening, polled here, each in its slot (`listening`): no task of
        // their own, and one timer for the exchange, its attempts' resends included. A new
        // attempt takes a free slot or the oldest attempt's; all stop on return.
        let resend_at: [ResendAt; MAX_LISTENING] = Default::default();
        let mut listening: [Option<Listener>; MAX_LISTENING] = Default::default();
        let first = pin!(None);
        let mut running = Slots::new(first);
        let mut timer = pin!(sleep_until(deadline));
        let mut retransmits = MAX_RETRANSMITS;
        let mut last_error = None;
        let mut number = 0;
        // When the next attempt is made, and the endpoint it hedges for, if it is a hedge.
        let mut next_at = Instant::now();
        let mut hedging: Option<&Arc<Endpoint>> = None;
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if now >= next_at
                && let Some(Plan {
                    endpoint,
                    sends,
                    hedge,
                }) = plan(&order, number, attempts, udp, &mut retransmits)
            {
                if let Some(silent) = hedging.take() {
                    self.series.retransmits.inc();
                    silent.timed_out();
                }
                hedging = hedge.then_some(endpoint);
                if let Some(progress) = progress {
                    let after = plan(&order, number + 1, attempts, false, &mut 0);
                    progress.set(Current {
                        silent_at: now + ceiling,
                        endpoint: Arc::clone(endpoint),
                        next: after.map(|after| Arc::clone(after.endpoint)),
                    });
                }
                // A free slot, else the oldest attempt's.
                let slot = (0..MAX_LISTENING)
                    .min_by_key(|&slot| listening[slot].as_ref().map(|l| l.number))
                    .unwrap_or_default();
                resend_at[slot].set(None);
                running.start(
                    slot,
                    endpoint.attempt(query, sends, ceiling, deadline, &resend_at[slot], tcp_first),
                );
                listening[slot] = Some(Listener {
                    number,
                    endpoint,
                    started: now,
                    silent_at: Some(now + ceiling),
                });
                number += 1;
                next_at = now
                    + if hedge {
                        endpoint.rto(ceiling)
                    } else {
                        ceiling
                    };
            } else if number >= attempts && listening.iter().all(Option::is_none) {
                // Every attempt made has failed.
                break;
            }
            // The next attempt's time counts only while one is left to make.
            let next_attempt = (number < attempts).then_some(next_at);
            let finished = poll_fn(|cx| {
                if let Poll::Ready(finished) = running.poll_finished(cx) {
                    return Poll::Ready(Some(finished));
                }
                // Read after the attempts were polled: a resend moves its time on.
                let wake = listening
                    .iter()
                    .flatten()
                    .filter_map(|l| l.silent_at)
                    .chain(resend_at.iter().filter_map(ResendAt::get))
                    .chain(next_attempt)
                    .fold(deadline, Instant::min);
                if timer.deadline() != wake {
                    timer.as_mut().reset(wake);
                }
                timer.as_mut().poll(cx).map(|()| None)
            })
            .await;
            if let Some((slot, outcome)) = finished {
                resend_at[slot].set(None);
                let Some(listener) = listening[slot].take() else {
                    continue;
                };
                match self.settle(&listener, outcome) {
                    Ok(answered) => return Ok(answered),
                    Err(error) => {
                        last_error = Some(error);
                        // A quick failure (refused, unreachable): ask the next one now.
                        next_at = Instant::now();
                        hedging = None;
                    }
                }
            } else {
                let now = Instant::now();
                for listener in listening
                    .iter_mut()
                    .flatten()
                    .filter(|l| l.silent_at.is_some_and(|at| at <= now))
                {
                    listener.silent_at = None;
                    self.attempt_failed(
                        listener.endpoint,
                        &AttemptError::Timeout,
                        listener.started,
                    );
                    last_error = Some(AttemptError::Timeout);
                }
            }
        }
        Err(last_error.map_or(UpstreamError::NoTime, UpstreamError::Exhausted))
    }

    /// A finished attempt's outcome, counted and told to its endpoint (a failure only when it
    /// was not counted already as timed out).
    fn settle(
        &self,
        listener: &Listener,
        outcome: Result<Answered, AttemptError>,
    ) -> Result<Answered, AttemptError> {
        match &outcome {
            Ok(answered) => {
                self.series.record(
                    AttemptResult::of_reply(&answered.bytes),
                    listener.started.elapsed(),
                );
                listener.endpoint.answered(&self.spec.name, answered.rtt);
            }
            Err(error) if listener.silent_at.is_some() => {
                self.attempt_failed(listener.endpoint, error, listener.started);
            }
            Err(_) => {}
        }
        outcome
    }

    /// Counts a failed (or timed out) attempt and tells its endpoint.
    fn attempt_failed(&self, endpoint: &Arc<Endpoint>, error: &AttemptError, began: Instant) {
        self.series
            .record(AttemptResult::of_error(error), began.elapsed());
        tracing::debug!(upstream = %self.spec.name, endpoint = %endpoint.addr, %error, "attempt failed");
        endpoint.failed(&self.spec.name, error, self.spec.attempt_timeout);
    }

    /// One attempt per endpoint and one retry, as far as the time left allows (at least one):
    /// a single-endpoint kube-dns that stays silent for an attempt timeout (its retransmissions
    /// included) is asked once more, and an outage costs a bounded number of packets per query.
    fn max_attempts(&self, deadline: Instant, endpoints: usize) -> usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let per_attempt = self.spec.attempt_timeout.max(Duration::from_millis(1));
        let rounds = usize::try_from(left.as_millis() / per_attempt.as_millis())
            .unwrap_or(usize::MAX)
            .max(1);
        rounds.min(endpoints + 1)
    }
}
