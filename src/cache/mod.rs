//! The answer cache, for every route (pass-through, cluster zones, gathered answers and their
//! legs): keys, TTL policy, negative caching, serve-stale with failure recheck (RFC 8767),
//! remembered failures (RFC 9520), prefetch and in-flight sharing.
//!
//! The query path uses two doors:
//! - [`Cache::lookup`], synchronous, for the cache-hit path on the listener loop (a hit it
//!   marks for prefetch comes back through [`Cache::refresh`], with the caller's resolution);
//! - [`Cache::get_or_resolve`], the one way a miss is answered: it runs lookup → stale at once
//!   during an outage → flight (identical misses share one upstream exchange) → resolution →
//!   insert (the first client's TTLs cut to the cached ones) → stale or a remembered failure
//!   when the upstream failed. No caller repeats that protocol.
//!
//! The cache never asks upstream and knows no route: a resolution is a future its caller
//! hands in, and a key's target is an identity ([`TargetId`]) the snapshot gives out. The
//! reload only moves it on ([`Cache::advance`]) and resizes it ([`Cache::reconfigure`]).
//!
//! A gathered answer as a whole is a miss like any other; its legs, which are always asked,
//! reach the cache through the gathered route's door, [`GatherDoor`] (a leg's answer kept, a
//! failed leg filled from its last good answer, a gathered answer known wrong dropped). No
//! other module writes into the cache or reads a leg's entry: the policy of what is stored,
//! for how long and what is stale is decided here, for every route.
//!
//! Promises: a hit copies the stored wire bytes once and patches the ID, the RD and CD bits,
//! the AD bit (cleared for a client that set neither AD nor DO, RFC 6840 §5.8), the question
//! (the client's spelling) and every TTL (counting down from when the reply was received; OPT
//! untouched). Replies never carry a TTL above the entry's capped TTL. Stored and
//! shared copies carry no per-client EDNS option: NSID reaches only the client whose query
//! produced it, and the hop-by-hop ones (COOKIE, PADDING, TCP-KEEPALIVE), which pass-through
//! already strips, none. At most `MESHDNS_CACHE_SIZE` entries and
//! `size × BYTES_PER_ENTRY` reply bytes are held, whatever the traffic; size 0 turns caching
//! off (in-flight sharing still works). Background work (prefetch, refreshes, exchanges that
//! outlive their client) goes through the bounded [`Background`] set. Locking: one
//! `std::sync::Mutex` around the table and the configuration it is read by, held only for
//! index lookups and list bookkeeping; bytes are copied and patched outside it.
//!
//! Reloads: a client's key carries the [`TargetId`] of its route's target, which a reload
//! changes only for the targets it changes: the entries of those are never found again (and
//! age out of the table like any unused entry), the others stay, and [`Cache::advance`] looks
//! at no entry. Every write (an answer, a remembered failure, a failed refresh's mark) also
//! carries the [`Generation`] of the configuration its work started under, and is dropped when
//! the cache has moved on to a newer one; in-flight sharing is per generation too: a miss never
//! waits for an exchange started under an older configuration. So after a reload nothing of a
//! changed route — a slow answer, a straggling leg, a refresh, a failure — is cached, served or
//! inherited.

mod flight;
mod gathered;
mod key;
mod policy;
mod serve;
mod store;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::time::{Instant, timeout, timeout_at};

use crate::background::Background;
use crate::config::CacheConfig;
use crate::wire;

pub(crate) use gathered::GatherDoor;
pub(crate) use key::{CacheKey, KeyFlags, TargetId, may_share};
#[cfg(any(test, feature = "testing"))]
pub use policy::{FAILURE_TTL_FIRST, FAILURE_TTL_MAX};
#[cfg(any(test, feature = "testing"))]
pub use serve::STALE_TTL;

use flight::{Flight, FlightLeader, Flights};
use policy::{Worth, failure_ttl, is_failure};
use serve::{served, shareable};
use store::{Entry, Store};

/// An entry hit at least this often is refreshed shortly before it expires.
pub const PREFETCH_MIN_HITS: u32 = 3;

/// "Shortly before": within the last 1/PREFETCH_WINDOW of its TTL.
pub(crate) const PREFETCH_WINDOW: u32 = 10;

/// After a failed refresh, how long stale answers are served at once without asking the
/// upstream again (RFC 8767 §5's failure recheck timer; 30 s is its recommendation).
pub const RECHECK_PERIOD: Duration = Duration::from_secs(30);

/// The reply-byte budget per entry of `MESHDNS_CACHE_SIZE`: typical replies are ~100 bytes, a
/// large merged SRV set a few KiB; this keeps `size` huge replies from costing `size × 64 KiB`.
pub(crate) const BYTES_PER_ENTRY: usize = 1024;

/// The cache's series (`meshdns_cache_*`), built by the metrics module.
#[derive(Debug, Clone)]
pub(crate) struct CacheMetrics {
    /// Replies served from a fresh entry (remembered failures included).
    pub(crate) hits: IntCounter,
    /// Lookups that found nothing fresh.
    pub(crate) misses: IntCounter,
    /// Expired answers served because the upstream failed or is being rechecked.
    pub(crate) stale_served: IntCounter,
    pub(crate) entries: IntGauge,
    /// Entries dropped to stay within the bounds (replacing a key's own entry is not one).
    pub(crate) evictions: IntCounter,
}

/// The number of an applied configuration (each reload applies the next one). Work carries the
/// generation it started under; the cache takes its writes only while it has not moved on to a
/// newer one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Generation(u64);

impl Generation {
    /// The generation after this one.
    pub(crate) fn next(self) -> Generation {
        Generation(self.0.saturating_add(1))
    }
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A fresh reply for this request. `refresh`: the entry is popular and about to expire;
    /// this caller (only this one) should have it refreshed ([`Cache::refresh`]).
    Fresh { reply: Vec<u8>, refresh: bool },
    /// Nothing fresh.
    Miss,
}

/// What a miss needs besides its resolution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Miss {
    /// The query's deadline: no waiting for a shared exchange beyond it.
    pub(crate) deadline: Instant,
    /// How long the client waits for the upstream when a stale answer is at hand (RFC 8767
    /// §5's client response timer); the exchange then goes on in the background.
    pub(crate) client_timer: Duration,
    /// The route's upstream failed and has not answered since: a stale answer is served at
    /// once (and refreshed in the background), so an outage costs no client a timeout.
    pub(crate) upstream_failing: bool,
    /// The configuration the query runs on: it shares and writes only within it.
    pub(crate) generation: Generation,
}

/// A resolution: the future that asks upstream and returns the complete reply (SERVFAIL when
/// it failed). Boxed so that it can move into the background half-way through.
type Resolution = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// The cache shared by all listeners (`Arc<Cache>`).
#[derive(Debug)]
pub(crate) struct Cache {
    /// The table and the configuration it is read by, under one lock.
    store: Mutex<Store>,
    flights: Arc<Flights>,
    metrics: CacheMetrics,
    background: Arc<Background>,
}

impl Cache {
    pub(crate) fn new(
        config: &CacheConfig,
        metrics: CacheMetrics,
        background: Arc<Background>,
    ) -> Self {
        Self {
            store: Mutex::new(Store::new(config, byte_budget(config.size))),
            flights: Arc::default(),
            metrics,
            background,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic aborts the process (docs/design.md, "Panics"): nothing poisons the lock, and
        // this takes it without an unwrap.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The configuration now in force (a reload may change it between two calls).
    fn config(&self) -> CacheConfig {
        self.lock().config().clone()
    }

    /// The bytes and age of the entry for `key` if `accept` takes it, given the entry, its age,
    /// the serve-stale window and the cache's generation under the lock; a taken entry counts
    /// as used (it moves to the front). `accept` sees the entry under the lock, so it must be
    /// quick.
    fn take_entry<T>(
        &self,
        key: &CacheKey,
        now: Instant,
        accept: impl FnOnce(&mut Entry, Duration, Duration, Generation) -> Option<T>,
    ) -> Option<(Arc<[u8]>, Duration, T)> {
        let mut store = self.lock();
        let slot = store.get(key)?;
        let (serve_stale, generation) = (store.config().serve_stale, store.generation());
        let entry = store.entry_mut(slot);
        let age = entry.age(now);
        let accepted = accept(entry, age, serve_stale, generation)?;
        let bytes = Arc::clone(&entry.bytes);
        store.touch(slot);
        Some((bytes, age, accepted))
    }

    /// A fresh reply for `request` (whose key is `key`), patched for it and written into
    /// `reply` (a buffer whose room is reused; dropped on a miss); see [`Lookup`].
    pub(crate) fn lookup(
        &self,
        key: &CacheKey,
        request: &[u8],
        now: Instant,
        reply: Vec<u8>,
    ) -> Lookup {
        match self.fresh(key, request, now, reply) {
            Some((reply, refresh)) => {
                self.metrics.hits.inc();
                Lookup::Fresh { reply, refresh }
            }
            None => {
                self.metrics.misses.inc();
                Lookup::Miss
            }
        }
    }

    /// [`lookup`](Self::lookup) without counting.
    fn fresh(
        &self,
        key: &CacheKey,
        request: &[u8],
        now: Instant,
        reply: Vec<u8>,
    ) -> Option<(Vec<u8>, bool)> {
        let (stored, age, refresh) = self.take_entry(key, now, |entry, age, _, _| {
            if age >= entry.ttl {
                return None;
            }
            entry.hits = entry.hits.saturating_add(1);
            let remaining = entry.ttl - age;
            let refresh = !entry.is_failure()
                && !entry.refresh_claimed
                && entry.hits >= PREFETCH_MIN_HITS
                && remaining <= entry.ttl / PREFETCH_WINDOW;
            entry.refresh_claimed |= refresh;
            Some(refresh)
        })?;
        served(&stored, key, Some(request), age, true, reply).map(|reply| (reply, refresh))
    }

    /// Answers a miss for `request` (whose key is `key`), asking upstream through `resolve`
    /// only when it must — the whole protocol of DESIGN's "Cache" section:
    ///
    /// 1. a fresh entry (it may have arrived since the caller's own [`lookup`](Self::lookup),
    ///    which counted the miss) is served;
    /// 2. a stale entry is served at once while its upstream is failing or its last refresh
    ///    failed less than [`RECHECK_PERIOD`] ago; once per recheck period it is refreshed
    ///    in the background (de-duplicated by the flight);
    /// 3. identical misses in flight share one exchange: the first leads, the others wait
    ///    (until `miss.deadline`; with a stale entry at hand, `miss.client_timer` at most,
    ///    then they serve it) for its reply, patched for them. A miss never waits for an
    ///    exchange of an older generation than its own: it leads a new one;
    /// 4. the leader resolves. With a stale entry at hand it waits at most
    ///    `miss.client_timer`, then serves stale and lets the exchange finish in the
    ///    background. A reply is stored (its TTLs, and those of the leader's copy, cut to the
    ///    cached ones); a failure is answered stale when it can be, else remembered for a
    ///    second or a few (RFC 9520). Neither is written once the cache has moved on to a
    ///    generation newer than `miss.generation`.
    ///
    /// `resolve` makes the resolution when this miss leads (a follower never makes one); the
    /// leader awaits it boxed (with a stale entry at hand it may finish in the background), so a
    /// miss's task holds a pointer to it, not its room: a flood of misses then fragments glibc's
    /// heap far less (bench/results/steps.md, round six, session 3).
    ///
    /// `None` when waiting for another client's exchange ran past the deadline.
    pub(crate) async fn get_or_resolve<F>(
        self: &Arc<Self>,
        key: &CacheKey,
        request: &[u8],
        miss: Miss,
        resolve: impl FnOnce() -> F + Send,
    ) -> Option<Vec<u8>>
    where
        F: Future<Output = Vec<u8>> + Send + 'static,
    {
        let now = Instant::now();
        if let Some((reply, _)) = self.fresh(key, request, now, Vec::new()) {
            return Some(reply);
        }
        if let Some((stale, refresh)) = self.stale_at_once(key, request, now, miss) {
            if refresh {
                self.refresh(key, miss.generation, resolve);
            }
            return Some(stale);
        }
        loop {
            match self.flights.join(key, miss.generation) {
                Flight::Follower(follower) => {
                    // With a stale answer at hand a follower waits no longer than its leader
                    // does (the client timer), then serves it; the shared exchange goes on.
                    let stale_at_hand = self.has_stale(key, Instant::now());
                    let until = if stale_at_hand {
                        miss.deadline.min(Instant::now() + miss.client_timer)
                    } else {
                        miss.deadline
                    };
                    match timeout_at(until, follower.wait(request, key)).await {
                        Ok(Some(reply)) => return Some(reply),
                        // The leader went away without an answer: lead or follow anew.
                        Ok(None) => continue,
                        Err(_) if stale_at_hand => {
                            if let Some(stale) = self.stale(key, request, Instant::now()) {
                                return Some(stale);
                            }
                            // Evicted meanwhile: wait for the answer itself.
                        }
                        Err(_) => return None,
                    }
                }
                Flight::Leader(leader) => {
                    if self.has_stale(key, Instant::now()) {
                        let resolution = Box::pin(resolve());
                        return Some(
                            self.lead_with_stale(key, request, miss, leader, resolution)
                                .await,
                        );
                    }
                    let reply = Box::pin(resolve()).await;
                    return Some(self.settle(key, Some(request), leader, reply));
                }
            }
        }
    }

    /// The leader's part of [`get_or_resolve`](Self::get_or_resolve) when a stale entry is at
    /// hand: it waits at most `miss.client_timer` for the resolution, then serves stale and
    /// lets the resolution finish in the background.
    async fn lead_with_stale(
        self: &Arc<Self>,
        key: &CacheKey,
        request: &[u8],
        miss: Miss,
        leader: FlightLeader,
        mut resolution: Resolution,
    ) -> Vec<u8> {
        let reply = match timeout(miss.client_timer, &mut resolution).await {
            Ok(reply) => reply,
            Err(_) => {
                let now = Instant::now();
                if let Some(stale) = self.stale(key, request, now) {
                    self.mark_refresh_failed(key, now, leader.generation());
                    self.finish_in_background(key, leader, resolution);
                    return stale;
                }
                // Evicted meanwhile: nothing to serve but the answer itself.
                resolution.await
            }
        };
        self.settle(key, Some(request), leader, reply)
    }

    /// Stores (or answers stale for) the reply of a finished exchange, hands the shareable
    /// copy to the flight's followers, and returns the leader's copy. `request` is the
    /// leader's client, `None` for a background refresh. What is written carries the flight's
    /// generation (and is dropped if the cache has moved on).
    fn settle(
        &self,
        key: &CacheKey,
        request: Option<&[u8]>,
        leader: FlightLeader,
        reply: Vec<u8>,
    ) -> Vec<u8> {
        let now = Instant::now();
        let generation = leader.generation();
        if is_failure(&reply) {
            // The followers patch whatever they get; the leader's client counts as served stale.
            let stale = match request {
                Some(request) => self.stale(key, request, now),
                None => self.servable(key, None, now).map(|(reply, _)| reply),
            };
            if let Some(stale) = stale {
                self.mark_refresh_failed(key, now, generation);
                leader.finish(|| Arc::from(stale.as_slice()));
                return stale;
            }
            self.remember_failure(key, &reply, now, generation);
            leader.finish(|| Arc::from(shareable(&reply)));
            return reply;
        }
        // The shareable copy is made only for followers, unless the cache stores it anyway.
        match self.store_reply(key, &reply, now, generation) {
            Some((capped, stored)) => {
                leader.finish(|| stored);
                capped
            }
            None => {
                leader.finish(|| Arc::from(shareable(&reply)));
                reply
            }
        }
    }

    /// Resolves again in the background and stores the answer, unless an exchange for `key`
    /// is already in flight or the background set is full: a popular entry about to expire
    /// (prefetch), or a stale one whose upstream is failing. `generation`: the configuration
    /// `resolve` runs on; it makes the resolution only when this refresh leads.
    pub(crate) fn refresh<F>(
        self: &Arc<Self>,
        key: &CacheKey,
        generation: Generation,
        resolve: impl FnOnce() -> F,
    ) where
        F: Future<Output = Vec<u8>> + Send + 'static,
    {
        if let Flight::Leader(leader) = self.flights.join(key, generation) {
            self.finish_in_background(key, leader, Box::pin(resolve()));
        }
    }

    fn finish_in_background(
        self: &Arc<Self>,
        key: &CacheKey,
        leader: FlightLeader,
        resolution: Resolution,
    ) {
        let (cache, key) = (Arc::clone(self), key.clone());
        // Refused when the set is full: the leader is dropped with the work, which closes the
        // flight, and a later query tries again.
        self.background.spawn(async move {
            let reply = resolution.await;
            cache.settle(&key, None, leader, reply);
        });
    }

    /// Step 2 of [`get_or_resolve`](Self::get_or_resolve): the stale reply, and whether this
    /// caller should start a refresh.
    fn stale_at_once(
        &self,
        key: &CacheKey,
        request: &[u8],
        now: Instant,
        miss: Miss,
    ) -> Option<(Vec<u8>, bool)> {
        let (stored, age, refresh) =
            self.take_entry(key, now, |entry, _, serve_stale, current| {
                // Served at once only during an outage: the route's upstream is failing, or a
                // refresh of this entry has failed. Only a query of the cache's own generation
                // judges that: one of an older configuration saw an upstream that may be gone.
                if !entry.is_stale(now, serve_stale)
                    || miss.generation < current
                    || (!miss.upstream_failing && entry.failed_at.is_none())
                {
                    return None;
                }
                let rechecking = entry
                    .failed_at
                    .is_some_and(|failed| now < failed + RECHECK_PERIOD);
                // One refresh per recheck period; a success replaces the entry, a failure
                // starts the next period.
                let refresh = !rechecking;
                if refresh {
                    entry.failed_at = Some(now);
                }
                Some(refresh)
            })?;
        let reply = served(&stored, key, Some(request), age, false, Vec::new())?;
        self.metrics.stale_served.inc();
        Some((reply, refresh))
    }

    /// Notes that refreshing the entry for `key` failed (stale answers are then served at once
    /// for a recheck period) — unless the failure is of an older generation than the cache's.
    fn mark_refresh_failed(&self, key: &CacheKey, now: Instant, generation: Generation) {
        let mut store = self.lock();
        if generation < store.generation() {
            return;
        }
        if let Some(slot) = store.get(key) {
            store.entry_mut(slot).failed_at = Some(now);
        }
    }

    /// For when the upstream failed: the entry for `key` if it is fresh or expired less than
    /// `MESHDNS_SERVE_STALE` ago, patched for `request`; a stale one carries TTLs of at most
    /// [`serve::STALE_TTL`]. A remembered failure is never served this way.
    pub(crate) fn stale(&self, key: &CacheKey, request: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.counted(self.servable(key, Some(request), now))
    }

    /// Whether [`stale`](Self::stale) would serve an expired entry for `key` now (counts
    /// nothing): the leader then gives the upstream less time (RFC 8767 §5).
    fn has_stale(&self, key: &CacheKey, now: Instant) -> bool {
        let store = self.lock();
        let serve_stale = store.config().serve_stale;
        store
            .get(key)
            .is_some_and(|slot| store.entry(slot).is_stale(now, serve_stale))
    }

    /// A leg's last good reply (fresh, or stale within `MESHDNS_SERVE_STALE`), as stored but for
    /// its TTLs (counted down, or at most [`serve::STALE_TTL`] when expired). For filling a failed
    /// leg of a gathered answer, so only a NOERROR reply (records or NODATA): a remembered
    /// NXDOMAIN is no answer of a cluster that does not answer now — it could hold the name
    /// now, and its old "no" would make the merge a complete NXDOMAIN, or skip the fallback
    /// of a prefixed name that another cluster has. Asked through [`GatherDoor::last_good`].
    fn last_good(&self, key: &CacheKey, now: Instant) -> Option<Vec<u8>> {
        let found = self.servable(key, None, now);
        self.counted(found.filter(|(reply, _)| wire::rcode(reply) == Some(wire::RCODE_NOERROR)))
    }

    /// Counts a reply from [`servable`](Self::servable) as a hit or as stale served.
    fn counted(&self, found: Option<(Vec<u8>, bool)>) -> Option<Vec<u8>> {
        let (reply, fresh) = found?;
        if fresh {
            self.metrics.hits.inc();
        } else {
            self.metrics.stale_served.inc();
        }
        Some(reply)
    }

    /// The entry for `key` if it is fresh or can be served stale, patched for `request` (if
    /// any), and whether it is fresh; counts nothing.
    fn servable(
        &self,
        key: &CacheKey,
        request: Option<&[u8]>,
        now: Instant,
    ) -> Option<(Vec<u8>, bool)> {
        let (stored, age, fresh) = self.take_entry(key, now, |entry, age, serve_stale, _| {
            (!entry.is_failure() && entry.is_servable(now, serve_stale)).then_some(age < entry.ttl)
        })?;
        served(&stored, key, request, age, fresh, Vec::new()).map(|reply| (reply, fresh))
    }

    /// Caches an upstream reply (or a merged one) received at `now` by work of `generation`,
    /// if the rules allow (`policy::worth`; failures are remembered only through
    /// [`get_or_resolve`](Self::get_or_resolve)) and the cache has not moved on to a newer
    /// generation. The query path writes only through [`get_or_resolve`](Self::get_or_resolve)
    /// and [`GatherDoor::ask`]; this is for filling a table directly (the memory measurement).
    pub(crate) fn insert(
        &self,
        key: &CacheKey,
        reply: &[u8],
        now: Instant,
        generation: Generation,
    ) {
        self.store_reply(key, reply, now, generation);
    }

    /// Stores `reply` if the rules allow. Returns it with its TTLs cut to the entry's — for
    /// the client it goes to, which so holds the answer no longer than one served from the
    /// cache would — and the stored (shareable) bytes. An answer the rules do not keep (TTL 0,
    /// a negative answer without an SOA) is still the upstream's latest word on the question:
    /// the older entry goes, so that it never comes back stale.
    fn store_reply(
        &self,
        key: &CacheKey,
        reply: &[u8],
        now: Instant,
        generation: Generation,
    ) -> Option<(Vec<u8>, Arc<[u8]>)> {
        let config = self.config();
        if config.size == 0
            || !wire::first_question(reply).is_some_and(|question| key.is_question(question))
        {
            return None;
        }
        let worth = policy::worth(reply, &config);
        let Some(Worth::Answer(ttl)) = worth else {
            if worth.is_none() && policy::is_answer(reply) {
                self.forget(key);
            }
            return None;
        };
        let capped = serve::capped(reply, key.question_range().end, ttl);
        let bytes: Arc<[u8]> = Arc::from(shareable(&capped));
        self.put(
            key,
            Entry::new(Arc::clone(&bytes), now, ttl),
            now,
            generation,
        );
        Some((capped, bytes))
    }

    /// Remembers a failed resolution for [`failure_ttl`] unless an answer that can still be
    /// served stale is there.
    fn remember_failure(&self, key: &CacheKey, reply: &[u8], now: Instant, generation: Generation) {
        let config = self.config();
        if config.size == 0
            || !wire::first_question(reply).is_some_and(|question| key.is_question(question))
            || policy::worth(reply, &config) != Some(Worth::Failure)
        {
            return;
        }
        let failures = {
            let store = self.lock();
            match store.get(key).map(|slot| store.entry(slot)) {
                Some(old) if !old.is_failure() && old.is_servable(now, config.serve_stale) => {
                    return;
                }
                Some(old) if old.is_failure() => old.failures.saturating_add(1),
                _ => 1,
            }
        };
        let mut entry = Entry::new(Arc::from(shareable(reply)), now, failure_ttl(failures));
        entry.failures = failures;
        self.put(key, entry, now, generation);
    }

    /// Stores `entry` under `key`, unless it comes from work of an older generation than the
    /// cache's (a reload happened since that work started: its route may have changed).
    fn put(&self, key: &CacheKey, entry: Entry, now: Instant, generation: Generation) {
        let mut store = self.lock();
        if generation < store.generation() {
            tracing::debug!(?key, "an answer of a previous configuration is not cached");
            return;
        }
        if let Some(evicted) = store.insert(key, entry, now) {
            self.metrics.evictions.inc_by(evicted);
        }
        self.count_entries(&store);
    }

    /// Drops the entry of `key`: what it holds is known to be wrong now, and must not be
    /// served even stale (a prefixed name whose cluster, answering, says it does not exist; a
    /// newer answer that is not kept). Work of any generation may: a dropped entry is asked
    /// again, never a wrong answer. Asked through [`GatherDoor::forget_answer`].
    fn forget(&self, key: &CacheKey) {
        let mut store = self.lock();
        if store.remove(key) {
            self.count_entries(&store);
        }
    }

    /// A reload to configuration `generation`: from now on writes of older generations are
    /// dropped. The entries of the targets it changed need no dropping: their keys name the
    /// old targets, which no query asks for any more. Call it before queries start on the new
    /// configuration.
    pub(crate) fn advance(&self, generation: Generation) {
        self.lock().advance(generation);
    }

    /// New bounds and TTL policy (a reload): entries beyond the new size are evicted now; a
    /// lowered TTL cap cuts the TTLs of the entries kept (no reply carries a TTL above the cap
    /// in force).
    pub(crate) fn reconfigure(&self, config: &CacheConfig) {
        let mut store = self.lock();
        let evicted = store.reconfigure(config, byte_budget(config.size), Instant::now());
        self.metrics.evictions.inc_by(evicted);
        self.count_entries(&store);
    }

    /// Sets the `cache_entries` gauge to what `store` (locked by the caller) holds now.
    fn count_entries(&self, store: &Store) {
        self.metrics
            .entries
            .set(i64::try_from(store.len()).unwrap_or(i64::MAX));
    }

    #[cfg(any(test, feature = "testing"))]
    /// Entries held (the `cache_entries` gauge), expired ones kept for serve-stale included.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The reply bytes a cache of `size` entries may hold.
fn byte_budget(size: usize) -> usize {
    if size == 0 {
        0
    } else {
        size.saturating_mul(BYTES_PER_ENTRY).max(wire::MAX_MESSAGE)
    }
}

#[cfg(test)]
mod tests;
