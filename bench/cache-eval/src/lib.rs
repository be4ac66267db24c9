//! What the measurement programs of `src/bin/` share: the typical entries, the Zipf order of
//! the hits, the two tables set up the same way, the quick_cache hit path, and a counting
//! allocator.
//!
//! The two tables hold the same things: the key is the key's bytes (`CacheKey::as_bytes`,
//! 45 bytes for `mongo-N.mongo.db.svc.cluster.local. A` with EDNS) behind an `Arc<[u8]>` —
//! what `Store`'s index and slab hold — and the value the reply's wire bytes plus, for the
//! "as meshdns would use it" variant, the per-entry state `store::Entry` keeps. Both are bound
//! to `size` entries and `size × BYTES_PER_ENTRY` reply bytes (quick_cache: one weight, each
//! entry weighing `max(reply length, BYTES_PER_ENTRY)`, which bounds both).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshdns::background::Background;
use meshdns::cache::{
    BYTES_PER_ENTRY, Cache, CacheKey, CacheMetrics, PREFETCH_MIN_HITS, PREFETCH_WINDOW,
};
use meshdns::config::CacheConfig;
use meshdns::metrics::Metrics;
use meshdns::wire;
use quick_cache::{OptionsBuilder, Weighter};
use tokio::time::Instant;

/// One client query and the upstream's reply to it.
pub struct Typical {
    pub key: CacheKey,
    pub query: Vec<u8>,
    pub reply: Vec<u8>,
}

/// Member `i` of a StatefulSet: a client's A query with EDNS and kube-dns's 81-byte reply
/// (TTL 30) — the typical entry of tests/memory/cache_entry.rs, built by the same code
/// (tests/support/typical.rs).
pub fn typical(i: usize) -> Typical {
    typical_with_ttl(i, 30)
}

/// [`typical`] with another TTL (0: a reply that must not be cached).
pub fn typical_with_ttl(i: usize, ttl: u32) -> Typical {
    let (query, reply) = typical_entry::typical_with_ttl(i, ttl);
    Typical {
        key: CacheKey::from_request(&query).expect("a cacheable query"),
        query,
        reply,
    }
}

// The typical entry's wire bytes (tests/support/typical.rs, only hickory-proto), shared with
// tests/memory/cache_entry.rs rather than copied.
#[path = "../../../tests/support/typical.rs"]
mod typical_entry;

/// A small deterministic generator (SplitMix64): the same order of hits in every run and
/// under callgrind.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `count` entry numbers in `0..entries`, Zipf-distributed with exponent 1 (the k-th most
/// popular name asked ∝ 1/k; the top 1% of names get about half the hits), popularity ranks
/// shuffled over the entries so popular entries are not neighbours in the tables.
pub fn zipf_order(entries: usize, count: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    let mut by_rank: Vec<u32> = (0..entries as u32).collect();
    for i in (1..entries).rev() {
        by_rank.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let mut cdf: Vec<f64> = (1..=entries).map(|k| 1.0 / k as f64).collect();
    let mut sum = 0.0;
    for p in &mut cdf {
        sum += *p;
        *p = sum;
    }
    (0..count)
        .map(|_| {
            let u = rng.unit() * sum;
            by_rank[cdf.partition_point(|&c| c < u).min(entries - 1)]
        })
        .collect()
}

/// meshdns's cache, as the server builds it, for `size` entries.
pub fn meshdns_cache(size: usize) -> Arc<Cache> {
    let config = CacheConfig {
        size,
        max_ttl: Duration::from_secs(3600),
        negative_ttl: Duration::from_secs(5),
        serve_stale: Duration::from_secs(300),
    };
    Arc::new(Cache::new(
        &config,
        Metrics::new().cache(),
        Arc::new(Background::new(64)),
    ))
}

/// The entry as meshdns would store it in quick_cache: the state `store::Entry` keeps, the
/// parts a hit changes made atomic (quick_cache hands out clones of values, so state shared
/// between a value's clones needs an `Arc` and interior mutability — its docs say as much).
#[derive(Debug)]
pub struct QcEntry {
    pub bytes: Box<[u8]>,
    pub stored: Instant,
    pub ttl: Duration,
    pub failure: bool,
    pub failures: u32,
    pub hits: AtomicU32,
    pub refresh_claimed: AtomicBool,
    pub failed_at: Mutex<Option<Instant>>,
}

impl QcEntry {
    pub fn new(bytes: &[u8], stored: Instant, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            bytes: bytes.into(),
            stored,
            ttl,
            failure: false,
            failures: 0,
            hits: AtomicU32::new(0),
            refresh_claimed: AtomicBool::new(false),
            failed_at: Mutex::new(None),
        })
    }
}

/// A value whose reply length the weigher can read.
pub trait ReplyLen {
    fn reply_len(&self) -> usize;
}

impl ReplyLen for Arc<[u8]> {
    fn reply_len(&self) -> usize {
        self.len()
    }
}

impl ReplyLen for Arc<QcEntry> {
    fn reply_len(&self) -> usize {
        self.bytes.len()
    }
}

/// meshdns's two bounds in quick_cache's one weight: an entry weighs its reply bytes, but at
/// least [`BYTES_PER_ENTRY`]; with a capacity of `size × BYTES_PER_ENTRY` that holds at most
/// `size` entries and at most that many reply bytes.
#[derive(Debug, Clone, Copy)]
pub struct ReplyWeight;

impl<V: ReplyLen> Weighter<Arc<[u8]>, V> for ReplyWeight {
    fn weight(&self, _key: &Arc<[u8]>, value: &V) -> u64 {
        value.reply_len().max(BYTES_PER_ENTRY) as u64
    }
}

pub type QuickCache<V, H = quick_cache::DefaultHashBuilder> =
    quick_cache::sync::Cache<Arc<[u8]>, V, ReplyWeight, H>;

/// quick_cache for `size` entries, hasher `hasher`, in `shards` shards (`None`: its default,
/// 4 × cores rounded to a power of two — 8 here — fewer if a shard would hold under 32
/// items). Each shard is bounded to its share of the capacity, so a sharded cache may evict
/// before it holds `size` entries; one shard is meshdns's layout (one table, one lock).
pub fn quick_cache<V: ReplyLen + Clone, H: std::hash::BuildHasher + Clone>(
    size: usize,
    shards: Option<usize>,
    hasher: H,
) -> QuickCache<V, H> {
    let mut options = OptionsBuilder::new();
    options
        .estimated_items_capacity(size)
        .weight_capacity((size * BYTES_PER_ENTRY) as u64);
    if let Some(shards) = shards {
        options.shards(shards);
    }
    let options = options.build().expect("valid options");
    quick_cache::sync::Cache::with_options(options, ReplyWeight, hasher, Default::default())
}

/// What `Cache::lookup` does on a hit, over quick_cache: get (a read lock, the entry's
/// "referenced" counter) → clone of the value → freshness, hit count and refresh claim → the
/// hit counter (meshdns's own `CacheMetrics::hits`) → the reply copied and patched.
pub fn qc_lookup<H: std::hash::BuildHasher + Clone>(
    cache: &QuickCache<Arc<QcEntry>, H>,
    metrics: &CacheMetrics,
    key: &CacheKey,
    request: &[u8],
    now: Instant,
) -> Option<(Vec<u8>, bool)> {
    let entry = cache.get(key.as_bytes())?;
    let age = now.saturating_duration_since(entry.stored);
    if age >= entry.ttl {
        return None;
    }
    let count = entry.hits.fetch_add(1, Ordering::Relaxed).saturating_add(1);
    let due = !entry.failure
        && count >= PREFETCH_MIN_HITS
        && entry.ttl - age <= entry.ttl / PREFETCH_WINDOW;
    let refresh = due && !entry.refresh_claimed.swap(true, Ordering::Relaxed);
    let reply = served(&entry.bytes, request, age)?;
    metrics.hits.inc();
    Some((reply, refresh))
}

/// meshdns's `cache::serve::served` for a fresh entry and `patch_header_and_question`
/// (src/cache/serve.rs), copied here because that module is private: the stored reply copied
/// once, ID, RD/CD bits and question spelling taken from the request, TTLs counted down.
pub fn served(stored: &[u8], request: &[u8], age: Duration) -> Option<Vec<u8>> {
    let mut reply = stored.to_vec();
    let (Some(asked), Some(id)) = (wire::first_question(request), wire::id(request)) else {
        return None;
    };
    let question = reply.get_mut(wire::HEADER_LEN..wire::HEADER_LEN + asked.len())?;
    if !wire::same_question(question, asked) {
        return None;
    }
    question.copy_from_slice(asked);
    wire::set_id(&mut reply, id);
    wire::copy_request_bits(&mut reply, request);
    let age = u32::try_from(age.as_secs() + u64::from(age.subsec_nanos() > 0)).unwrap_or(u32::MAX);
    wire::rewrite_ttls(stored, &mut reply, |ttl| ttl.saturating_sub(age));
    Some(reply)
}

// The counting allocator of the integration tests (the system allocator, with the bytes live
// on the heap in one counter), shared rather than copied.
#[path = "../../../tests/support/counting.rs"]
mod counting;
pub use counting::{Counting, live as live_bytes};

/// The process's resident set, from /proc/self/statm (pages of 4 KiB).
pub fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}
