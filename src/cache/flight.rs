//! Single-flight: identical misses in flight share one upstream exchange.
//!
//! The first miss for a key becomes the [`FlightLeader`] and asks upstream; misses for the same
//! key that arrive meanwhile get a [`FlightFollower`] and wait for the leader's reply, which
//! they patch with their own ID, RD, CD and AD bits and question spelling. If the leader goes
//! away without a reply (its task cancelled: the client's connection closed, the background
//! set closed at shutdown, a refresh refused), its guard's `Drop` closes the
//! flight and every follower's [`FlightFollower::wait`] returns `None`: the caller then asks
//! for a flight again, so one follower becomes the new leader and the others follow it — never
//! a herd, never a SERVFAIL caused only by someone else's cancellation. Waiting is bounded by
//! the caller's own deadline (`get_or_resolve` wraps `wait` in `tokio::time::timeout_at`).
//!
//! Flights belong to a generation (the configuration their exchange runs on): a miss never
//! follows a flight of an older generation than its own — after a reload it leads a new one
//! (which takes the key's place in the table), so no query of the new configuration waits on,
//! or inherits the failure of, an exchange to an endpoint the reload replaced. The old
//! flight's followers (queries of the old configuration) still get its reply.
//!
//! The table holds one entry per key in flight, so it is bounded by the in-flight query cap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use super::Generation;
use super::key::CacheKey;
use super::serve::patch_header_and_question;

type Outcome = Option<Arc<[u8]>>;

/// A flight in the table: its leader's ID, its generation, and where its reply comes.
#[derive(Debug)]
struct InFlight {
    id: u64,
    generation: Generation,
    receiver: watch::Receiver<Outcome>,
}

#[derive(Debug, Default)]
pub(super) struct Flights {
    table: Mutex<HashMap<CacheKey, InFlight>>,
    next_id: AtomicU64,
}

/// What a miss in [`Cache::get_or_resolve`](super::Cache::get_or_resolve) is handed: lead or
/// follow.
#[derive(Debug)]
pub enum Flight {
    /// Ask upstream, then [`FlightLeader::finish`] with the reply.
    Leader(FlightLeader),
    /// Someone else is asking: [`FlightFollower::wait`] for their reply.
    Follower(FlightFollower),
}

/// The one miss per key that asks upstream. Dropping it without `finish` releases the
/// followers (they then elect a new leader).
#[derive(Debug)]
pub struct FlightLeader {
    flights: Arc<Flights>,
    key: CacheKey,
    id: u64,
    generation: Generation,
    sender: watch::Sender<Outcome>,
}

/// A miss that waits for the leader's reply instead of asking upstream itself.
#[derive(Debug)]
pub struct FlightFollower {
    receiver: watch::Receiver<Outcome>,
}

impl Flights {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, InFlight>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follow the flight of `key` if one of `generation` or newer is in the air, else lead.
    pub(super) fn join(self: &Arc<Self>, key: &CacheKey, generation: Generation) -> Flight {
        let mut table = self.lock();
        if let Some(flight) = table.get(key)
            && flight.generation >= generation
        {
            return Flight::Follower(FlightFollower {
                receiver: flight.receiver.clone(),
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = watch::channel(None);
        // An older flight's entry is replaced; its leader's drop leaves this one alone.
        table.insert(
            key.clone(),
            InFlight {
                id,
                generation,
                receiver,
            },
        );
        Flight::Leader(FlightLeader {
            flights: Arc::clone(self),
            key: key.clone(),
            id,
            generation,
            sender,
        })
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl FlightLeader {
    /// The configuration this flight's exchange runs on: what it writes carries it.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Hands the reply meant for the leader's own client (complete, before any cut to a UDP
    /// size) to every follower. Insert it into the cache first, so a miss that comes after
    /// the flight closed finds it there.
    pub fn finish(self, reply: Arc<[u8]>) {
        self.sender.send_replace(Some(reply));
    }
}

impl Drop for FlightLeader {
    fn drop(&mut self) {
        let mut table = self.flights.lock();
        if table
            .get(&self.key)
            .is_some_and(|flight| flight.id == self.id)
        {
            table.remove(&self.key);
        }
        // `self.sender` drops after this: followers still waiting see the channel closed.
    }
}

impl FlightFollower {
    /// The leader's reply patched for `request` (whose key is `key`: ID, RD, CD and AD bits,
    /// question spelling), or `None` if the leader went away without one: then join the
    /// flight again, as [`Cache::get_or_resolve`](super::Cache::get_or_resolve) does.
    pub async fn wait(mut self, request: &[u8], key: &CacheKey) -> Option<Vec<u8>> {
        let shared = self
            .receiver
            .wait_for(Option::is_some)
            .await
            .ok()?
            .clone()?;
        let mut reply = shared.to_vec();
        patch_header_and_question(&mut reply, request, key).then_some(reply)
    }
}
