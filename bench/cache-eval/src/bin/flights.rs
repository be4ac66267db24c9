//! Single-flight: 50 clients miss on the same name at once, the upstream answers after 20 ms.
//! Counts the upstream exchanges and the time until every client has its answer, for meshdns's
//! `Cache::get_or_resolve` (flight.rs) and for quick_cache's `get_value_or_guard_async`
//! (`PlaceholderGuard`), once with a cacheable answer (TTL 30) and once with one that must not
//! be stored (TTL 0: quick_cache's waiters only get a value through the cache).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cache_eval::{QcEntry, QuickCache, meshdns_cache, quick_cache, served, typical_with_ttl};
use meshdns::cache::Miss;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

const CLIENTS: usize = 50;
const UPSTREAM: Duration = Duration::from_millis(20);

/// Upstream exchanges made, clients answered, and how long it took.
struct Outcome(usize, usize, Duration);

async fn meshdns(ttl: u32) -> Outcome {
    let cache = meshdns_cache(1_000);
    let asked = Arc::new(AtomicUsize::new(0));
    let e = Arc::new(typical_with_ttl(0, ttl));
    let start = Instant::now();
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let (cache, asked, e) = (Arc::clone(&cache), Arc::clone(&asked), Arc::clone(&e));
        clients.spawn(async move {
            let miss = Miss {
                deadline: Instant::now() + Duration::from_secs(5),
                client_timer: Duration::from_millis(1_500),
                upstream_failing: false,
                generation: meshdns::cache::Generation::default(),
            };
            let reply = e.reply.clone();
            let resolve = async move {
                asked.fetch_add(1, Ordering::Relaxed);
                sleep(UPSTREAM).await;
                reply
            };
            cache.get_or_resolve(&e.key, &e.query, miss, resolve).await
        });
    }
    let answered = clients.join_all().await.iter().flatten().count();
    Outcome(asked.load(Ordering::Relaxed), answered, start.elapsed())
}

async fn quick(ttl: u32) -> Outcome {
    let cache: Arc<QuickCache<Arc<QcEntry>>> =
        Arc::new(quick_cache(1_000, None, Default::default()));
    let asked = Arc::new(AtomicUsize::new(0));
    let e = Arc::new(typical_with_ttl(0, ttl));
    let start = Instant::now();
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let (cache, asked, e) = (Arc::clone(&cache), Arc::clone(&asked), Arc::clone(&e));
        clients.spawn(async move {
            let key: Arc<[u8]> = e.key.as_bytes().into();
            match cache.get_value_or_guard_async(&key).await {
                Ok(entry) => served(&entry.bytes, &e.query, Duration::ZERO),
                Err(guard) => {
                    asked.fetch_add(1, Ordering::Relaxed);
                    sleep(UPSTREAM).await;
                    if ttl > 0 {
                        let entry = QcEntry::new(&e.reply, Instant::now(), Duration::from_secs(30));
                        let _ = guard.insert(entry);
                    }
                    // Else the guard drops unfilled: the next waiter becomes the loader.
                    Some(e.reply.clone())
                }
            }
        });
    }
    let answered = clients.join_all().await.iter().flatten().count();
    Outcome(asked.load(Ordering::Relaxed), answered, start.elapsed())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    for ttl in [30, 0] {
        for (table, Outcome(asked, answered, took)) in
            [("meshdns", meshdns(ttl).await), ("qc", quick(ttl).await)]
        {
            println!(
                "TTL {ttl:>2}, {table:<7}: {asked} upstream exchanges for {CLIENTS} clients, \
                 {answered} answered, all within {} ms",
                took.as_millis()
            );
        }
    }
}
