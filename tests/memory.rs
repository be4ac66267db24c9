//! Memory per cache entry, measured (docs/design.md, "Cache": bounded by
//! `MESHDNS_CACHE_SIZE`): a counting allocator around the system one tracks the bytes live on
//! the heap, and 10,000 typical entries — A replies for StatefulSet members, ~80 bytes each —
//! are inserted into a `Cache` sized for them. The growth, divided by the entries, is what an
//! entry really costs: reply bytes, key, slab slot, index bucket and the slack of both.
//!
//! One test in this file, so nothing else allocates in this process while it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use meshdns::background::Background;
use meshdns::cache::{Cache, CacheKey};
use meshdns::config::CacheConfig;
use meshdns::metrics::Metrics;

/// Bytes allocated and not yet freed, by everything in this process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting.
struct Counting;

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the only addition is an atomic counter, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc` and `alloc`.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const ENTRIES: usize = 10_000;

/// What a typical entry may cost in all. Measured on x86_64 Linux: 320 bytes per entry for
/// an 81-byte reply (the former estimate from a model of the table said ~283) — the reply and
/// the key each behind an `Arc`, a slab slot and an index bucket, with the slab and the index
/// holding room for 16,384 entries at 10,000. The bound leaves 10% for changes of layout; a
/// change that crosses it should say why the entry grew.
const BYTES_PER_ENTRY_BOUND: usize = 352;

/// A client's query for member `i` of a StatefulSet, with EDNS, and kube-dns's A reply to it.
fn typical(i: usize) -> (Vec<u8>, Vec<u8>) {
    let name = Name::from_ascii(format!("mongo-{i}.mongo.db.svc.cluster.local.")).unwrap();
    let mut query = Message::query();
    query.metadata.id = 0x1234;
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(name.clone(), RecordType::A));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    query.set_edns(edns.clone());
    let mut reply = Message::response(query.id, query.op_code);
    reply.metadata.recursion_desired = true;
    reply.metadata.recursion_available = true;
    reply.metadata.authoritative = true;
    reply.queries = query.queries.clone();
    let octets = u8::try_from(i % 250).unwrap();
    reply.add_answer(Record::from_rdata(
        name,
        30,
        RData::A(A::new(10, 1, (i / 250) as u8, octets)),
    ));
    reply.set_edns(edns);
    (query.to_vec().unwrap(), reply.to_vec().unwrap())
}

#[test]
fn memory_per_typical_entry_is_small() {
    let config = CacheConfig {
        size: ENTRIES,
        max_ttl: std::time::Duration::from_secs(3600),
        negative_ttl: std::time::Duration::from_secs(5),
        serve_stale: std::time::Duration::from_secs(300),
    };
    let metrics = Metrics::new();
    let cache = Cache::new(&config, metrics.cache(), Arc::new(Background::new(1)));
    // Everything the inserts need is made first, so only the cache's own growth is measured.
    let entries: Vec<(CacheKey, Vec<u8>)> = (0..ENTRIES)
        .map(|i| {
            let (query, reply) = typical(i);
            (
                CacheKey::from_request(&query).expect("a cacheable query"),
                reply,
            )
        })
        .collect();
    let reply_bytes = entries.iter().map(|(_, r)| r.len()).sum::<usize>() / ENTRIES;
    let now = tokio::time::Instant::now();

    let before = live();
    for (key, reply) in &entries {
        cache.insert(key, reply, now);
    }
    let grown = usize::try_from(live() - before).expect("the cache grew");

    assert_eq!(cache.len(), ENTRIES, "every entry is held");
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
    drop(entries);
}
