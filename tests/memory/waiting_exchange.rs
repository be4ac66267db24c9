//! Memory held by upstream exchanges waiting on a silent endpoint, measured: what a miss in
//! flight costs the upstream side during flood (b) of the bench's `overload` group (misses to
//! a black-holed kube-dns, each waiting out its deadline). A counting allocator around the
//! system one tracks the bytes live on the heap; the exchanges are boxed, as the task that
//! runs a miss holds its exchange, and each has made both of its attempts (the second, after
//! the attempt timeout, listening beside the first), so each holds its own future, the room
//! for its second attempt, two sockets' registrations and its copies of the query.
//!
//! It runs alone (`tests/memory/main.rs`): nothing else allocates in this process while it measures.

use meshdns::testing::memory::WaitingExchanges;

use crate::support::counting;

use counting::live;

const SILENT: &str = "the endpoint is silent: still waiting";

const EXCHANGES: usize = 200;

/// What one waiting exchange may hold in all. Measured on x86_64 Linux (debug build, as
/// `cargo test` runs it): 2,830 bytes per exchange before the attempt's future shed its room
/// for a stream exchange (an attempt's future is held once inline and once in the box of a
/// second attempt), 2,307 after. The bound leaves 10% for changes of layout; a change that
/// crosses it should say why the exchange grew.
const BYTES_PER_EXCHANGE_BOUND: usize = 2_560;

#[test]
fn an_exchange_waiting_on_a_silent_endpoint_holds_little_memory() {
    crate::alone_on_one_thread(measure());
}

async fn measure() {
    let exchanges = (WaitingExchanges::warmed(EXCHANGES).await)
        .expect("the warming exchanges fail: the endpoint is silent");

    let held = exchanges.hold(live).await;
    assert!(held.still_waiting, "{SILENT}");
    let held = usize::try_from(held.bytes).expect("the exchanges hold memory");

    let per_exchange = held / EXCHANGES;
    println!("{held} bytes for {EXCHANGES} waiting exchanges = {per_exchange} bytes each");
    assert!(
        per_exchange <= BYTES_PER_EXCHANGE_BOUND,
        "{per_exchange} bytes per waiting exchange, more than {BYTES_PER_EXCHANGE_BOUND}"
    );
}
