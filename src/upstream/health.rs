//! What meshdns knows of one endpoint's health: one record with one clock, owned by the
//! endpoint and read by everyone else (its group orders and hedges by it, the gatherer decides
//! how long a leg may straggle by it, the cache serves stale at once by it).
//!
//! The record says whether the endpoint's last attempt answered or failed, whether it is down
//! until a probe sees it answer, whether that probe runs, and how long its replies take: the
//! smoothed round-trip time and its variance (RFC 6298 §2, as unbound keeps per server in its
//! infrastructure cache), from which the retransmission timeout of a UDP query comes. A timeout
//! backs the retransmission timeout off (it doubles, RFC 6298 §5.5) until a measured answer
//! resets it. Samples are unambiguous: every send of a query carries its own ID, so a reply
//! is timed from the send it answers (Karn's problem does not arise).
//!
//! All of it sits under one lock, updated once per send or attempt: a reader never sees an
//! endpoint "answered" with the failures of before, or "up" with a probe still counted.
//!
//! It only keeps the record and gives verdicts: it starts no probe, sets no gauge and writes no
//! log line (the `endpoint` module does, on its verdicts).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Failures in a row after which an endpoint is considered down (CoreDNS forward uses 3 too).
pub(super) const FAILURES_UNTIL_DOWN: u32 = 3;

/// The shortest retransmission timeout. The estimate of a peer on the same network is well
/// under a millisecond, but its answers have a tail of their own — a Go garbage collection in
/// CoreDNS, a busy node's scheduler — of a few milliseconds; a timer below that would resend
/// answers that were merely on their way. Measured (the bench's `loss` group, a 2-core
/// machine at load 9): with a 20 ms floor the retransmissions matched the datagrams lost
/// within 0.5 % of the exchanges, so the tail is well under it. And a floor of 15 ms makes two
/// losses in a row (the p99 at 5 % loss each way: 15 + 30 ms) cost less than one loss costs
/// unbound (its floor is 50 ms); with 20 ms they cost 60 ms and the p99 came out at 61.7 ms
/// against unbound's 59.3. A loss on a near peer costs about 15 ms.
pub const RTO_FLOOR: Duration = Duration::from_millis(15);

/// The retransmission timeout of an endpoint never measured (clamped to the ceiling). Above
/// the round trip of any terrestrial link (intercontinental ones stay under 250 ms), so the
/// first query to a far peer is not resent needlessly; below unbound's 376 ms and the 500 ms
/// default ceiling, so even a first query loses less than an attempt to a lost packet. Only
/// the first queries of an endpoint wait this long: its first answer is measured.
pub const INITIAL_RTO: Duration = Duration::from_millis(300);

/// Doublings of the retransmission timeout at most: 2⁶ × the floor already passes any
/// sensible ceiling, and the exponent stays far from overflow.
const MAX_BACKOFF: u32 = 6;

/// One endpoint's health record.
#[derive(Debug, Default)]
pub(super) struct Health(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// Attempts failed in a row (0: its last attempt answered, or none was made).
    failures: u32,
    /// Down until a probe sees it answer.
    down: bool,
    /// A probe runs for it.
    probing: bool,
    /// The round-trip estimate, once a reply has been timed.
    rtt: Option<Rtt>,
    /// Retransmission timeouts in a row since the last measured answer.
    backoff: u32,
}

/// RFC 6298's estimator: smoothed round-trip time and its variance.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rtt {
    srtt: Duration,
    rttvar: Duration,
}

impl Rtt {
    /// The estimate after `sample` (RFC 6298 §2.2 for the first, §2.3 after).
    fn after(previous: Option<Rtt>, sample: Duration) -> Rtt {
        match previous {
            None => Rtt {
                srtt: sample,
                rttvar: sample / 2,
            },
            Some(Rtt { srtt, rttvar }) => Rtt {
                rttvar: rttvar * 3 / 4 + srtt.abs_diff(sample) / 4,
                srtt: srtt * 7 / 8 + sample / 8,
            },
        }
    }
}

/// What a failed attempt changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Still considered up.
    Up,
    /// This failure marked it down.
    NowDown,
    /// It was down already.
    StillDown,
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock panics; a poisoned record is still the record.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn is_up(&self) -> bool {
        !self.lock().down
    }

    /// Whether its last attempt failed: stale answers are then served at once (RFC 8767).
    pub(super) fn is_failing(&self) -> bool {
        self.lock().failures > 0
    }

    /// How long a UDP query waits for its reply before it is sent again: SRTT + 4·RTTVAR,
    /// at least [`RTO_FLOOR`], doubled for every timeout since the last measured answer, at
    /// most `ceiling` (the attempt timeout). [`INITIAL_RTO`] before any measurement.
    pub(super) fn rto(&self, ceiling: Duration) -> Duration {
        let state = self.lock();
        let base = state.rtt.map_or(INITIAL_RTO, |rtt| {
            (rtt.srtt + rtt.rttvar * 4).max(RTO_FLOOR)
        });
        base.saturating_mul(1 << state.backoff.min(MAX_BACKOFF))
            .min(ceiling)
    }

    /// A send was not answered within its retransmission timeout: the next wait doubles.
    pub(super) fn timed_out(&self) {
        let mut state = self.lock();
        state.backoff = (state.backoff + 1).min(MAX_BACKOFF);
    }

    /// The endpoint answered, in `rtt` when the reply was timed (a UDP reply, measured from
    /// the send it answers); `true` when it was down until now.
    pub(super) fn answered(&self, rtt: Option<Duration>) -> bool {
        let mut state = self.lock();
        state.failures = 0;
        if let Some(sample) = rtt {
            state.rtt = Some(Rtt::after(state.rtt, sample));
            state.backoff = 0;
        }
        std::mem::replace(&mut state.down, false)
    }

    /// An attempt failed (the caller leaves meshdns's own local errors out).
    pub(super) fn failed(&self) -> Verdict {
        let mut state = self.lock();
        state.failures = state.failures.saturating_add(1);
        if state.down {
            Verdict::StillDown
        } else if state.failures >= FAILURES_UNTIL_DOWN {
            state.down = true;
            Verdict::NowDown
        } else {
            Verdict::Up
        }
    }

    /// Claims the probe of a down endpoint: `true` when it is down and no probe runs yet, so
    /// the caller starts one.
    pub(super) fn claim_probe(&self) -> bool {
        let mut state = self.lock();
        state.down && !std::mem::replace(&mut state.probing, true)
    }

    /// The probe ends: it saw the endpoint answer.
    pub(super) fn probe_ended(&self) {
        self.lock().probing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: Duration = Duration::from_millis(500);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_endpoint_never_measured_starts_from_the_conservative_timeout_within_the_ceiling() {
        let health = Health::default();
        assert_eq!(health.rto(CEILING), INITIAL_RTO);
        assert_eq!(health.rto(ms(100)), ms(100), "the ceiling wins");
    }

    #[test]
    fn the_estimate_follows_rfc_6298() {
        let health = Health::default();
        health.answered(Some(ms(100)));
        // SRTT = 100, RTTVAR = 50: RTO = 100 + 4·50.
        assert_eq!(health.rto(Duration::from_secs(5)), ms(300));
        health.answered(Some(ms(20)));
        // RTTVAR = 3/4·50 + 1/4·|100 − 20| = 57.5; SRTT = 7/8·100 + 1/8·20 = 90.
        assert_eq!(health.rto(Duration::from_secs(5)), ms(90 + 230));
        assert_eq!(
            Rtt::after(None, ms(8)),
            Rtt {
                srtt: ms(8),
                rttvar: ms(4)
            }
        );
    }

    #[test]
    fn a_near_peer_gets_the_floor_and_a_far_one_its_estimate() {
        let near = Health::default();
        for _ in 0..20 {
            near.answered(Some(Duration::from_micros(300)));
        }
        assert_eq!(near.rto(CEILING), RTO_FLOOR);
        let far = Health::default();
        for _ in 0..40 {
            far.answered(Some(ms(80)));
        }
        let rto = far.rto(CEILING);
        assert!(rto > ms(80) && rto < ms(90), "{rto:?}");
    }

    #[test]
    fn timeouts_double_the_wait_up_to_the_ceiling_and_a_measured_answer_resets_it() {
        let health = Health::default();
        for _ in 0..20 {
            health.answered(Some(ms(1)));
        }
        let waits: Vec<Duration> = (0..7)
            .map(|_| {
                let wait = health.rto(CEILING);
                health.timed_out();
                wait
            })
            .collect();
        assert_eq!(
            waits,
            [1, 2, 4, 8, 16, 32, 64].map(|n| (RTO_FLOOR * n).min(CEILING))
        );
        health.answered(None);
        assert_eq!(health.rto(CEILING), CEILING, "an untimed answer keeps it");
        health.answered(Some(ms(1)));
        assert_eq!(health.rto(CEILING), RTO_FLOOR);
    }

    #[test]
    fn three_failures_mark_down_once_an_answer_marks_up_and_one_probe_is_claimed() {
        let health = Health::default();
        assert!(!health.claim_probe(), "no probe for an endpoint that is up");
        assert_eq!(health.failed(), Verdict::Up);
        assert!(health.is_failing() && health.is_up());
        assert_eq!(health.failed(), Verdict::Up);
        assert_eq!(health.failed(), Verdict::NowDown);
        assert_eq!(health.failed(), Verdict::StillDown);
        assert!(!health.is_up());
        assert!(health.claim_probe());
        assert!(!health.claim_probe(), "one probe at a time");
        assert!(health.answered(None), "it was down");
        health.probe_ended();
        assert!(health.is_up() && !health.is_failing());
        assert!(!health.answered(None));
    }
}
