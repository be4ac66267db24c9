//! Memory per cache entry, measured (docs/design.md, "Cache": bounded by
//! `MESHDNS_CACHE_SIZE`): a counting allocator around the system one tracks the bytes live on
//! the heap, and 10,000 typical entries — A replies for StatefulSet members, ~80 bytes each —
//! are inserted into a cache sized for them (`meshdns::testing::memory::CacheFill`). The
//! growth, divided by the entries, is what an entry really costs: reply bytes, key, slab slot,
//! index bucket and the slack of both.
//!
//! It runs alone (`tests/memory/main.rs`): nothing else allocates in this process while it measures.

use meshdns::testing::memory::CacheFill;

use crate::support::counting;
use crate::support::typical;

use counting::live;

const ENTRIES: usize = 10_000;

/// What a typical entry may cost in all. Measured on x86_64 Linux: 320 bytes per entry for
/// an 81-byte reply (the former estimate from a model of the table said ~283) — the reply and
/// the key each behind an `Arc`, a slab slot and an index bucket, with the slab and the index
/// holding room for 16,384 entries at 10,000. The bound leaves 10% for changes of layout; a
/// change that crosses it should say why the entry grew.
const BYTES_PER_ENTRY_BOUND: usize = 352;

#[test]
fn memory_per_typical_entry_is_small() {
    let _alone = crate::alone();
    // Everything the inserts need is made first, so only the cache's own growth is measured.
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..ENTRIES)
        .map(|i| typical::typical_with_ttl(i, 30))
        .collect();
    let reply_bytes = entries.iter().map(|(_, r)| r.len()).sum::<usize>() / ENTRIES;
    let cache = CacheFill::new(entries);

    let before = live();
    cache.insert_all();
    let grown = usize::try_from(live() - before).expect("the cache grew");

    assert_eq!(cache.held(), ENTRIES, "every entry is held");
    let per_entry = grown / ENTRIES;
    println!(
        "cache: {grown} bytes for {ENTRIES} entries = {per_entry} bytes/entry \
         ({reply_bytes} of them reply bytes)"
    );
    assert!(
        (80..=100).contains(&reply_bytes),
        "a typical reply is 80-100 bytes, got {reply_bytes}"
    );
    assert!(
        per_entry <= BYTES_PER_ENTRY_BOUND,
        "{per_entry} bytes per entry, more than {BYTES_PER_ENTRY_BOUND}"
    );
}
