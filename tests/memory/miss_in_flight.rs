//! Memory held by misses in flight to a silent upstream, measured: flood (b) of the bench's
//! `overload` group (misses to a black-holed kube-dns, up to `MESHDNS_MAX_INFLIGHT` of them
//! waiting out their deadline) in small. A counting allocator around the system one tracks
//! the bytes live on the heap; each miss is a distinct name answered through
//! `Resolver::handle`, boxed as the task that runs a miss holds it, and polled until its
//! exchange has made both of its attempts. What a miss then holds is its future, the leader's
//! box of its resolution, its flight, the upstream's room for a second attempt, two sockets'
//! registrations and its copies of the query.
//!
//! It runs alone (`tests/memory/main.rs`): nothing else allocates in this process while it measures.

use meshdns::testing::memory::MissesInFlight;

use crate::support::counting;

use counting::live;

const SILENT: &str = "the upstream is silent: still waiting";

const MISSES: usize = 200;

/// What one miss in flight may hold in all. Measured on x86_64 Linux (debug build, as
/// `cargo test` runs it): 9,528 bytes per miss before (the cache's future holding a
/// resolution passed by value twice, dead, besides the copy it boxes; the attempt's future
/// with room for a stream exchange), 5,221 after (the leader boxes the resolution it makes;
/// awaited inline it is 4,757, but glibc's heap then fragments further under a flood: 21.7
/// against 17.1 MiB peak). The bound leaves room for changes of layout; a change that crosses
/// it should say why a miss grew.
const BYTES_PER_MISS_BOUND: usize = 6_000;

#[test]
fn a_miss_waiting_on_a_silent_upstream_holds_little_memory() {
    crate::alone_on_one_thread(measure());
}

async fn measure() {
    let misses = (MissesInFlight::warmed(MISSES).await)
        .expect("the warming misses are answered (SERVFAIL) at the deadline");

    let held = misses.hold(live).await;
    assert!(held.still_waiting, "{SILENT}");
    let held = usize::try_from(held.bytes).expect("the misses hold memory");

    let per_miss = held / MISSES;
    println!("{held} bytes for {MISSES} misses in flight = {per_miss} bytes each");
    assert!(
        per_miss <= BYTES_PER_MISS_BOUND,
        "{per_miss} bytes per miss in flight, more than {BYTES_PER_MISS_BOUND}"
    );
}
