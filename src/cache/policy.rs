//! What a reply is worth to the cache (RFC 2308, RFC 8767, RFC 9520): how long it may be
//! served, or that it must not be stored at all.
//!
//! It owns those rules, and only decides: it reads a reply's bytes and the configured bounds,
//! and holds no entry (the table is `store`'s, every write goes through
//! [`Cache`](super::Cache)). The TTLs it reads are the reply's own, so a route that writes
//! short TTLs into what it synthesizes (a partial gathered answer) makes it short-lived here.

use std::time::Duration;

use crate::config::CacheConfig;
use crate::wire::{self, RCODE_NOERROR, RCODE_NXDOMAIN, RCODE_SERVFAIL, Section, TYPE_SOA};

/// Two root names and five 32-bit fields.
const MIN_SOA_RDATA: usize = 22;

/// How long a failure is remembered the first time: RFC 9520 asks resolvers to remember a
/// failure for at least 1 s so a broken upstream is not hammered by every retry.
pub const FAILURE_TTL_FIRST: Duration = Duration::from_secs(1);

/// How long a failure is remembered at most, doubling from [`FAILURE_TTL_FIRST`] while the
/// same question keeps failing: a dead name costs one upstream query per 5 s, and a restarted
/// CoreDNS is still seen within seconds.
pub const FAILURE_TTL_MAX: Duration = Duration::from_secs(5);

/// The class of a reply as the cache sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Worth {
    /// An answer or a negative answer (NXDOMAIN/NODATA with an SOA): fresh for this long.
    Answer(Duration),
    /// SERVFAIL (from the upstream or meshdns's own): remembered briefly, never served stale,
    /// never replacing an answer that can still be served stale.
    Failure,
}

/// The rules of the cache's "Cache" section for one reply: TC → not stored; NOERROR with
/// answers → the smallest answer TTL, capped by `MESHDNS_CACHE_MAX_TTL`; NXDOMAIN or NODATA
/// (after a CNAME chain too) → min(SOA TTL, SOA MINIMUM, the chain's TTLs) capped by
/// `MESHDNS_CACHE_NEGATIVE_TTL`, not stored without an SOA;
/// SERVFAIL → a failure; any other rcode, an extended rcode, a TTL of 0, or bytes that do not
/// walk → not stored (`None`).
pub(super) fn worth(reply: &[u8], config: &CacheConfig) -> Option<Worth> {
    if !wire::is_response(reply)
        || wire::is_truncated(reply)
        || wire::question_count(reply)? != 1
        || wire::opt(reply)?.is_some_and(|opt| opt.extended_rcode != 0)
    {
        return None;
    }
    let mut min_answer: Option<u32> = None;
    let mut negative: Option<u32> = None;
    wire::for_each_record(reply, |record| match (record.section, record.rtype) {
        (Section::Answer, _) => {
            let ttl = wire::ttl_value(record.ttl.ttl);
            min_answer = Some(min_answer.map_or(ttl, |m| m.min(ttl)));
        }
        (Section::Authority, TYPE_SOA) if record.rdata_len >= MIN_SOA_RDATA => {
            let end = record.end();
            let minimum = reply
                .get(end - 4..end)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            let ttl = wire::ttl_value(record.ttl.ttl).min(wire::ttl_value(minimum));
            negative = Some(negative.map_or(ttl, |n| n.min(ttl)));
        }
        _ => {}
    })?;
    let secs = |s: u32| Duration::from_secs(u64::from(s));
    let ttl = match (wire::rcode(reply)?, min_answer, negative) {
        (RCODE_NOERROR, Some(ttl), None) => secs(ttl).min(config.max_ttl),
        // Negative, also at the end of a CNAME chain (RFC 2308 §2.2: NXDOMAIN, or NODATA with
        // the SOA beside the CNAME): held no longer than the chain, nor than the negative cap.
        (RCODE_NOERROR | RCODE_NXDOMAIN, chain, Some(negative)) => {
            secs(chain.map_or(negative, |chain| chain.min(negative))).min(config.negative_ttl)
        }
        (RCODE_SERVFAIL, ..) => return Some(Worth::Failure),
        _ => return None,
    };
    (!ttl.is_zero()).then_some(Worth::Answer(ttl))
}

/// Whether `reply` answers its question (NOERROR or NXDOMAIN, whole): the upstream's word on
/// it, which replaces what was known before even when the cache does not keep it.
pub(super) fn is_answer(reply: &[u8]) -> bool {
    !wire::is_truncated(reply) && matches!(wire::rcode(reply), Some(RCODE_NOERROR | RCODE_NXDOMAIN))
}

/// A reply that says resolution failed rather than answering: SERVFAIL, or bytes without a
/// header. The cache then serves stale, or remembers the failure.
pub(super) fn is_failure(reply: &[u8]) -> bool {
    wire::rcode(reply).is_none_or(|rcode| rcode == RCODE_SERVFAIL)
}

/// How long the `failures`-th failure in a row is remembered: 1 s, 2 s, 4 s, then 5 s.
pub(super) fn failure_ttl(failures: u32) -> Duration {
    FAILURE_TTL_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(FAILURE_TTL_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_remembered_for_one_second_doubling_up_to_five() {
        let ttls: Vec<u64> = (1..=5).map(|n| failure_ttl(n).as_secs()).collect();
        assert_eq!(ttls, [1, 2, 4, 5, 5]);
        assert_eq!(failure_ttl(u32::MAX), FAILURE_TTL_MAX);
    }
}
