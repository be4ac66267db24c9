//! A random-subdomain flood through a 1,000-entry cache: 500 popular names are stored and
//! asked 10 times each, then 20,000 names are asked once each (miss, then insert, as the miss
//! path does). Counts how many popular names are still served afterwards, and the entries
//! and heap bytes the table holds (sampled every 100 flood names: the maximum is shown).

use std::sync::Arc;
use std::time::Duration;

use cache_eval::{
    Counting, QcEntry, QuickCache, Typical, live_bytes, meshdns_cache, qc_lookup, quick_cache,
    typical,
};
use meshdns::cache::Lookup;
use meshdns::metrics::Metrics;
use tokio::time::Instant;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SIZE: usize = 1_000;
const POPULAR: usize = 500;
const ASKS: usize = 10;
const FLOOD: usize = 20_000;

/// One table behind the three operations the flood needs.
trait Table {
    fn hit(&self, e: &Typical, now: Instant) -> bool;
    fn insert(&self, e: &Typical, now: Instant);
    fn len(&self) -> usize;
}

impl Table for Arc<meshdns::cache::Cache> {
    fn hit(&self, e: &Typical, now: Instant) -> bool {
        matches!(self.lookup(&e.key, &e.query, now), Lookup::Fresh { .. })
    }
    fn insert(&self, e: &Typical, now: Instant) {
        meshdns::cache::Cache::insert(self, &e.key, &e.reply, now, Default::default());
    }
    fn len(&self) -> usize {
        meshdns::cache::Cache::len(self)
    }
}

struct Qc(QuickCache<Arc<QcEntry>>, meshdns::cache::CacheMetrics);

impl Table for Qc {
    fn hit(&self, e: &Typical, now: Instant) -> bool {
        qc_lookup(&self.0, &self.1, &e.key, &e.query, now).is_some()
    }
    fn insert(&self, e: &Typical, now: Instant) {
        let entry = QcEntry::new(&e.reply, now, Duration::from_secs(30));
        self.0.insert(e.key.as_bytes().into(), entry);
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn flood(name: &str, table: &dyn Table, popular: &[Typical], flood: &[Typical]) {
    let t0 = Instant::now();
    let at = |secs| t0 + Duration::from_secs(secs);
    let base = live_bytes();
    for e in popular {
        assert!(!table.hit(e, at(0)));
        table.insert(e, at(0));
    }
    for _ in 0..ASKS {
        for e in popular {
            assert!(
                table.hit(e, at(1)),
                "a popular name is held before the flood"
            );
        }
    }
    let (warm_len, warm_bytes) = (table.len(), live_bytes() - base);
    let (mut max_len, mut max_bytes) = (warm_len, warm_bytes);
    for (j, e) in flood.iter().enumerate() {
        if !table.hit(e, at(2)) {
            table.insert(e, at(2));
        }
        if j % 100 == 99 {
            max_len = max_len.max(table.len());
            max_bytes = max_bytes.max(live_bytes() - base);
        }
    }
    let kept = popular.iter().filter(|e| table.hit(e, at(3))).count();
    println!(
        "{name}: popular kept {kept}/{POPULAR}; entries {warm_len} before, max {max_len}, {} \
         after; heap {warm_bytes} B before, max {max_bytes} B, {} B after",
        table.len(),
        live_bytes() - base
    );
}

fn main() {
    let popular: Vec<_> = (0..POPULAR).map(typical).collect();
    let one_off: Vec<_> = (0..FLOOD).map(|j| typical(100_000 + j)).collect();
    flood("meshdns", &meshdns_cache(SIZE), &popular, &one_off);
    for shards in [None, Some(1)] {
        let qc = Qc(
            quick_cache(SIZE, shards, Default::default()),
            Metrics::new().cache(),
        );
        let name = format!("qc, {} shards", qc.0.num_shards());
        flood(&name, &qc, &popular, &one_off);
    }
}
