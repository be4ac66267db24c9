//! Memory per entry: 10,000 typical entries (81-byte A replies) inserted into one table sized
//! for them; the heap growth counted by a counting allocator (what tests/memory/cache_entry.rs measures
//! for meshdns), and the growth of the resident set beside it (which also sees malloc's own
//! per-allocation overhead). One table per process: `memory meshdns|qc|qc-bytes [SHARDS]`
//! (quick_cache in one shard unless SHARDS is given).

use std::sync::Arc;
use std::time::Duration;

use cache_eval::{
    Counting, QcEntry, QuickCache, live_bytes, meshdns_cache, quick_cache, rss_bytes, typical,
};
use tokio::time::Instant;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ENTRIES: usize = 10_000;

fn main() {
    let table = std::env::args().nth(1).expect("meshdns, qc or qc-bytes");
    // quick_cache in one shard, as meshdns's table is, unless a second argument gives more.
    let shards: usize = std::env::args()
        .nth(2)
        .map_or(1, |n| n.parse().expect("SHARDS"));
    let name = match table.as_str() {
        "meshdns" => table.clone(),
        _ => format!("{table}, {shards} shard(s)"),
    };
    let shards = Some(shards);
    // Everything the inserts need is made first, so only the table's own growth is counted.
    let entries: Vec<_> = (0..ENTRIES).map(typical).collect();
    let reply_bytes = entries.iter().map(|e| e.reply.len()).sum::<usize>() / ENTRIES;
    let key_bytes = entries
        .iter()
        .map(|e| e.key.as_bytes().len())
        .sum::<usize>()
        / ENTRIES;
    let now = Instant::now();
    let ttl = Duration::from_secs(30);

    let (rss_before, before) = (rss_bytes(), live_bytes());
    // The table is kept alive until after the second reading.
    let held;
    let (table_alive, own_estimate): (Box<dyn std::any::Any>, Option<usize>) = match table.as_str()
    {
        "meshdns" => {
            let cache = meshdns_cache(ENTRIES);
            for e in &entries {
                cache.insert(&e.key, &e.reply, now, Default::default());
            }
            held = cache.len();
            (Box::new(cache), None)
        }
        "qc" => {
            let cache: QuickCache<Arc<QcEntry>> = quick_cache(ENTRIES, shards, Default::default());
            for e in &entries {
                cache.insert(e.key.as_bytes().into(), QcEntry::new(&e.reply, now, ttl));
            }
            held = cache.len();
            let estimate = cache.memory_used().total();
            (Box::new(cache), Some(estimate))
        }
        "qc-bytes" => {
            let cache: QuickCache<Arc<[u8]>> = quick_cache(ENTRIES, shards, Default::default());
            for e in &entries {
                cache.insert(e.key.as_bytes().into(), e.reply.as_slice().into());
            }
            held = cache.len();
            let estimate = cache.memory_used().total();
            (Box::new(cache), Some(estimate))
        }
        other => panic!("unknown table {other}"),
    };
    let grown = live_bytes() - before;
    let rss = rss_bytes().saturating_sub(rss_before);
    println!(
        "{name}: {held} of {ENTRIES} entries held; {} bytes/entry on the heap ({grown} in all), \
         {} bytes/entry of RSS growth; key {key_bytes} B, reply {reply_bytes} B{}",
        grown / held as isize,
        rss / held,
        own_estimate.map_or(String::new(), |b| format!(
            "; quick_cache's memory_used(): {} bytes/entry (its table and slab only)",
            b / ENTRIES
        )),
    );
    drop(table_alive);
}
