//! The bounded table behind [`Cache`](super::Cache): a hash index into a slab of entries, with
//! two intrusive recency lists over the slab (a small "probation" segment for entries never hit
//! since they were stored, and a "main" segment for entries that were).
//!
//! At the bound, an insert first evicts an entry that is dead (expired beyond the serve-stale
//! window) at the tail of either list, then the probation tail while probation holds at least
//! 10% of the entries, then the main tail. A flood of random names (each asked once) therefore
//! only churns probation and cannot push out the names the workload keeps asking for — plain
//! LRU would lose all of them (see `a_flood_of_random_names_keeps_popular_entries`). This is
//! S3-FIFO's small/main split with an LRU main, in about a hundred lines and no dependency.
//!
//! Every operation is O(1) apart from eviction for an oversized reply (a few more victims).
//!
//! It owns the table and its eviction order, and decides nothing about a reply: what is worth
//! storing and for how long is `policy`'s, and the lock around the table is the parent's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Generation;
use super::key::CacheKey;
use super::policy::{self, Worth};
use crate::config::CacheConfig;
use crate::wire;

const NIL: u32 = u32::MAX;

/// How many entries from each tail an eviction looks at for a dead one.
const DEAD_SCAN: usize = 8;

/// Share of the entries the probation segment may keep before it is evicted first.
const PROBATION_SHARE: usize = 10;

/// One cached reply and what the cache knows of it.
#[derive(Debug)]
pub(super) struct Entry {
    /// The reply as stored: TTLs already capped to `ttl`.
    pub(crate) bytes: Arc<[u8]>,
    /// When the reply was received: TTLs count down from here.
    pub(crate) stored: Instant,
    /// How long it is fresh.
    pub(crate) ttl: Duration,
    /// For a remembered failure (SERVFAIL): how many in a row this question has had (its TTL
    /// doubles with it); 0 for an answer.
    pub(crate) failures: u32,
    pub(crate) hits: u32,
    /// The first caller that found a refresh due took it.
    pub(crate) refresh_claimed: bool,
    /// When asking the upstream to refresh this (expired) answer last failed: until a recheck
    /// period has passed, the stale answer is served at once without asking again.
    pub(crate) failed_at: Option<Instant>,
}

impl Entry {
    /// An entry for `bytes`, received `now`, fresh for `ttl`.
    pub(super) fn new(bytes: Arc<[u8]>, now: Instant, ttl: Duration) -> Self {
        Self {
            bytes,
            stored: now,
            ttl,
            failures: 0,
            hits: 0,
            refresh_claimed: false,
            failed_at: None,
        }
    }

    /// A remembered failure: never served stale, never refreshed, never replaces an answer
    /// that can still be served stale.
    pub(super) fn is_failure(&self) -> bool {
        self.failures > 0
    }

    pub(super) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stored)
    }

    pub(super) fn is_fresh(&self, now: Instant) -> bool {
        self.age(now) < self.ttl
    }

    /// Fresh, or expired but inside the serve-stale window (none for a SERVFAIL).
    pub(super) fn is_servable(&self, now: Instant, serve_stale: Duration) -> bool {
        let window = if self.is_failure() {
            Duration::ZERO
        } else {
            serve_stale
        };
        self.age(now) < self.ttl + window
    }

    /// An answer that has expired but is still inside the serve-stale `window`.
    pub(super) fn is_stale(&self, now: Instant, window: Duration) -> bool {
        !self.is_failure() && !self.is_fresh(now) && self.is_servable(now, window)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    Probation = 0,
    Main = 1,
}

#[derive(Debug)]
struct Slot {
    key: Arc<[u8]>,
    entry: Entry,
    segment: Segment,
    prev: u32,
    next: u32,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: usize,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

#[derive(Debug)]
pub(super) struct Store {
    /// foldhash: several times faster than SipHash on short keys, and seeded at random per
    /// process, so names chosen to collide cannot be precomputed.
    index: HashMap<Arc<[u8]>, u32, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lists: [List; 2],
    bytes: usize,
    byte_budget: usize,
    /// The bounds and TTL policy, kept here so that one lock guards the table and the rules
    /// it is read by.
    config: CacheConfig,
    /// The configuration the table serves: writes of older ones are refused (by the cache,
    /// under the same lock).
    generation: Generation,
}

impl Store {
    /// At most `config.size` entries holding at most `byte_budget` reply bytes together;
    /// entries expired for longer than `config.serve_stale` are evicted first.
    pub(super) fn new(config: &CacheConfig, byte_budget: usize) -> Self {
        Self {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lists: [EMPTY; 2],
            bytes: 0,
            byte_budget,
            config: config.clone(),
            generation: Generation::default(),
        }
    }

    /// The bounds and TTL policy in force.
    pub(super) fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The configuration the table serves now.
    pub(super) fn generation(&self) -> Generation {
        self.generation
    }

    /// Moves on to `generation` (never back).
    pub(super) fn advance(&mut self, generation: Generation) {
        self.generation = self.generation.max(generation);
    }

    /// How many entries the table holds at most: `config.size`, below [`NIL`] so that every
    /// slot has an index.
    fn capacity(&self) -> usize {
        self.config.size.min(NIL as usize)
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn get(&self, key: &CacheKey) -> Option<u32> {
        self.index.get(key.as_bytes()).copied()
    }

    pub(super) fn entry(&self, slot: u32) -> &Entry {
        &self.slots[slot as usize].entry
    }

    pub(super) fn entry_mut(&mut self, slot: u32) -> &mut Entry {
        &mut self.slots[slot as usize].entry
    }

    /// Marks a use: the entry moves to the front of the main segment.
    pub(super) fn touch(&mut self, slot: u32) {
        self.unlink(slot);
        self.push_front(slot, Segment::Main);
    }

    /// Stores `entry` under `key`, replacing an entry of the same key in place. Returns how
    /// many other entries were evicted to make room; `None` when the reply alone is larger than
    /// the byte budget and was not stored.
    pub(super) fn insert(&mut self, key: &CacheKey, entry: Entry, now: Instant) -> Option<u64> {
        let size = entry.bytes.len();
        if self.capacity() == 0 || size > self.byte_budget {
            return None;
        }
        if let Some(slot) = self.get(key) {
            let old = std::mem::replace(&mut self.slots[slot as usize].entry, entry);
            self.bytes = self.bytes - old.bytes.len() + size;
            let segment = self.slots[slot as usize].segment;
            self.unlink(slot);
            self.push_front(slot, segment);
            let evicted = self.make_room(0, now, Some(slot));
            return Some(evicted);
        }
        let evicted = self.make_room(size, now, None);
        let key: Arc<[u8]> = Arc::from(key.as_bytes());
        let fresh = Slot {
            key: Arc::clone(&key),
            entry,
            segment: Segment::Probation,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = fresh;
                slot
            }
            None => {
                // Grow by doubling, but never past the bound: no slack slots at full size.
                if self.slots.len() == self.slots.capacity() {
                    let more = self
                        .slots
                        .len()
                        .max(16)
                        .min(self.capacity() - self.slots.len());
                    self.slots.reserve_exact(more);
                }
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key, slot);
        self.bytes += size;
        self.push_front(slot, Segment::Probation);
        Some(evicted)
    }

    /// Evicts until one more entry of `incoming` bytes fits (for `incoming == 0`: until the
    /// budget holds again after a replacement). `keep` is never evicted.
    fn make_room(&mut self, incoming: usize, now: Instant, keep: Option<u32>) -> u64 {
        let mut evicted = 0;
        loop {
            let entries_full = keep.is_none() && self.len() >= self.capacity();
            let bytes_full = self.bytes + incoming > self.byte_budget;
            if !(entries_full || bytes_full) {
                return evicted;
            }
            let Some(victim) = self.victim(now, keep) else {
                return evicted;
            };
            self.evict(victim);
            evicted += 1;
        }
    }

    fn victim(&self, now: Instant, keep: Option<u32>) -> Option<u32> {
        let usable = |slot: u32| slot != NIL && Some(slot) != keep;
        if let Some(dead) = self.dead_near_tails(now, keep) {
            return Some(dead);
        }
        let [probation, main] = self.lists.map(|list| list.tail);
        let probation_over =
            self.lists[Segment::Probation as usize].len * PROBATION_SHARE >= self.capacity().max(1);
        let order = if probation_over || !usable(main) {
            [probation, main]
        } else {
            [main, probation]
        };
        order.into_iter().find(|&slot| usable(slot)).or_else(|| {
            // Only `keep` is at a tail: take the one behind it.
            order
                .into_iter()
                .filter(|&slot| slot != NIL)
                .map(|slot| self.slots[slot as usize].prev)
                .find(|&slot| usable(slot))
        })
    }

    /// A dead entry among the [`DEAD_SCAN`] least recently used of either segment: entries
    /// that cannot even be served stale any more go before live ones.
    fn dead_near_tails(&self, now: Instant, keep: Option<u32>) -> Option<u32> {
        self.lists.iter().find_map(|list| {
            let mut at = list.tail;
            for _ in 0..DEAD_SCAN {
                if at == NIL {
                    return None;
                }
                let slot = &self.slots[at as usize];
                if Some(at) != keep && !slot.entry.is_servable(now, self.config.serve_stale) {
                    return Some(at);
                }
                at = slot.prev;
            }
            None
        })
    }

    fn evict(&mut self, slot: u32) {
        self.unlink(slot);
        let taken = &self.slots[slot as usize];
        self.bytes -= taken.entry.bytes.len();
        self.index.remove(&taken.key);
        // The slot keeps its (now unindexed) contents until reused; drop the reply now.
        self.slots[slot as usize].entry.bytes = Arc::from(&[][..]);
        self.free.push(slot);
    }

    /// Evicts the entry of `key`, if there is one; returns whether there was.
    pub(super) fn remove(&mut self, key: &CacheKey) -> bool {
        let slot = self.get(key);
        if let Some(slot) = slot {
            self.evict(slot);
        }
        slot.is_some()
    }

    /// New bounds and TTL policy, applied at once (entries beyond the bounds are evicted);
    /// returns how many entries were evicted.
    pub(super) fn reconfigure(
        &mut self,
        config: &CacheConfig,
        byte_budget: usize,
        now: Instant,
    ) -> u64 {
        let lowered =
            config.max_ttl < self.config.max_ttl || config.negative_ttl < self.config.negative_ttl;
        self.config = config.clone();
        self.byte_budget = byte_budget;
        if lowered {
            self.cap_ttls();
        }
        let mut evicted = 0;
        while self.len() > self.capacity() || self.bytes > self.byte_budget {
            let Some(victim) = self.victim(now, None) else {
                break;
            };
            self.evict(victim);
            evicted += 1;
        }
        evicted
    }

    /// A lowered TTL cap holds for the answers kept too: each one's TTL, and the TTLs in its
    /// bytes, are cut to what the rules in force give it (the stored TTLs are the received ones
    /// cut to the old cap, so the rules read them as they would the received reply). Walks every
    /// entry, but only at a reload that lowers a cap.
    fn cap_ttls(&mut self) {
        for &slot in self.index.values() {
            let entry = &mut self.slots[slot as usize].entry;
            let ttl = match policy::worth(&entry.bytes, &self.config) {
                Some(Worth::Answer(ttl)) => ttl,
                Some(Worth::Failure) => continue,
                None => Duration::ZERO, // expired at once under the new cap
            };
            let Some(records_at) = wire::questions_end(&entry.bytes).filter(|_| ttl < entry.ttl)
            else {
                continue;
            };
            let capped = super::serve::capped(&entry.bytes, records_at, ttl);
            (entry.bytes, entry.ttl) = (Arc::from(capped), ttl);
        }
    }

    fn push_front(&mut self, slot: u32, segment: Segment) {
        let list = &mut self.lists[segment as usize];
        let old_head = list.head;
        list.head = slot;
        if old_head == NIL {
            list.tail = slot;
        }
        list.len += 1;
        if old_head != NIL {
            self.slots[old_head as usize].prev = slot;
        }
        let s = &mut self.slots[slot as usize];
        s.segment = segment;
        s.prev = NIL;
        s.next = old_head;
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next, segment) = {
            let s = &self.slots[slot as usize];
            (s.prev, s.next, s.segment)
        };
        let list = &mut self.lists[segment as usize];
        if prev == NIL {
            list.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        let list = &mut self.lists[segment as usize];
        if next == NIL {
            list.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        self.lists[segment as usize].len -= 1;
        let s = &mut self.slots[slot as usize];
        s.prev = NIL;
        s.next = NIL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::{Name, RecordType};
    use hickory_proto::serialize::binary::BinEncodable;

    /// A table of at most `capacity` entries and `byte_budget` bytes, serving stale for
    /// `serve_stale`.
    fn store(capacity: usize, byte_budget: usize, serve_stale: Duration) -> Store {
        let config = CacheConfig {
            size: capacity,
            max_ttl: Duration::from_secs(3600),
            negative_ttl: Duration::from_secs(5),
            serve_stale,
        };
        Store::new(&config, byte_budget)
    }

    fn key(i: usize) -> CacheKey {
        let name = Name::from_ascii(format!("n{i}.example.")).unwrap();
        let question = Query::query(name, RecordType::A).to_bytes().unwrap();
        CacheKey::for_client(&question, Default::default()).unwrap()
    }

    fn entry(now: Instant, len: usize) -> Entry {
        Entry::new(Arc::from(vec![0u8; len]), now, Duration::from_secs(60))
    }

    fn check_lists(store: &Store) {
        let mut seen = 0;
        for list in store.lists {
            let (mut at, mut prev, mut n) = (list.head, NIL, 0);
            while at != NIL {
                assert_eq!(store.slots[at as usize].prev, prev);
                (prev, at, n) = (at, store.slots[at as usize].next, n + 1);
            }
            assert_eq!((list.tail, list.len), (prev, n));
            seen += n;
        }
        assert_eq!(seen, store.len());
    }

    #[test]
    fn entries_stay_at_the_bound_and_lists_stay_consistent() {
        let now = Instant::now();
        let mut store = store(10, usize::MAX, Duration::from_secs(60));
        for i in 0..100 {
            store.insert(&key(i), entry(now, 10), now).unwrap();
            if i % 3 == 0 {
                let slot = store.get(&key(i)).unwrap();
                store.touch(slot);
            }
            check_lists(&store);
            assert!(store.len() <= 10);
        }
        assert_eq!(store.bytes(), 100);
    }

    #[test]
    fn dead_entries_go_before_live_ones() {
        let start = Instant::now();
        let mut store = store(2, usize::MAX, Duration::ZERO);
        store.insert(&key(0), entry(start, 1), start);
        let mut short = entry(start, 1);
        short.ttl = Duration::from_secs(1);
        store.insert(&key(1), short, start);
        store.touch(store.get(&key(0)).unwrap());
        store.touch(store.get(&key(1)).unwrap());
        // key(0) is the LRU tail, but key(1) is dead.
        let later = start + Duration::from_secs(2);
        assert_eq!(store.insert(&key(2), entry(later, 1), later), Some(1));
        assert!(store.get(&key(0)).is_some() && store.get(&key(1)).is_none());
    }

    #[test]
    fn the_byte_budget_holds_even_for_large_replies() {
        let now = Instant::now();
        let mut store = store(100, 1000, Duration::from_secs(60));
        for i in 0..50 {
            store.insert(&key(i), entry(now, 300), now);
            assert!(store.bytes() <= 1000);
            check_lists(&store);
        }
        assert_eq!(store.insert(&key(99), entry(now, 1001), now), None);
        // Growing an entry in place evicts others, never itself.
        store.insert(&key(49), entry(now, 900), now).unwrap();
        assert!(store.get(&key(49)).is_some());
        assert!(store.bytes() <= 1000);
        check_lists(&store);
    }
}
