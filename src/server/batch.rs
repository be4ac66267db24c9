//! Batched UDP I/O: one `recvmmsg` takes every datagram waiting on the socket (up to
//! [`BATCH`]), one `sendmmsg` sends every reply of a batch. Under load that is two system
//! calls for dozens of queries; at a pod's real rate (one query at a time) it is what lets the
//! loop stop after one receive that did not fill the batch, instead of asking again only to
//! hear EAGAIN. Through nix, a maintained crate with safe wrappers over the system calls.
//!
//! It owns the system calls and their buffers only: what a datagram means, and what is sent
//! back, is the UDP loop's.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg,
};

/// Datagrams taken per receive.
pub(super) const BATCH: usize = 32;

/// Replies sent per `sendmmsg`: the replies of a batch go out in groups of this many as they
/// are made, not all after the batch's last datagram. After the thread loses its CPU for a
/// while, a full batch of 32 kept the first reply of the backlog waiting for 31 others (about
/// 110 µs on the bench host); in groups of 8 it waits for 7 at most, and cache-hit throughput
/// did not drop (bench/results/steps.md, round three).
pub(super) const SEND_GROUP: usize = 8;

/// The room for one datagram. A query is a header, a question and an OPT record — a few
/// hundred bytes; a larger one arrives cut (and is answered FORMERR from its header).
pub(super) const SLOT: usize = 4096;

/// One datagram of a batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Datagram<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) peer: SocketAddr,
    /// Longer than [`SLOT`]: only its first bytes are here.
    pub(crate) truncated: bool,
}

/// The receive side: [`BATCH`] slots of [`SLOT`] bytes, reused for every batch.
pub(super) struct Inbox {
    buffer: Vec<u8>,
    received: Vec<(usize, Option<SocketAddr>, bool)>,
}

impl Default for Inbox {
    fn default() -> Self {
        Self {
            buffer: vec![0; BATCH * SLOT],
            received: Vec::with_capacity(BATCH),
        }
    }
}

impl Inbox {
    /// Takes what is waiting, without blocking: how many datagrams (1..=[`BATCH`]), or
    /// `WouldBlock` when there were none.
    pub(super) fn receive(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.received.clear();
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
        let mut slices: Vec<[IoSliceMut<'_>; 1]> = self
            .buffer
            .chunks_mut(SLOT)
            .map(|slot| [IoSliceMut::new(slot)])
            .collect();
        let results = recvmmsg(
            socket.as_raw_fd(),
            &mut headers,
            slices.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        )
        .map_err(io::Error::from)?;
        for message in results {
            self.received.push((
                message.bytes.min(SLOT),
                message.address.and_then(|a| std_address(&a)),
                message.flags.contains(MsgFlags::MSG_TRUNC),
            ));
        }
        Ok(self.received.len())
    }

    /// The datagrams of the last receive (those with an address meshdns can answer).
    pub(super) fn datagrams(&self) -> impl Iterator<Item = Datagram<'_>> {
        self.received
            .iter()
            .zip(self.buffer.chunks(SLOT))
            .filter_map(|(&(len, peer, truncated), slot)| {
                Some(Datagram {
                    bytes: slot.get(..len)?,
                    peer: peer?,
                    truncated,
                })
            })
    }
}

fn std_address(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6((*v6).into()))
}

/// The send side: the replies of a group with their peers, sent [`SEND_GROUP`] at a time. What
/// a group needs is kept for the next: the destinations as `sendmmsg` takes them, and the
/// buffers of sent replies (a group's worth, none larger than a [`SLOT`]), so a cache hit's
/// reply allocates nothing.
#[derive(Default)]
pub(super) struct Outbox {
    replies: Vec<(Vec<u8>, SocketAddr)>,
    addresses: Vec<Option<SockaddrStorage>>,
    spare: Vec<Vec<u8>>,
}

impl Outbox {
    /// An empty buffer for the next reply: a sent reply's, when one is kept.
    pub(super) fn buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Queues `reply` to `peer`, and sends the group once it is full.
    pub(super) fn push(&mut self, socket: &UdpSocket, reply: Vec<u8>, peer: SocketAddr) {
        self.replies.push((reply, peer));
        if self.replies.len() == SEND_GROUP {
            self.flush(socket);
        }
    }

    /// Sends the replies queued so far without blocking, in one system call when the kernel
    /// takes them all; a reply that finds the send buffer full is dropped, as the network
    /// would drop it (the client asks again). Returns how many went out.
    pub(super) fn flush(&mut self, socket: &UdpSocket) -> usize {
        let sent = self.send(socket);
        for (mut reply, _) in self.replies.drain(..) {
            if self.spare.len() < SEND_GROUP && reply.capacity() <= SLOT {
                reply.clear();
                self.spare.push(reply);
            }
        }
        sent
    }

    fn send(&mut self, socket: &UdpSocket) -> usize {
        let replies = &self.replies[..];
        match replies {
            [] => 0,
            [(reply, peer)] => usize::from(send_one(socket, reply, *peer)),
            _ => {
                self.addresses.clear();
                let destinations = replies.iter().map(|(_, peer)| SockaddrStorage::from(*peer));
                self.addresses.extend(destinations.map(Some));
                // A group holds at most SEND_GROUP replies (any beyond would go one by one).
                let mut slices = [[IoSlice::new(&[])]; SEND_GROUP];
                for (slice, (reply, _)) in slices.iter_mut().zip(replies) {
                    *slice = [IoSlice::new(reply)];
                }
                let group = &slices[..replies.len().min(SEND_GROUP)];
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(group.len(), None);
                let no_control: [ControlMessage<'_>; 0] = [];
                let sent = sendmmsg(
                    socket.as_raw_fd(),
                    &mut headers,
                    group.iter(),
                    &self.addresses[..],
                    no_control,
                    MsgFlags::MSG_DONTWAIT,
                )
                .map_or(0, Iterator::count);
                // What the kernel did not take in one go gets one more try each.
                sent + replies[sent..]
                    .iter()
                    .filter(|(reply, peer)| send_one(socket, reply, *peer))
                    .count()
            }
        }
    }
}

/// One reply, without blocking; `false` when it could not be sent.
pub(super) fn send_one(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) -> bool {
    match socket.send_to(reply, peer) {
        Ok(_) => true,
        Err(error) => {
            tracing::debug!(%peer, %error, "UDP send failed; reply dropped");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server.set_nonblocking(true).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(server.local_addr().unwrap()).unwrap();
        (server, client)
    }

    #[test]
    fn one_receive_takes_every_waiting_datagram_up_to_the_batch() {
        let (server, client) = pair();
        let mut inbox = Inbox::default();
        assert_eq!(
            inbox.receive(&server).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        for i in 0..BATCH + 3 {
            client.send(&[i as u8; 20]).unwrap();
        }
        assert_eq!(inbox.receive(&server).unwrap(), BATCH);
        let first: Vec<u8> = inbox.datagrams().map(|d| d.bytes[0]).collect();
        assert_eq!(first, (0..BATCH as u8).collect::<Vec<_>>());
        let from = client.local_addr().unwrap();
        assert!(inbox.datagrams().all(|d| d.peer == from));
        assert_eq!(inbox.receive(&server).unwrap(), 3);
    }

    #[test]
    fn a_datagram_longer_than_a_slot_arrives_cut_and_marked() {
        let (server, client) = pair();
        client.send(&vec![7; SLOT + 10]).unwrap();
        let mut inbox = Inbox::default();
        assert_eq!(inbox.receive(&server).unwrap(), 1);
        let datagram = inbox.datagrams().next().unwrap();
        assert!(datagram.truncated);
        assert_eq!(datagram.bytes.len(), SLOT);
    }

    #[test]
    fn the_buffers_of_sent_replies_are_kept_for_the_next_but_not_oversized_ones() {
        let (server, client) = pair();
        let peer = client.local_addr().unwrap();
        let mut outbox = Outbox::default();
        let mut small = outbox.buffer();
        small.extend_from_slice(b"small");
        outbox.push(&server, small, peer);
        outbox.push(&server, vec![1; SLOT + 1], peer);
        outbox.flush(&server);
        let mut buf = [0u8; SLOT + 8];
        assert_eq!(client.recv(&mut buf).unwrap(), 5);
        assert_eq!(client.recv(&mut buf).unwrap(), SLOT + 1);
        let kept = outbox.buffer();
        assert!(kept.is_empty() && kept.capacity() >= 5 && kept.capacity() <= SLOT);
        assert_eq!(
            outbox.buffer().capacity(),
            0,
            "the oversized one was dropped"
        );
    }

    #[test]
    fn replies_to_several_peers_go_out_in_one_call() {
        let bind = || UdpSocket::bind("127.0.0.1:0").unwrap();
        let (server, a, b) = (bind(), bind(), bind());
        let mut outbox = Outbox::default();
        outbox.push(&server, b"to a".to_vec(), a.local_addr().unwrap());
        outbox.push(&server, b"to b".to_vec(), b.local_addr().unwrap());
        assert_eq!(outbox.flush(&server), 2);
        let mut buf = [0u8; 16];
        let len = a.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"to a");
        let len = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"to b");
    }
}
