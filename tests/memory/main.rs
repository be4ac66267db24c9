//! The memory measurements, in one binary of their own: a counting allocator around the
//! system one ([`support::counting`]) is this process's `#[global_allocator]`, and each test reads the
//! bytes live on the heap before and after what it measures. A count is the whole process's, so
//! the tests here run one at a time ([`alone`]), never beside the behaviour tests
//! (`tests/behaviour/`), whose allocations would be counted too.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

#[path = "../support/mod.rs"]
mod support;

mod cache_entry;
mod miss_in_flight;
mod open_tcp_connection;
mod waiting_exchange;

#[global_allocator]
static ALLOCATOR: support::counting::Counting = support::counting::Counting;

/// Held by the test that measures: the others wait for it before they start.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits until no other test of this binary runs; the test runs alone while it holds the guard.
/// A test that failed while holding it leaves nothing shared behind, so its poison is ignored.
fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `measurement` alone on a current-thread runtime, as `#[tokio::test]` would: the
/// runtime is built once the test runs alone and dropped, with every task left on it, before
/// the next test starts, so no runtime of another test is counted.
fn alone_on_one_thread(measurement: impl Future<Output = ()>) {
    let _alone = alone();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(measurement);
}
