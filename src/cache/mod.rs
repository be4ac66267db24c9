//! The answer cache: keys, TTL policy, negative caching, serve-stale, prefetch and in-flight
//! sharing, for every route (pass-through, cluster zones, gathered answers and their legs).
//!
//! How the query path uses it:
//! 1. [`CacheKey::from_request`] on the client's bytes (no parse; `None` → don't cache).
//! 2. [`Cache::lookup`] → [`Lookup::Fresh`] is the reply, ready but for the cut to the client's
//!    UDP size (the caller still fits it, as for any reply). `refresh: true` (once per entry)
//!    asks the caller to re-query in the background and `insert` the answer (prefetch).
//! 3. On [`Lookup::Miss`]: [`Cache::flight`]. A [`Flight::Leader`] asks upstream,
//!    [`Cache::insert`]s the complete reply (before any cut: a cut one has TC and is refused),
//!    then [`FlightLeader::finish`]es with it. A [`Flight::Follower`] awaits
//!    [`FlightFollower::wait`]; `None` means the leader vanished: ask for a flight again.
//! 4. When the upstream failed (timeout, SERVFAIL, network): [`Cache::stale`] (RFC 8767) before
//!    answering SERVFAIL.
//! 5. Gathered answers are stored as merged under the client's key (a partial one carries
//!    TTLs already capped by the merge, so it expires soon). Each leg's reply is stored under
//!    [`CacheKey::for_leg`], and a failed leg is filled from [`Cache::last_good`].
//!
//! Promises: a hit copies the stored wire bytes once (the only allocation) and patches the ID,
//! the RD bit, the question (the client's spelling) and every TTL (counting down from when the
//! reply was received; OPT untouched). Replies never carry a TTL above the entry's capped TTL.
//! At most `MESHDNS_CACHE_SIZE` entries and `size × BYTES_PER_ENTRY` reply bytes are held,
//! whatever the traffic; size 0 turns caching off (lookups miss, inserts do nothing; in-flight
//! sharing still works). Locking: one `std::sync::Mutex` around the table, held only for the
//! index lookup and list bookkeeping; bytes are copied and patched outside it.
//!
//! Counters for `/metrics` (monotonic, read with [`Cache::stats`]): hits (fresh replies served,
//! including fresh ones through `stale`/`last_good`), misses (lookups that found nothing
//! fresh), stale served (expired entries served), evictions (entries dropped to stay within the
//! bounds; replacing a key's own entry is not one). [`Cache::len`] is the entry gauge. Each is
//! also recorded in [`metrics`] where it happens (the process-wide `meshdns_cache_*` families).

mod flight;
mod key;
mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::CacheConfig;
use crate::metrics;
use crate::wire::{self, RCODE_NOERROR, RCODE_NXDOMAIN, RCODE_SERVFAIL, Section, TYPE_SOA};

pub use flight::{Flight, FlightFollower, FlightLeader};
pub use key::{CacheKey, KeyFlags};

use flight::Flights;
use store::{Entry, Store};

/// How long a SERVFAIL is cached. RFC 9520 asks resolvers to remember a failure for at least
/// 1 s so a broken upstream is not hammered by every retry; 2 s absorbs a client's immediate
/// retries and a search-list walk, and still sees a restarted CoreDNS almost at once. A
/// SERVFAIL never replaces an answer that can still be served stale.
pub const SERVFAIL_TTL: Duration = Duration::from_secs(2);

/// The TTL of a stale reply, at most (RFC 8767 §4 recommends 30 s).
pub const STALE_TTL: u32 = 30;

/// An entry hit at least this often is refreshed shortly before it expires.
pub const PREFETCH_MIN_HITS: u32 = 3;

/// "Shortly before": within the last 1/PREFETCH_WINDOW of its TTL.
pub const PREFETCH_WINDOW: u32 = 10;

/// The reply-byte budget per entry of `MESHDNS_CACHE_SIZE`: typical replies are ~100 bytes, a
/// large merged SRV set a few KiB; this keeps `size` huge replies from costing `size × 64 KiB`.
pub const BYTES_PER_ENTRY: usize = 1024;

/// Two root names and five 32-bit fields.
const MIN_SOA_RDATA: usize = 22;

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A fresh reply for this request. `refresh`: the entry is popular and about to expire;
    /// this caller (only this one) should re-query in the background and insert the answer.
    Fresh { reply: Vec<u8>, refresh: bool },
    /// Nothing fresh: ask upstream (through [`Cache::flight`]).
    Miss,
}

/// A snapshot of the counters (monotonic) and the entry gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub stale_served: u64,
    pub evictions: u64,
    pub entries: usize,
}

/// The cache shared by all listeners (`Arc<Cache>`).
#[derive(Debug)]
pub struct Cache {
    config: CacheConfig,
    store: Mutex<Store>,
    flights: Arc<Flights>,
    hits: AtomicU64,
    misses: AtomicU64,
    stale_served: AtomicU64,
    evictions: AtomicU64,
}

/// How `insert` classified a reply.
struct Policy {
    ttl: Duration,
    failure: bool,
}

impl Cache {
    pub fn new(config: &CacheConfig) -> Self {
        let budget = if config.size == 0 {
            0
        } else {
            config
                .size
                .saturating_mul(BYTES_PER_ENTRY)
                .max(wire::MAX_MESSAGE)
        };
        Self {
            config: config.clone(),
            store: Mutex::new(Store::new(config.size, budget, config.serve_stale)),
            flights: Arc::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stale_served: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // Nothing under the lock can panic on input; if something did, the table is still
        // consistent enough to serve from.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh reply for `request` (whose key is `key`), patched for it; see [`Lookup`].
    pub fn lookup(&self, key: &CacheKey, request: &[u8], now: Instant) -> Lookup {
        let found = {
            let mut store = self.lock();
            store.get(key).and_then(|slot| {
                let entry = store.entry_mut(slot);
                if !entry.is_fresh(now) {
                    return None;
                }
                entry.hits = entry.hits.saturating_add(1);
                let age = entry.age(now);
                let remaining = entry.ttl.saturating_sub(age);
                let refresh = !entry.failure
                    && !entry.refresh_claimed
                    && entry.hits >= PREFETCH_MIN_HITS
                    && remaining <= entry.ttl / PREFETCH_WINDOW;
                entry.refresh_claimed |= refresh;
                let bytes = Arc::clone(&entry.bytes);
                store.touch(slot);
                Some((bytes, age, refresh))
            })
        };
        let fresh = found.and_then(|(stored, age, refresh)| {
            served(&stored, Some(request), age, true).map(|reply| (reply, refresh))
        });
        let Some((reply, refresh)) = fresh else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            metrics::cache_miss();
            return Lookup::Miss;
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        metrics::cache_hit();
        Lookup::Fresh { reply, refresh }
    }

    /// For when the upstream failed: the entry for `key` if it is fresh or expired less than
    /// `MESHDNS_SERVE_STALE` ago, patched for `request`; a stale one carries TTLs of at most
    /// [`STALE_TTL`]. A cached SERVFAIL is never served this way.
    pub fn stale(&self, key: &CacheKey, request: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.servable(key, Some(request), now)
    }

    /// Whether [`stale`](Self::stale) would serve an expired entry for `key` now (counts
    /// nothing): the query path then gives the upstream less time (RFC 8767 §5).
    pub fn has_stale(&self, key: &CacheKey, now: Instant) -> bool {
        let store = self.lock();
        store
            .get(key)
            .map(|slot| store.entry(slot))
            .is_some_and(|entry| {
                !entry.failure
                    && !entry.is_fresh(now)
                    && entry.is_servable(now, self.config.serve_stale)
            })
    }

    /// A leg's last good reply (fresh, or stale within `MESHDNS_SERVE_STALE`), as stored but for
    /// its TTLs (counted down, or at most [`STALE_TTL`] when expired). For filling a failed
    /// leg of a gathered answer.
    pub fn last_good(&self, key: &CacheKey, now: Instant) -> Option<Vec<u8>> {
        self.servable(key, None, now)
    }

    fn servable(&self, key: &CacheKey, request: Option<&[u8]>, now: Instant) -> Option<Vec<u8>> {
        let (stored, age, fresh) = {
            let mut store = self.lock();
            let slot = store.get(key)?;
            let entry = store.entry(slot);
            if entry.failure || !entry.is_servable(now, self.config.serve_stale) {
                return None;
            }
            let found = (
                Arc::clone(&entry.bytes),
                entry.age(now),
                entry.is_fresh(now),
            );
            store.touch(slot);
            found
        };
        let reply = served(&stored, request, age, fresh)?;
        let counter = if fresh {
            metrics::cache_hit();
            &self.hits
        } else {
            metrics::cache_stale_served();
            &self.stale_served
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Some(reply)
    }

    /// Caches an upstream reply (or a merged one) received at `now`, if the rules allow:
    /// TC → no; NOERROR with answers → the smallest answer TTL, capped by
    /// `MESHDNS_CACHE_MAX_TTL`; NXDOMAIN or NODATA → min(SOA TTL, SOA MINIMUM) (RFC 2308) capped
    /// by `MESHDNS_CACHE_NEGATIVE_TTL`, not at all without an SOA; SERVFAIL → [`SERVFAIL_TTL`]
    /// unless a servable answer is already there; any other rcode, TTL 0, or bytes that do not
    /// walk → no. Every TTL in the stored copy is cut to the entry's TTL.
    pub fn insert(&self, key: &CacheKey, reply: &[u8], now: Instant) {
        self.store_reply(key, reply, now);
    }

    /// [`insert`](Self::insert) for a reply that is also going out to a client now: when it is
    /// cached, its TTLs are cut in place to the cached ones, so the first client holds the
    /// answer no longer than a client served from the cache would (DESIGN.md, "Cache").
    pub fn insert_and_cap(&self, key: &CacheKey, reply: &mut [u8], now: Instant) {
        if let Some(stored) = self.store_reply(key, reply, now)
            && stored.len() == reply.len()
        {
            reply.copy_from_slice(&stored);
        }
    }

    /// Stores the reply if the rules allow, and returns the stored bytes (TTLs capped).
    fn store_reply(&self, key: &CacheKey, reply: &[u8], now: Instant) -> Option<Arc<[u8]>> {
        if self.config.size == 0 {
            return None;
        }
        if !wire::first_question(reply).is_some_and(|question| key.is_question(question)) {
            return None;
        }
        let policy = self.policy(reply)?;
        let ttl = policy.ttl;
        if ttl.is_zero() {
            return None;
        }
        let ttl_secs = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
        let mut bytes = reply.to_vec();
        rewrite_ttls(reply, &mut bytes, |stored| stored.min(ttl_secs));
        let bytes: Arc<[u8]> = Arc::from(bytes);
        let entry = Entry {
            bytes: Arc::clone(&bytes),
            stored: now,
            ttl,
            failure: policy.failure,
            hits: 0,
            refresh_claimed: false,
        };
        let mut store = self.lock();
        if policy.failure
            && store
                .get(key)
                .map(|slot| store.entry(slot))
                .is_some_and(|old| !old.failure && old.is_servable(now, self.config.serve_stale))
        {
            return None;
        }
        if let Some(evicted) = store.insert(key, entry, now) {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
            metrics::cache_evicted(evicted);
        }
        metrics::set_cache_entries(store.len());
        Some(bytes)
    }

    fn policy(&self, reply: &[u8]) -> Option<Policy> {
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
                min_answer = Some(min_answer.map_or(record.ttl.ttl, |m| m.min(record.ttl.ttl)));
            }
            (Section::Authority, TYPE_SOA) if record.rdata_len >= MIN_SOA_RDATA => {
                let end = record.rdata_offset + record.rdata_len;
                let minimum = reply
                    .get(end - 4..end)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let ttl = record.ttl.ttl.min(minimum);
                negative = Some(negative.map_or(ttl, |n| n.min(ttl)));
            }
            _ => {}
        })?;
        let secs = |s: u32| Duration::from_secs(u64::from(s));
        let (ttl, failure) = match (wire::rcode(reply)?, min_answer) {
            (RCODE_NOERROR, Some(ttl)) => (secs(ttl).min(self.config.max_ttl), false),
            (RCODE_NOERROR | RCODE_NXDOMAIN, _) => {
                (secs(negative?).min(self.config.negative_ttl), false)
            }
            (RCODE_SERVFAIL, _) => (SERVFAIL_TTL.min(self.config.max_ttl), true),
            _ => return None,
        };
        Some(Policy { ttl, failure })
    }

    /// Joins the flight for `key`: the first miss leads (asks upstream), the others follow.
    /// The `flight` module says what happens when a leader is lost.
    pub fn flight(&self, key: &CacheKey) -> Flight {
        self.flights.join(key)
    }

    /// Entries held (the `cache_entries` gauge), expired ones kept for serve-stale included.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            stale_served: self.stale_served.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            entries: self.len(),
        }
    }
}

/// The stored reply as served: copied once, header and question patched for `request` (if
/// any), TTLs counted down by `age` (fresh) or cut to [`STALE_TTL`] (stale).
fn served(stored: &[u8], request: Option<&[u8]>, age: Duration, fresh: bool) -> Option<Vec<u8>> {
    let mut reply = stored.to_vec();
    if let Some(request) = request
        && !patch_header_and_question(&mut reply, request)
    {
        return None;
    }
    let age = u32::try_from(age.as_secs()).unwrap_or(u32::MAX);
    if fresh {
        rewrite_ttls(stored, &mut reply, |ttl| ttl.saturating_sub(age));
    } else {
        rewrite_ttls(stored, &mut reply, |ttl| ttl.min(STALE_TTL));
    }
    Some(reply)
}

/// Gives `reply` the request's ID and RD bit, and the request's question bytes (its spelling)
/// over the stored question. `false` when the questions differ beyond letter case.
fn patch_header_and_question(reply: &mut [u8], request: &[u8]) -> bool {
    let (Some(asked), Some(id)) = (wire::first_question(request), wire::id(request)) else {
        return false;
    };
    let Some(stored) = reply.get_mut(wire::HEADER_LEN..wire::HEADER_LEN + asked.len()) else {
        return false;
    };
    if !wire::same_question(stored, asked) {
        return false;
    }
    stored.copy_from_slice(asked);
    wire::set_id(reply, id);
    wire::copy_recursion_desired(reply, request);
    true
}

/// Rewrites every TTL (OPT excluded) of `target`, a copy of `source`, as `f(ttl)`. Walking the
/// source while writing the copy needs no list of offsets, so nothing is allocated.
fn rewrite_ttls(source: &[u8], target: &mut [u8], f: impl Fn(u32) -> u32) {
    let _ = wire::for_each_record(source, |record| {
        if record.rtype != wire::TYPE_OPT {
            wire::set_ttl(target, record.ttl, f(record.ttl.ttl));
        }
    });
}

#[cfg(test)]
mod tests;
