//! Endpoints given by host name (`b=dns-b.example.net:30053`): a cloud load balancer's name or
//! a name the platform team keeps. Each name is resolved through the local upstreams (A and
//! AAAA; every address is an endpoint) by a task owned by its group (it ends with the group),
//! re-resolved when the records' TTL runs out (clamped to [`MIN_TTL`] … [`MAX_TTL`]), and its
//! last good addresses are kept when a resolution fails; a failed resolution is retried after
//! [`MIN_TTL`], doubling up to [`MAX_RETRY`], so a name that resolves again is followed within
//! [`MAX_RETRY`]. A name that does not resolve yet is not fatal: its group
//! simply has no address from it, and its legs fail, visibly (a warning at most once per
//! `log_limit::LOG_INTERVAL`, and
//! `meshdns_endpoint_resolutions_total{result="failed"}`).
//!
//! It owns the resolution of those names and the addresses last found; the group turns the
//! addresses into endpoints (refusing meshdns's own) and owns the task that keeps them fresh.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use prometheus::IntCounter;
use tokio::time::Instant;

use super::Upstream;
use super::log_limit::LogLimit;
use crate::wire;

/// Re-resolved no sooner than this, however short the TTL.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(5);

/// Re-resolved at least this often, however long the TTL (a moved load balancer is followed
/// within five minutes).
pub(crate) const MAX_TTL: Duration = Duration::from_secs(300);

/// The longest wait before a failed resolution is tried again, however long it has been
/// failing: a record that is fixed is followed within this time (plus the resolution).
pub const MAX_RETRY: Duration = Duration::from_secs(15);

/// How long one resolution may take.
const RESOLUTION_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a name gave no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResolutionError {
    #[error("the local upstreams did not answer: {0}")]
    NoAnswer(String),
    #[error("the local upstreams answered {0}")]
    Rcode(ResponseCode),
    #[error("the name has no A or AAAA record")]
    NoAddress,
}

/// The counters of one group's resolutions, by result.
#[derive(Debug, Clone)]
pub(crate) struct ResolutionCounters {
    pub(crate) ok: IntCounter,
    pub(crate) failed: IntCounter,
}

/// The addresses `host` has now and how long they may be used (the smallest TTL, clamped),
/// asked of `local` as A and AAAA at once. When one of the two questions fails, the addresses
/// of that family in `last` (the last good ones) stay, and the result holds for [`MIN_TTL`]
/// only: one failed question is no news that the name lost that family.
pub(crate) async fn resolve(
    local: &Upstream,
    host: &Name,
    port: u16,
    last: &[SocketAddr],
) -> Result<(Vec<SocketAddr>, Duration), ResolutionError> {
    let deadline = Instant::now() + RESOLUTION_TIMEOUT;
    let (v4, v6) = tokio::join!(
        ask(local, host, RecordType::A, deadline),
        ask(local, host, RecordType::AAAA, deadline)
    );
    let mut records = Vec::new();
    let mut kept = Vec::new();
    let mut first_error = None;
    for (answer, ipv4) in [(v4, true), (v6, false)] {
        match answer {
            Ok(found) => records.extend(found),
            Err(error) => {
                kept.extend(last.iter().filter(|addr| addr.is_ipv4() == ipv4));
                first_error = first_error.or(Some(error));
            }
        }
    }
    let Some(ttl) = records.iter().map(|(_, ttl)| wire::ttl_value(*ttl)).min() else {
        return Err(first_error.unwrap_or(ResolutionError::NoAddress));
    };
    let ttl = match first_error {
        Some(_) => MIN_TTL,
        None => Duration::from_secs(u64::from(ttl)).clamp(MIN_TTL, MAX_TTL),
    };
    let addrs = (records.into_iter()).map(|(ip, _)| SocketAddr::new(ip, port));
    Ok((addrs.chain(kept).collect(), ttl))
}

/// The addresses of one type, each with its TTL; a NODATA answer is an empty list.
async fn ask(
    local: &Upstream,
    host: &Name,
    rtype: RecordType,
    deadline: Instant,
) -> Result<Vec<(IpAddr, u32)>, ResolutionError> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(host.clone(), rtype));
    query.set_edns(Edns::new());
    let bytes = query.to_vec().map_err(no_answer)?;
    let answered = local.exchange(&bytes, deadline).await.map_err(no_answer)?;
    let reply = Message::from_vec(&answered.bytes).map_err(no_answer)?;
    if reply.response_code != ResponseCode::NoError {
        return Err(ResolutionError::Rcode(reply.response_code));
    }
    let addresses = reply
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some((IpAddr::V4(a.0), record.ttl)),
            RData::AAAA(aaaa) => Some((IpAddr::V6(aaaa.0), record.ttl)),
            _ => None,
        });
    Ok(addresses.collect())
}

fn no_answer(error: impl ToString) -> ResolutionError {
    ResolutionError::NoAnswer(error.to_string())
}

/// Keeps name number `index` of `group` resolved for as long as the group lives: resolves at
/// once, then again when the TTL runs out; after a failure, again after [`MIN_TTL`], doubling
/// up to [`MAX_RETRY`] while it keeps failing (the last good addresses stay in use). Holds the
/// group only while it writes to it; the group's owner ends the task when the group goes.
pub(crate) async fn keep_resolved(
    group: Weak<Upstream>,
    local: Arc<Upstream>,
    index: usize,
    host: Name,
    port: u16,
    counters: ResolutionCounters,
) {
    let log = LogLimit::default();
    let mut retry = MIN_TTL;
    let mut last = Vec::new();
    loop {
        let wait = match resolve(&local, &host, port, &last).await {
            Ok((addrs, ttl)) => {
                counters.ok.inc();
                retry = MIN_TTL;
                let Some(group) = group.upgrade() else { return };
                last.clone_from(&addrs);
                group.set_resolved(index, addrs);
                ttl
            }
            Err(error) => {
                counters.failed.inc();
                let Some(group) = group.upgrade() else { return };
                if let Some(suppressed) = log.check() {
                    tracing::warn!(upstream = group.name(), host = %host, %error, suppressed, "endpoint name did not resolve; keeping its last addresses");
                }
                let wait = retry;
                retry = (retry * 2).min(MAX_RETRY);
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}
