//! The CPU cost of a cache hit: 10,000 typical entries, hits in a Zipf order (the same order
//! for every table), each hit producing the patched reply a client would get.
//!
//! Variants (`hits RUNS PASSES [VARIANT…]`, all by default; a run of a variant is PASSES passes
//! over one order of 100,000 hits):
//! - `meshdns`: `meshdns::cache::Cache::lookup` — lock, index, entry state, recency lists,
//!   `Arc` clone, hit counter, reply copied and patched;
//! - `qc`: the same hit over quick_cache (`cache_eval::qc_lookup`), foldhash (its default),
//!   one shard (a cache of 10,000 in 8 shards holds only ~9,900 of the 10,000 entries);
//! - `qc-siphash`: the same with std's SipHash, the hasher meshdns's index uses;
//! - `qc-bytes`: quick_cache holding only the reply (`Arc<[u8]>`): get, clone, patch — the
//!   table alone, without the entry state meshdns needs;
//! - `patch`: the reply copied and patched alone, what every variant does after the table.
//!
//! Prints, per variant, ns per hit: median, min and max over the runs (the variants take
//! turns within each run, so machine noise falls on all of them alike). Under callgrind, run
//! one variant at two PASSES counts: the difference of the totals over the difference of the
//! hits (warm-up included) is the instructions per hit, setup cancelled out.

use std::hash::RandomState;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use cache_eval::{
    QcEntry, QuickCache, meshdns_cache, qc_lookup, quick_cache, served, typical, zipf_order,
};
use meshdns::cache::Lookup;
use meshdns::metrics::Metrics;
use tokio::time::Instant;

const ENTRIES: usize = 10_000;
const VARIANTS: [&str; 5] = ["meshdns", "qc", "qc-siphash", "qc-bytes", "patch"];

/// The length of the Zipf order: fixed, so that setup costs the same at any PASSES.
const ORDER: usize = 100_000;

/// Runs `hit` `passes` times for every entry number of `order`; ns per hit.
fn time(order: &[u32], passes: usize, mut hit: impl FnMut(usize) -> usize) -> f64 {
    let start = std::time::Instant::now();
    let mut sum = 0;
    for _ in 0..passes {
        for &i in order {
            sum += hit(i as usize);
        }
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / (passes * order.len()) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map_or(7, |a| a.parse().expect("RUNS"));
    let passes: usize = args.get(1).map_or(10, |a| a.parse().expect("PASSES"));
    let chosen: Vec<&str> = if args.len() > 2 {
        args[2..].iter().map(String::as_str).collect()
    } else {
        VARIANTS.to_vec()
    };

    let entries: Vec<_> = (0..ENTRIES).map(typical).collect();
    let order = zipf_order(ENTRIES, ORDER, 18);
    let stored = Instant::now();
    // Five seconds into the 30 s TTL: fresh, TTLs counted down, no refresh due.
    let now = stored + Duration::from_secs(5);
    let age = now - stored;

    let meshdns = meshdns_cache(ENTRIES);
    let qc: QuickCache<Arc<QcEntry>> = quick_cache(ENTRIES, Some(1), Default::default());
    let qc_sip: QuickCache<Arc<QcEntry>, RandomState> =
        quick_cache(ENTRIES, Some(1), RandomState::new());
    let qc_bytes: QuickCache<Arc<[u8]>> = quick_cache(ENTRIES, Some(1), Default::default());
    let ttl = Duration::from_secs(30);
    for e in &entries {
        meshdns.insert(&e.key, &e.reply, stored, Default::default());
        let key: Arc<[u8]> = e.key.as_bytes().into();
        qc.insert(Arc::clone(&key), QcEntry::new(&e.reply, stored, ttl));
        qc_sip.insert(Arc::clone(&key), QcEntry::new(&e.reply, stored, ttl));
        qc_bytes.insert(key, e.reply.as_slice().into());
    }
    assert_eq!(meshdns.len(), ENTRIES);
    assert_eq!(
        (qc.len(), qc_sip.len(), qc_bytes.len()),
        (ENTRIES, ENTRIES, ENTRIES)
    );
    let metrics = Metrics::new().cache();

    let hit = |variant: &str| -> f64 {
        match variant {
            "meshdns" => time(&order, passes, |i| {
                let e = &entries[i];
                match meshdns.lookup(&e.key, &e.query, now) {
                    Lookup::Fresh { reply, .. } => reply.len(),
                    Lookup::Miss => panic!("every entry is fresh"),
                }
            }),
            "qc" => time(&order, passes, |i| {
                let e = &entries[i];
                qc_lookup(&qc, &metrics, &e.key, &e.query, now).map_or(0, |(r, _)| r.len())
            }),
            "qc-siphash" => time(&order, passes, |i| {
                let e = &entries[i];
                qc_lookup(&qc_sip, &metrics, &e.key, &e.query, now).map_or(0, |(r, _)| r.len())
            }),
            "qc-bytes" => time(&order, passes, |i| {
                let e = &entries[i];
                let bytes = qc_bytes.get(e.key.as_bytes()).expect("held");
                served(&bytes, &e.query, age).map_or(0, |r| r.len())
            }),
            "patch" => time(&order, passes, |i| {
                let e = &entries[i];
                served(&e.reply, &e.query, age).map_or(0, |r| r.len())
            }),
            other => panic!("unknown variant {other}"),
        }
    };

    // Warm-up: caches, branch predictors, the allocator's free lists.
    for variant in &chosen {
        hit(variant);
    }
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); chosen.len()];
    for _ in 0..runs {
        for (variant, result) in chosen.iter().zip(&mut results) {
            result.push(hit(variant));
        }
    }
    let hits = passes * ORDER;
    println!("{hits} hits per run, {runs} runs, {ENTRIES} entries, Zipf s = 1");
    println!("variant      median ns/hit   min    max");
    for (variant, mut result) in chosen.iter().zip(results) {
        result.sort_by(f64::total_cmp);
        println!(
            "{variant:<12} {:>10.1} {:>8.1} {:>6.1}",
            result[result.len() / 2],
            result[0],
            result[result.len() - 1]
        );
    }
}
