//! The state of an endpoint's one connection — closed, failed and backing off, or open with
//! the table of queries waiting on it — and every change to it; the `task` module does the I/O
//! and reports here.
//!
//! All state sits behind one short-held mutex, so registering a query, dispatching a reply,
//! deciding that the connection is idle and ending it are each one step that cannot interleave
//! with another: a query is never registered on a connection that is just being closed as idle.
//!
//! The clock decides two things, both measured in the idle timeout: a connection nobody waits
//! on that has been quiet that long is closed (no backoff), and a connection on which a query
//! has waited that long with nothing at all received since it was sent is hanging — a peer
//! that accepted the connection but no longer answers, or trickles one frame forever — and is
//! given up like a closed one, rather than swallowing every query until its deadline.
//!
//! A peer may close or reset a connection while queries wait on it: servers restart, close
//! idle connections, and CoreDNS's `maxtcpqueries` closes one after a number of queries. The
//! waiting queries move to a new connection (RFC 7766 §6.2.1.1: unanswered queries may be
//! retried on a new connection) at once, with no backoff. Only when
//! [`MAX_UNANSWERED_CONNECTIONS`] connections in a row end without a single reply is that a
//! failure: the peer takes connections but does not serve them. A peer that restarts refuses
//! connections for a moment after closing them: for [`RESTART_GRACE`] after a lost connection,
//! a refused connect is tried again after the backoff with the queries kept waiting.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::task::{self, Ending};
use super::{
    BACKOFF_MAX, BACKOFF_MIN, Dial, MAX_UNANSWERED_CONNECTIONS, RESTART_GRACE, StreamError,
    StreamSettings,
};
use crate::background::Tasks;
use crate::upstream::accept;
use crate::wire;

type Reply = Result<Vec<u8>, StreamError>;

/// A query as written on the wire (length prefix and our ID), kept until it is answered so it
/// can be sent again on a new connection.
pub(super) type Frame = Bytes;

/// What an endpoint shares with its connection task.
pub(super) struct Shared {
    pub(super) addr: SocketAddr,
    pub(super) dial: Dial,
    pub(super) settings: StreamSettings,
    /// Connection attempts; counted by the task as it starts.
    pub(super) connects: AtomicU64,
    /// One permit per query waiting for its reply: the in-flight bound.
    pub(super) slots: Semaphore,
    /// Where its connection tasks run: under the endpoint's owner, in the instance's tree (the
    /// owner is the [`super::StreamEndpoint`]'s: a task holding this cannot keep it alive).
    tasks: Tasks,
    state: Mutex<State>,
}

struct State {
    link: Link,
    /// The delay after the next failure; doubled per failure, reset by a reply.
    next_backoff: Duration,
    /// Numbers connections and queries, so that news about one never touches another.
    serial: u64,
    /// Connections in a row that ended without a reply; reset by a reply.
    unanswered: u32,
    /// When the peer last closed (or reset) a connection, until a reply or a failure: a peer
    /// restarting refuses connections for a moment after that.
    lost_at: Option<Instant>,
}

enum Link {
    /// No connection: the next query opens one.
    Closed,
    /// The last connection failed; until `until`, queries fail at once with its cause.
    Failed { until: Instant, cause: StreamError },
    /// A connection being opened or open.
    Open(Conn),
}

struct Conn {
    serial: u64,
    /// Framed queries for the writer. Unbounded as a channel, bounded by the entries of
    /// `pending` (each entry queues one frame).
    frames: mpsc::UnboundedSender<Frame>,
    pending: HashMap<u16, Pending>,
    /// IDs whose caller gave up, oldest first; beyond the in-flight bound the oldest is forgotten.
    abandoned: VecDeque<(u16, u64)>,
    last_activity: Instant,
    /// When the last reply (or the connection, before any) came.
    last_reply: Instant,
    /// Whether any reply came over this connection (it resets the backoff and the count of
    /// unanswered connections, once).
    answered: bool,
}

struct Pending {
    /// Unique per query over the endpoint's life, so that a query's registration finds its own
    /// entry even after the entry moved to a new connection.
    ticket: u64,
    frame: Frame,
    sent_at: Instant,
    /// `None` once the caller gave up: the ID stays taken so that a late reply is recognised
    /// and dropped instead of being taken for another query's.
    reply: Option<oneshot::Sender<Reply>>,
}

impl State {
    /// The delay before the next connection attempt, drawn from the upper half of the current
    /// backoff, which doubles for the attempt after.
    fn backoff(&mut self) -> Duration {
        let delay = self.next_backoff.mul_f64(rand::random_range(0.5..=1.0));
        self.next_backoff = (self.next_backoff * 2).min(BACKOFF_MAX);
        delay
    }
}

impl Pending {
    fn is_waiting(&self) -> bool {
        self.reply.is_some()
    }
}

/// What the clock found when it looked at the connection.
pub(super) enum Review {
    /// Nothing to do before this instant.
    Again(Instant),
    /// Closed for idleness (or it is no longer this connection).
    Closed,
    /// A query has waited the idle timeout with nothing received since it was sent.
    Hanging(StreamError),
}

/// A query's entry in the table; dropping it (reply taken, deadline passed, caller cancelled)
/// marks the ID as no longer awaited.
pub(super) struct Registration {
    shared: Arc<Shared>,
    id: u16,
    ticket: u64,
}

impl Shared {
    pub(super) fn new(
        addr: SocketAddr,
        dial: Dial,
        settings: StreamSettings,
        tasks: Tasks,
    ) -> Self {
        Self {
            addr,
            dial,
            tasks,
            slots: Semaphore::new(settings.max_in_flight.max(1)),
            settings,
            connects: AtomicU64::new(0),
            state: Mutex::new(State {
                link: Link::Closed,
                next_backoff: BACKOFF_MIN,
                serial: 0,
                unanswered: 0,
                lost_at: None,
            }),
        }
    }

    pub(super) fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn is_connected(&self) -> bool {
        matches!(self.lock().link, Link::Open(_))
    }

    /// No critical section can panic half-way, so a poisoned lock still holds consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `query` under a fresh ID on the connection, opening one if there is none; fails at
    /// once while backing off after a failure.
    pub(super) fn register(
        self: &Arc<Self>,
        query: &[u8],
    ) -> Result<(Registration, oneshot::Receiver<Reply>), StreamError> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let now = Instant::now();
        if let Link::Failed { until, cause } = &state.link
            && now < *until
        {
            return Err(cause.clone());
        }
        let mut frame = wire::tcp_framed(query).ok_or(StreamError::BadQuery)?;
        // A connection whose task is gone without saying so (it cannot panic, but if it did)
        // must not swallow queries: treat it as closed.
        if let Link::Open(conn) = &state.link
            && conn.frames.is_closed()
        {
            state.link = Link::Closed;
        }
        if !matches!(state.link, Link::Open(_)) {
            state.link = Link::Open(self.open(&mut state.serial, now, Duration::ZERO));
        }
        state.serial += 1;
        let ticket = state.serial;
        let Link::Open(conn) = &mut state.link else {
            return Err(StreamError::Network("no connection to queue on".into()));
        };
        // Random, and free on this connection: at most twice the in-flight bound of 65,536 IDs
        // are taken, so the first try nearly always fits and the walk always ends.
        let start: u16 = rand::random();
        let id = (0..=u16::MAX)
            .map(|step| start.wrapping_add(step))
            .find(|id| !conn.pending.contains_key(id))
            .ok_or_else(|| StreamError::Network("no free message ID on the connection".into()))?;
        if let Some(message) = frame.get_mut(2..) {
            wire::set_id(message, id);
        }
        let frame = Frame::from(frame);
        conn.frames
            .send(frame.clone())
            .map_err(|_| StreamError::Network("the connection task has stopped".into()))?;
        let (reply, receiver) = oneshot::channel();
        conn.pending.insert(
            id,
            Pending {
                ticket,
                frame,
                sent_at: now,
                reply: Some(reply),
            },
        );
        conn.last_activity = now;
        let registration = Registration {
            shared: Arc::clone(self),
            id,
            ticket,
        };
        Ok((registration, receiver))
    }

    /// A new connection, its task started (connecting after `delay`); the caller makes it the
    /// link.
    fn open(self: &Arc<Self>, serial: &mut u64, now: Instant, delay: Duration) -> Conn {
        *serial += 1;
        let (frames, queue) = mpsc::unbounded_channel();
        (self.tasks).spawn(task::run(Arc::clone(self), *serial, queue, delay));
        Conn {
            serial: *serial,
            frames,
            pending: HashMap::new(),
            abandoned: VecDeque::new(),
            last_activity: now,
            last_reply: now,
            answered: false,
        }
    }

    /// Hands a reply to the query waiting for its ID when it passes the `accept` module's check
    /// for that query; anything else is dropped, and the query waits on for its own reply.
    pub(super) fn dispatch(&self, serial: u64, frame: Vec<u8>) {
        let Some(id) = wire::id(&frame) else {
            tracing::debug!(endpoint = %self.addr, "ignored a frame shorter than a message ID");
            return;
        };
        let mut guard = self.lock();
        let state = &mut *guard;
        let Link::Open(conn) = &mut state.link else {
            return;
        };
        if conn.serial != serial {
            return;
        }
        let Some(pending) = conn.pending.get(&id) else {
            tracing::debug!(endpoint = %self.addr, id, "ignored a reply with an ID we did not send");
            return;
        };
        // The query as sent: its frame after the length prefix, our ID in it.
        let query = pending.frame.get(2..).unwrap_or_default();
        if let Err(refused) = accept::check(&frame, id, query) {
            tracing::debug!(endpoint = %self.addr, id, "ignored a reply that {refused}");
            return;
        }
        match conn.pending.remove(&id).and_then(|pending| pending.reply) {
            // The caller may have given up this instant; then nobody needs the reply.
            Some(reply) => drop(reply.send(Ok(frame))),
            None => {
                tracing::debug!(endpoint = %self.addr, id, "a reply came after its query gave up");
            }
        }
        let now = Instant::now();
        conn.last_activity = now;
        conn.last_reply = now;
        if !conn.answered {
            conn.answered = true;
            state.next_backoff = BACKOFF_MIN;
            state.unanswered = 0;
            state.lost_at = None;
        }
    }

    /// Closes the connection if nobody waits on it and it has been quiet for the idle timeout,
    /// finds it hanging if a query has waited that long with nothing received since, or says
    /// when to look again.
    pub(super) fn review(&self, serial: u64) -> Review {
        let mut state = self.lock();
        let Link::Open(conn) = &state.link else {
            return Review::Closed;
        };
        if conn.serial != serial {
            return Review::Closed;
        }
        let now = Instant::now();
        let limit = self.settings.idle_timeout;
        let waiting = conn.pending.values().any(Pending::is_waiting);
        let quiet_until = conn.last_activity + limit;
        if !waiting {
            if now >= quiet_until {
                state.link = Link::Closed;
                return Review::Closed;
            }
            return Review::Again(quiet_until);
        }
        // The oldest query sent after the last reply: nothing has come since it was sent.
        let unanswered_since = conn
            .pending
            .values()
            .map(|p| p.sent_at)
            .filter(|sent| *sent >= conn.last_reply)
            .min();
        match unanswered_since {
            Some(since) if now >= since + limit => Review::Hanging(StreamError::Network(format!(
                "no reply for {limit:?} with {} queries outstanding",
                conn.pending.len()
            ))),
            Some(since) => Review::Again(since + limit),
            None => Review::Again(now + limit),
        }
    }

    /// Records how the connection `serial` ended: an idle close leaves nothing behind; a
    /// connection the peer closed (or that hangs) hands its waiting queries to a new one, unless
    /// too many in a row ended unanswered; a failure fails every waiting query with its cause
    /// and starts the backoff.
    pub(super) fn finish(self: &Arc<Self>, serial: u64, ending: Ending) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Link::Open(conn) = &state.link else {
            return;
        };
        if conn.serial != serial {
            return;
        }
        let waiting = conn.pending.values().filter(|p| p.is_waiting()).count();
        // A hanging connection stopped answering, whatever it did before.
        let hanging = matches!(ending, Ending::Hanging(_));
        let cause = match ending {
            Ending::Idle => None,
            Ending::Closed(_) if waiting == 0 => {
                state.lost_at.get_or_insert(Instant::now());
                None
            }
            Ending::Closed(cause) | Ending::Hanging(cause) => {
                if hanging || !conn.answered {
                    state.unanswered += 1;
                }
                if state.unanswered < MAX_UNANSWERED_CONNECTIONS {
                    tracing::debug!(endpoint = %self.addr, %cause, waiting, "connection lost; sending its unanswered queries on a new one");
                    state.lost_at.get_or_insert(Instant::now());
                    self.reopen(state, Duration::ZERO);
                    return;
                }
                Some(StreamError::Network(format!(
                    "{} connections in a row ended without a reply (last: {cause})",
                    state.unanswered
                )))
            }
            Ending::Refused(cause) => match state.lost_at {
                Some(lost) if lost.elapsed() < RESTART_GRACE => {
                    let delay = state.backoff();
                    tracing::debug!(endpoint = %self.addr, %cause, waiting, ?delay, "connect refused just after the peer closed a connection; trying again");
                    if waiting == 0 {
                        state.link = Link::Closed;
                    } else {
                        self.reopen(state, delay);
                    }
                    return;
                }
                _ => Some(cause),
            },
            Ending::Failed(cause) => Some(cause),
        };
        let Some(cause) = cause else {
            tracing::debug!(endpoint = %self.addr, "connection closed");
            state.link = Link::Closed;
            return;
        };
        state.unanswered = 0;
        state.lost_at = None;
        let delay = state.backoff();
        tracing::debug!(endpoint = %self.addr, %cause, waiting, ?delay, "connection failed");
        let failed = Link::Failed {
            until: Instant::now() + delay,
            cause: cause.clone(),
        };
        if let Link::Open(conn) = std::mem::replace(&mut state.link, failed) {
            for reply in conn.pending.into_values().filter_map(|p| p.reply) {
                let _ = reply.send(Err(cause.clone()));
            }
        }
    }

    /// Replaces the open connection by a new one (connecting after `delay`) carrying its
    /// waiting queries, under the IDs they had (the new connection has no others); queries
    /// whose caller gave up are dropped.
    fn reopen(self: &Arc<Self>, state: &mut State, delay: Duration) {
        let Link::Open(old) = std::mem::replace(&mut state.link, Link::Closed) else {
            return;
        };
        let now = Instant::now();
        let mut new = self.open(&mut state.serial, now, delay);
        for (id, pending) in old.pending {
            if pending.is_waiting() {
                // The new task is alive (just spawned): the send cannot fail, and if it did
                // the query would wait out its deadline, not hang.
                let _ = new.frames.send(pending.frame.clone());
                new.pending.insert(
                    id,
                    Pending {
                        sent_at: now,
                        ..pending
                    },
                );
            }
        }
        state.link = Link::Open(new);
    }

    /// Forgets the connection (the endpoint is being dropped: its owner ends the task).
    pub(super) fn stop(&self) {
        self.lock().link = Link::Closed;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let Link::Open(conn) = &mut state.link else {
            return;
        };
        let Some(pending) = conn.pending.get_mut(&self.id) else {
            return;
        };
        if pending.ticket != self.ticket || pending.reply.take().is_none() {
            return;
        }
        conn.abandoned.push_back((self.id, self.ticket));
        while conn.abandoned.len() > self.shared.settings.max_in_flight {
            let Some((id, ticket)) = conn.abandoned.pop_front() else {
                break;
            };
            if conn
                .pending
                .get(&id)
                .is_some_and(|p| p.ticket == ticket && !p.is_waiting())
            {
                conn.pending.remove(&id);
            }
        }
    }
}
