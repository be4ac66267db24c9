//! The gathered route's door into the cache: everything a gathering asks of the cache — keep a
//! leg's answer, fill a failed leg from its last good one, drop a gathered answer known to be
//! wrong — goes through [`GatherDoor`], so the gatherer holds no [`Cache`] and repeats none of
//! its policy. What is kept, for how long and what may be served stale stays the cache's
//! (`policy`, `Cache::last_good`); the door adds the rules of legs: every write carries the
//! generation of the configuration the gathering belongs to, and a leg's answer is kept only
//! when the client's query allows sharing ([`may_share`](super::may_share), which the gatherer
//! asks).
//!
//! A leg is not a miss: it is always asked (the gathered answer as a whole is what the miss path
//! of [`Cache::get_or_resolve`] looks up, shares and stores), no two legs share an exchange, and
//! a leg that fails is filled when the reply is put together, not when it fails. It may not
//! touch the table itself, nor decide what is worth keeping.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::key::CacheKey;
use super::{Cache, Generation};

/// The cache as one gathering configuration (one generation) sees it.
#[derive(Debug)]
pub(crate) struct GatherDoor {
    cache: Arc<Cache>,
    /// The configuration the gatherer belongs to: its legs' writes carry it, so a leg that
    /// straggles past a reload writes nothing into the new configuration's cache.
    generation: Generation,
}

impl GatherDoor {
    /// The door of a gatherer of configuration `generation` into `cache`.
    pub(crate) fn new(cache: Arc<Cache>, generation: Generation) -> Self {
        Self { cache, generation }
    }

    /// Runs a leg's `exchange`, which yields the leg's outcome and the reply bytes worth
    /// keeping (a complete NOERROR or NXDOMAIN, `None` otherwise), keeps those bytes under
    /// `key` when the reply is `shared` (one that may be scoped to the client's subnet is no
    /// leg's answer for others), and returns the outcome. The bytes are kept also when the
    /// reply has gone out without this leg (a cut leg finishing in the background): they
    /// refresh the answer a later failure of its cluster is filled from.
    pub(crate) fn ask<T>(
        &self,
        key: CacheKey,
        shared: bool,
        exchange: impl Future<Output = (T, Option<Vec<u8>>)> + Send + 'static,
    ) -> impl Future<Output = T> + Send + 'static
    where
        T: Send + 'static,
    {
        let (cache, generation) = (Arc::clone(&self.cache), self.generation);
        async move {
            let (outcome, bytes) = exchange.await;
            if let (true, Some(bytes)) = (shared, &bytes) {
                cache.insert(&key, bytes, Instant::now(), generation);
            }
            outcome
        }
    }

    /// What fills the leg of `key` that failed or was cut: its last good answer, now (see
    /// `Cache::last_good`).
    pub(crate) fn last_good(&self, key: &CacheKey) -> Option<Vec<u8>> {
        self.cache.last_good(key, Instant::now())
    }

    /// Drops the gathered answer of `key`: the prefixed cluster, answering, does not have the
    /// name, so what the cache holds for it (a member since removed) must not come back, not
    /// even stale while the fallback runs (see `Cache::forget`).
    pub(crate) fn forget_answer(&self, key: &CacheKey) {
        self.cache.forget(key);
    }
}
