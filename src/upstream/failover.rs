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

/// Where one exchange's failover stands between two events: the endpoints in the order they
/// are asked, the attempts made and listening, when the next one is due, and the last error.
/// The attempts' futures and their resend times live beside it, in the exchange's future.
struct Failover<'a> {
    /// Healthy endpoints first, in configuration order; down ones stay as a last resort so
    /// that a group whose every endpoint is marked down is still tried.
    order: Vec<&'a Arc<Endpoint>>,
    /// Attempts the exchange may make ([`Upstream::max_attempts`]).
    attempts: usize,
    /// The attempt timeout: the ceiling of one wait, after which a silent attempt has failed.
    ceiling: Duration,
    /// Over UDP, with retransmissions (not a question remembered as too big for UDP).
    udp: bool,
    retransmits: u32,
    /// Attempts made so far: the next one's number.
    made: usize,
    /// When the next attempt is made.
    next_at: Instant,
    /// The endpoint the last attempt hedges for, if it was a hedge.
    hedging: Option<&'a Arc<Endpoint>>,
    /// The attempts listening, each in its slot.
    listening: [Option<Listener<'a>>; MAX_LISTENING],
    last_error: Option<AttemptError>,
}

/// What an exchange does next, as its failover stands.
enum Next<'a> {
    /// An attempt is due: make it.
    Attempt(Plan<'a>),
    /// Every attempt has been made and has failed.
    Exhausted,
    /// Wait: for an attempt's reply, its silence, a resend or the next attempt's time.
    Listen,
}

impl<'a> Failover<'a> {
    fn new(
        upstream: &Upstream,
        endpoints: &'a [Arc<Endpoint>],
        deadline: Instant,
        tcp_first: bool,
    ) -> Self {
        let mut order: Vec<&Arc<Endpoint>> = endpoints.iter().collect();
        order.sort_by_key(|e| !e.is_up());
        Self {
            attempts: upstream.max_attempts(deadline, order.len()),
            order,
            ceiling: upstream.spec.attempt_timeout,
            udp: matches!(upstream.dialing, Dialing::Udp(_)) && !tcp_first,
            retransmits: MAX_RETRANSMITS,
            made: 0,
            next_at: Instant::now(),
            hedging: None,
            listening: Default::default(),
            last_error: None,
        }
    }

    fn next(&mut self, now: Instant) -> Next<'a> {
        if now >= self.next_at
            && let Some(attempt) = plan(
                &self.order,
                self.made,
                self.attempts,
                self.udp,
                &mut self.retransmits,
            )
        {
            Next::Attempt(attempt)
        } else if self.made >= self.attempts && self.listening.iter().all(Option::is_none) {
            Next::Exhausted
        } else {
            Next::Listen
        }
    }

    /// Enters `attempt`, made `now`, as listening: the endpoint a hedge was sent for counts
    /// as silent, `progress` learns of it, and the next attempt's time is set. Returns the
    /// slot it listens in: a free one, else the oldest attempt's.
    fn begin(
        &mut self,
        upstream: &Upstream,
        attempt: &Plan<'a>,
        now: Instant,
        progress: Option<&Progress>,
    ) -> usize {
        if let Some(silent) = self.hedging.take() {
            upstream.series.retransmits.inc();
            silent.timed_out();
        }
        self.hedging = attempt.hedge.then_some(attempt.endpoint);
        if let Some(progress) = progress {
            let after = plan(&self.order, self.made + 1, self.attempts, false, &mut 0);
            progress.set(Current {
                silent_at: now + self.ceiling,
                endpoint: Arc::clone(attempt.endpoint),
                next: after.map(|after| Arc::clone(after.endpoint)),
            });
        }
        let slot = (0..MAX_LISTENING)
            .min_by_key(|&slot| self.listening[slot].as_ref().map(|l| l.number))
            .unwrap_or_default();
        self.listening[slot] = Some(Listener {
            number: self.made,
            endpoint: attempt.endpoint,
            started: now,
            silent_at: Some(now + self.ceiling),
        });
        self.made += 1;
        self.next_at = now
            + if attempt.hedge {
                attempt.endpoint.rto(self.ceiling)
            } else {
                self.ceiling
            };
        slot
    }

    /// When the exchange must look again: the first of its listening attempts' timeouts,
    /// their resends (`resend_at`), the next attempt (while one is left to make) and the
    /// `deadline`.
    fn wake(&self, resend_at: &[ResendAt], deadline: Instant) -> Instant {
        let next_attempt = (self.made < self.attempts).then_some(self.next_at);
        (self.listening.iter().flatten())
            .filter_map(|l| l.silent_at)
            .chain(resend_at.iter().filter_map(ResendAt::get))
            .chain(next_attempt)
            .fold(deadline, Instant::min)
    }

    /// The attempt in `slot` finished with `outcome`: the reply, if it is one; after a
    /// failure (refused, unreachable: a quick one) the next attempt is due now.
    fn finished(
        &mut self,
        upstream: &Upstream,
        slot: usize,
        outcome: Result<Answered, AttemptError>,
    ) -> Option<Answered> {
        let listener = self.listening[slot].take()?;
        match upstream.settle(&listener, outcome) {
            Ok(answered) => Some(answered),
            Err(error) => {
                self.last_error = Some(error);
                self.next_at = Instant::now();
                self.hedging = None;
                None
            }
        }
    }

    /// The timer went off: every listening attempt silent since before `now` counts as timed
    /// out (once; it keeps listening).
    fn silent(&mut self, upstream: &Upstream, now: Instant) {
        for listener in (self.listening.iter_mut())
            .flatten()
            .filter(|l| l.silent_at.is_some_and(|at| at <= now))
        {
            listener.silent_at = None;
            upstream.attempt_failed(listener.endpoint, &AttemptError::Timeout, listener.started);
            self.last_error = Some(AttemptError::Timeout);
        }
    }
}

impl Upstream {
    /// Asks the group's endpoints for `query` until one answers or `deadline` passes: the
    /// state machine of [`Failover`], driven by one timer. The attempts listening are polled
    /// here, each in its slot (`listening`): no task of their own, and one timer for the
    /// exchange, its attempts' resends included. A new attempt takes a free slot or the
    /// oldest attempt's; all stop on return.
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
        let mut state = Failover::new(self, &endpoints, deadline, tcp_first);
        let resend_at: [ResendAt; MAX_LISTENING] = Default::default();
        let first = pin!(None);
        let mut running = Slots::new(first);
        let mut timer = pin!(sleep_until(deadline));
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match state.next(now) {
                Next::Attempt(attempt) => {
                    let slot = state.begin(self, &attempt, now, progress);
                    resend_at[slot].set(None);
                    let (sends, ceiling) = (attempt.sends, state.ceiling);
                    running.start(
                        slot,
                        (attempt.endpoint).attempt(
                            query,
                            sends,
                            ceiling,
                            deadline,
                            &resend_at[slot],
                            tcp_first,
                        ),
                    );
                }
                Next::Exhausted => break,
                Next::Listen => {}
            }
            let finished = poll_fn(|cx| {
                if let Poll::Ready(finished) = running.poll_finished(cx) {
                    return Poll::Ready(Some(finished));
                }
                // Read after the attempts were polled: a resend moves its time on.
                let wake = state.wake(&resend_at, deadline);
                if timer.deadline() != wake {
                    timer.as_mut().reset(wake);
                }
                timer.as_mut().poll(cx).map(|()| None)
            })
            .await;
            match finished {
                Some((slot, outcome)) => {
                    resend_at[slot].set(None);
                    if let Some(answered) = state.finished(self, slot, outcome) {
                        return Ok(answered);
                    }
                }
                None => state.silent(self, Instant::now()),
            }
        }
        Err((state.last_error).map_or(UpstreamError::NoTime, UpstreamError::Exhausted))
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
