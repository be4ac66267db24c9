//! The log writer: log lines go to stderr from a thread of their own, never from the thread
//! that logs, so a slow or stalled stderr (a full pipe, a container runtime that stops
//! reading) never stalls DNS — even at `MESHDNS_LOG=debug`, a line per query.
//!
//! Lines wait in a queue of [`QUEUED_LINES`]; when it is full, a line is dropped at once and
//! counted (`meshdns_log_lines_dropped_total`), never waited for. tracing-subscriber formats
//! each event into one buffer and writes it with one `write_all`, so a queued item is one
//! whole line: lines are dropped whole, never cut. At exit, [`Flush`] gives the thread a moment
//! to write what is queued.
//!
//! It owns the thread and the queue; what a line says is the subscriber's format, set up by
//! the parent module.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use prometheus::IntCounter;
use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting for stderr at most: a burst of warnings fits; a debug line per query at
/// thousands of queries a second is dropped rather than held (about 0.5 MB when full).
pub(super) const QUEUED_LINES: usize = 1024;

/// How long [`Flush`] waits at exit for the queued lines to be written.
pub(super) const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Where tracing-subscriber writes its lines: a handle on the queue.
#[derive(Debug, Clone)]
pub(super) struct NonBlocking {
    queue: SyncSender<Vec<u8>>,
    dropped: IntCounter,
    progress: Arc<Progress>,
}

/// Lines queued and lines written, so that [`Flush`] can wait for the second to catch up.
#[derive(Debug, Default)]
struct Progress {
    queued: AtomicU64,
    written: Mutex<u64>,
    caught_up: Condvar,
}

/// Waits, when dropped, until every line queued so far is written or `FLUSH_TIMEOUT` (1 s) has
/// passed (a stderr that does not move must not keep the process from exiting).
#[derive(Debug)]
#[must_use = "dropping it waits for the queued lines; keep it until the end of main"]
pub struct Flush(Arc<Progress>);

impl NonBlocking {
    /// A writer whose lines `output` gets from a thread of its own, at most `capacity` of them
    /// waiting; lines beyond that are counted into `dropped`.
    pub(super) fn new(
        mut output: impl Write + Send + 'static,
        capacity: usize,
        dropped: IntCounter,
    ) -> io::Result<(Self, Flush)> {
        let (queue, lines) = mpsc::sync_channel::<Vec<u8>>(capacity);
        let progress = Arc::new(Progress::default());
        let written = Arc::clone(&progress);
        std::thread::Builder::new()
            .name("meshdns-log".into())
            .spawn(move || {
                // Ends when every handle is gone; the subscriber keeps one for the process's life.
                for line in lines {
                    // A stderr that fails has nobody to tell; the line is lost either way.
                    let _ = output.write_all(&line);
                    let mut count = written
                        .written
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    *count += 1;
                    written.caught_up.notify_all();
                }
            })?;
        let flush = Flush(Arc::clone(&progress));
        Ok((
            Self {
                queue,
                dropped,
                progress,
            },
            flush,
        ))
    }
}

impl Write for &NonBlocking {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        match self.queue.try_send(line.to_vec()) {
            Ok(()) => {
                self.progress.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => self.dropped.inc(),
        }
        // Taken whole either way: a partial write would make `write_all` queue the rest as
        // another line.
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for NonBlocking {
    type Writer = &'a NonBlocking;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        let target = self.0.queued.load(Ordering::Relaxed);
        let written = self
            .0
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .0
            .caught_up
            .wait_timeout_while(written, FLUSH_TIMEOUT, |written| *written < target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output that takes lines only once released, and tells when it first waits.
    #[derive(Clone)]
    struct Stalled {
        waiting: mpsc::Sender<()>,
        released: Arc<(Mutex<bool>, Condvar)>,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.waiting.send(());
            let (released, wake) = &*self.released;
            let guard = released.lock().unwrap();
            drop(wake.wait_while(guard, |released| !*released).unwrap());
            self.lines
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(buf).into_owned());
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn stalled() -> (Stalled, mpsc::Receiver<()>) {
        let (waiting, first_wait) = mpsc::channel();
        let output = Stalled {
            waiting,
            released: Arc::default(),
            lines: Arc::default(),
        };
        (output, first_wait)
    }

    fn counter() -> IntCounter {
        IntCounter::new("dropped", "test").unwrap()
    }

    #[test]
    fn a_stalled_output_drops_and_counts_lines_instead_of_blocking_the_logger() {
        const CAPACITY: usize = 4;
        const MORE: usize = 10;
        let (output, first_wait) = stalled();
        let dropped = counter();
        let (writer, flush) = NonBlocking::new(output.clone(), CAPACITY, dropped.clone()).unwrap();
        (&writer).write_all(b"line 0\n").unwrap();
        first_wait
            .recv_timeout(Duration::from_secs(5))
            .expect("the writer thread took the first line and is stuck on it");
        // The logging thread goes on while the output is stuck: checked from another thread,
        // so that a write that blocked fails the test instead of hanging it.
        let (done, finished) = mpsc::channel();
        let logger = {
            let writer = writer.clone();
            std::thread::spawn(move || {
                for i in 1..=MORE {
                    (&writer)
                        .write_all(format!("line {i}\n").as_bytes())
                        .unwrap();
                }
                done.send(()).unwrap();
            })
        };
        finished
            .recv_timeout(Duration::from_secs(5))
            .expect("logging never waits for the output");
        logger.join().unwrap();
        assert_eq!(dropped.get(), (MORE - CAPACITY) as u64);
        let (released, wake) = &*output.released;
        *released.lock().unwrap() = true;
        wake.notify_all();
        drop(flush);
        let lines = output.lines.lock().unwrap().clone();
        let kept: Vec<String> = (0..=CAPACITY).map(|i| format!("line {i}\n")).collect();
        assert_eq!(lines, kept, "the first lines, whole and in order");
    }

    #[test]
    fn each_event_is_one_whole_line() {
        let (output, _first_wait) = stalled();
        *output.released.0.lock().unwrap() = true;
        let (writer, flush) = NonBlocking::new(output.clone(), 16, counter()).unwrap();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for query in 0..3 {
                tracing::info!(query, "answered");
            }
        });
        drop(flush);
        let lines = output.lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 3);
        for (query, line) in lines.iter().enumerate() {
            assert!(
                line.ends_with(&format!("answered query={query}\n")),
                "{line}"
            );
            assert_eq!(line.matches('\n').count(), 1);
        }
    }
}
