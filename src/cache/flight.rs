//! Single-flight: identical misses in flight share one upstream exchange. It owns the table of
//! flights and nothing more: it stores no answer (the parent settles a finished exchange) and
//! never asks upstream itself (the leader's caller runs the exchange).
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
//! The table holds one entry per key in flight, and one per flight displaced by a newer
//! generation's that has followers, so it is bounded by the in-flight query cap.
//!
//! Cost: most misses have no follower, so a flight costs its leader one hash of the key
//! (foldhash, kept with the key for both table look-ups) and two short lock holds; the channel
//! followers wait on is made by the first follower, so a leader without followers sends and
//! wakes nothing.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use super::Generation;
use super::key::CacheKey;
use super::serve::patch_header_and_question;

type Outcome = Option<Arc<[u8]>>;

/// A key with its hash, computed once per flight by [`Flights::join`]; the table's hasher
/// only passes it on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HashedKey {
    hash: u64,
    key: CacheKey,
}

impl Hash for HashedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The table's hasher: the hash [`HashedKey`] carries.
#[derive(Debug, Default)]
struct CarriedHash(u64);

impl Hasher for CarriedHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    // Not reached (`HashedKey` writes one u64); a fold, so it would still be a hash.
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }
}

/// A flight in the table: its leader's ID, its generation, and, once a follower came, the
/// channel its reply goes out on.
#[derive(Debug)]
struct InFlight {
    id: u64,
    generation: Generation,
    followers: Option<watch::Sender<Outcome>>,
}

#[derive(Debug, Default)]
struct Table {
    flights: HashMap<HashedKey, InFlight, BuildHasherDefault<CarriedHash>>,
    /// The followers' channels of flights whose key a newer generation's flight took (after a
    /// reload), by leader ID, until their leader finishes or goes away.
    displaced: HashMap<u64, watch::Sender<Outcome>>,
}

#[derive(Debug, Default)]
pub(super) struct Flights {
    table: Mutex<Table>,
    /// foldhash, seeded at random per table (as the cache's index).
    hasher: foldhash::fast::RandomState,
    next_id: AtomicU64,
}

/// What a miss in [`Cache::get_or_resolve`](super::Cache::get_or_resolve) is handed: lead or
/// follow.
#[derive(Debug)]
pub(super) enum Flight {
    /// Ask upstream, then [`FlightLeader::finish`] with the reply.
    Leader(FlightLeader),
    /// Someone else is asking: [`FlightFollower::wait`] for their reply.
    Follower(FlightFollower),
}

/// The one miss per key that asks upstream. Dropping it without `finish` releases the
/// followers (they then elect a new leader).
#[derive(Debug)]
pub(super) struct FlightLeader {
    flights: Arc<Flights>,
    key: HashedKey,
    id: u64,
    generation: Generation,
    /// Taken out of the table already (by `finish`).
    closed: bool,
}

/// A miss that waits for the leader's reply instead of asking upstream itself.
#[derive(Debug)]
pub(super) struct FlightFollower {
    receiver: watch::Receiver<Outcome>,
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follow the flight of `key` if one of `generation` or newer is in the air, else lead.
    pub(super) fn join(self: &Arc<Self>, key: &CacheKey, generation: Generation) -> Flight {
        let key = HashedKey {
            hash: self.hasher.hash_one(key),
            key: key.clone(),
        };
        let mut table = self.lock();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let flight = InFlight {
            id,
            generation,
            followers: None,
        };
        match table.flights.entry(key.clone()) {
            Entry::Occupied(mut entry) if entry.get().generation >= generation => {
                let flight = entry.get_mut();
                let receiver = match &flight.followers {
                    Some(sender) => sender.subscribe(),
                    None => {
                        let (sender, receiver) = watch::channel(None);
                        flight.followers = Some(sender);
                        receiver
                    }
                };
                return Flight::Follower(FlightFollower { receiver });
            }
            // An older flight's entry is replaced; its followers' channel waits for its
            // leader among the displaced ones.
            Entry::Occupied(mut entry) => {
                let older = entry.insert(flight);
                if let Some(sender) = older.followers {
                    table.displaced.insert(older.id, sender);
                }
            }
            Entry::Vacant(entry) => {
                entry.insert(flight);
            }
        }
        drop(table);
        Flight::Leader(FlightLeader {
            flights: Arc::clone(self),
            key,
            id,
            generation,
            closed: false,
        })
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let table = self.lock();
        table.flights.len() + table.displaced.len()
    }
}

impl FlightLeader {
    /// The configuration this flight's exchange runs on: what it writes carries it.
    pub(super) fn generation(&self) -> Generation {
        self.generation
    }

    /// Hands the reply meant for the leader's own client (complete, before any cut to a UDP
    /// size), made by `shared` only if a follower came, to every follower. Insert it into the
    /// cache first, so a miss that comes after the flight closed finds it there.
    pub(super) fn finish(mut self, shared: impl FnOnce() -> Arc<[u8]>) {
        if let Some(followers) = self.close() {
            followers.send_replace(Some(shared()));
        }
    }

    /// Takes the flight out of the table; returns its followers' channel, if any came.
    fn close(&mut self) -> Option<watch::Sender<Outcome>> {
        self.closed = true;
        let mut table = self.flights.lock();
        match table.flights.remove(&self.key) {
            Some(ours) if ours.id == self.id => ours.followers,
            // A newer generation's flight took the key (rare: after a reload): it stays, and
            // this flight's followers' channel, if any, is among the displaced ones.
            newer => {
                if let Some(newer) = newer {
                    table.flights.insert(self.key.clone(), newer);
                }
                if table.displaced.is_empty() {
                    None
                } else {
                    table.displaced.remove(&self.id)
                }
            }
        }
    }
}

impl Drop for FlightLeader {
    fn drop(&mut self) {
        if !self.closed {
            // Dropped after the lock: followers still waiting see the channel closed.
            drop(self.close());
        }
    }
}

impl FlightFollower {
    /// The leader's reply patched for `request` (whose key is `key`: ID, RD, CD and AD bits,
    /// question spelling), or `None` if the leader went away without one: then join the
    /// flight again, as [`Cache::get_or_resolve`](super::Cache::get_or_resolve) does.
    pub(super) async fn wait(mut self, request: &[u8], key: &CacheKey) -> Option<Vec<u8>> {
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
