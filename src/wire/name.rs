//! The one name walker: every place that reads a domain name from raw bytes (skipping names
//! in records, reading the question, building cache keys, routing on a question name) goes
//! through [`walk_name`], so the rules for labels, compression pointers and the 255-byte limit
//! live in one loop. (The one exception is `reverse`, which reads the labels of a reverse
//! name, already known plain, as an address.) [`follow_name`] runs that loop once per piece of
//! a compressed name, to check a whole name the way a full decoder reads it.

use std::ops::ControlFlow;

/// The longest name in wire form (RFC 1035 §3.1).
pub(crate) const MAX_NAME: usize = 255;

/// How a name walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameEnd {
    /// At the root label; the offset just past it.
    Root(usize),
    /// At a compression pointer; the offset just past its two bytes.
    Pointer(usize),
}

impl NameEnd {
    /// The offset just past the name as it is stored in place.
    pub(crate) fn offset(self) -> usize {
        match self {
            NameEnd::Root(end) | NameEnd::Pointer(end) => end,
        }
    }
}

/// Walks the name stored at `start`, calling `visit` with the offset of each label (the root
/// label included) until it returns `Break`. Returns how the name ends; `None` when it runs off
/// the message, uses a reserved label type, is longer than [`MAX_NAME`] in place, or when
/// `visit` stopped the walk.
pub(crate) fn walk_name(
    msg: &[u8],
    start: usize,
    mut visit: impl FnMut(usize) -> ControlFlow<()>,
) -> Option<NameEnd> {
    let mut at = start;
    loop {
        if at - start >= MAX_NAME {
            return None;
        }
        let len = *msg.get(at)?;
        match len & 0xc0 {
            0x00 => {
                if visit(at).is_break() {
                    return None;
                }
                if len == 0 {
                    return Some(NameEnd::Root(at + 1));
                }
                at += 1 + usize::from(len);
            }
            0xc0 => {
                msg.get(at + 1)?;
                return Some(NameEnd::Pointer(at + 2));
            }
            _ => return None,
        }
    }
}

/// The offset just past a (possibly compressed) name that starts at `at`.
pub(super) fn skip_name(msg: &[u8], at: usize) -> Option<usize> {
    walk_name(msg, at, |_| ControlFlow::Continue(())).map(NameEnd::offset)
}

/// The most compression pointers one name may be followed through: one per label the longest
/// name can have, so only a chain of pointers to pointers is refused. hickory follows such a
/// chain to its end (up to 8,192 hops, the pointers that fit the 16 KiB a pointer can address);
/// bounded here, the walk of a whole reply stays linear in its size, whatever a peer sends.
const MAX_POINTER_HOPS: usize = MAX_NAME / 2;

/// A name followed through its compression pointers by [`follow_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FollowedName {
    /// The offset just past the name as it is stored in place.
    pub(crate) end: usize,
    /// Its length in wire form once expanded (labels and the root: 1 for the root name).
    pub(crate) expanded: usize,
}

/// The name stored at `start`, followed through every compression pointer with the rules of
/// a full decoder (hickory-proto's, which the cluster route and the gathers parse with): a
/// pointer leads strictly back, before the first label of the piece it ends, and the labels
/// it leads to stay before that piece too — so a walk can neither loop nor overlap itself,
/// and stops after at most one step per byte —, and the whole name, expanded, is at most
/// [`MAX_NAME`] bytes, reached through at most [`MAX_POINTER_HOPS`] pointers. `None` when any of
/// this fails or the name runs off the message. The work is bounded by the expanded length and
/// the hops: what a decoder pays to read the name once.
pub(super) fn follow_name(msg: &[u8], start: usize) -> Option<FollowedName> {
    let mut piece = start;
    // Where the piece before started: nothing followed may sit at or after it.
    let mut before = usize::MAX;
    // The labels so far, root excluded, in wire form.
    let mut labels = 0usize;
    let mut in_place = None;
    for _ in 0..=MAX_POINTER_HOPS {
        let end = walk_name(msg, piece, |at| {
            labels += msg
                .get(at)
                .map_or(0, |&len| usize::from(len) + usize::from(len > 0));
            if at < before && labels < MAX_NAME {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        })?;
        let end_in_place = *in_place.get_or_insert(end.offset());
        let NameEnd::Pointer(after) = end else {
            return Some(FollowedName {
                end: end_in_place,
                expanded: labels + 1,
            });
        };
        let pointer = msg.get(after - 2..after)?;
        let target = usize::from(u16::from_be_bytes([pointer[0], pointer[1]]) & 0x3fff);
        if after - 2 >= before || target >= piece {
            return None;
        }
        before = piece;
        piece = target;
    }
    None
}

/// The offset just past a name of plain labels (no compression pointer) starting at `start`.
pub(super) fn skip_plain_name(msg: &[u8], start: usize) -> Option<usize> {
    match walk_name(msg, start, |_| ControlFlow::Continue(()))? {
        NameEnd::Root(end) => Some(end),
        NameEnd::Pointer(_) => None,
    }
}

#[cfg(test)]
/// Whether `name` is exactly one name of plain labels ending at the root.
pub(crate) fn is_plain_name(name: &[u8]) -> bool {
    skip_plain_name(name, 0) == Some(name.len())
}

/// The first suffix of `name` (a plain name in wire form), longest first, that `matches`
/// accepts; the suffixes start at each label, the root label last.
pub(crate) fn find_suffix<T>(
    name: &[u8],
    mut matches: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let mut found = None;
    walk_name(name, 0, |at| match matches(&name[at..]) {
        Some(hit) => {
            found = Some(hit);
            ControlFlow::Break(())
        }
        None => ControlFlow::Continue(()),
    });
    found
}

/// Whether a label of `name` (a plain name in wire form) starts at offset `at`: whether
/// `name[at..]` is one of its suffixes ([`find_suffix`]'s), the root label included.
pub(crate) fn is_label_start(name: &[u8], at: usize) -> bool {
    let mut found = false;
    walk_name(name, 0, |label| {
        found = label == at;
        if label < at {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    });
    found
}

/// The wire form of a name given by its labels (left to right, without the root), lowercased:
/// what zone tables compare question names against.
pub(crate) fn lowercase_name<'a>(labels: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut wire = Vec::new();
    for label in labels {
        // A label is at most 63 bytes (callers pass a valid name's labels).
        wire.push(u8::try_from(label.len()).unwrap_or(u8::MAX));
        wire.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    wire.push(0);
    wire
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_compressed_names_end_where_they_should() {
        let msg = b"\x01a\x02bc\x00\x01x\xc0\x00";
        assert_eq!(skip_name(msg, 0), Some(6));
        assert_eq!(skip_name(msg, 6), Some(10));
        assert_eq!(skip_plain_name(msg, 6), None);
        assert!(is_plain_name(&msg[..6]));
        assert!(!is_plain_name(&msg[..7]));
    }

    #[test]
    fn reserved_label_types_overlong_and_cut_names_are_refused() {
        assert_eq!(skip_name(b"\x40a\x00", 0), None);
        assert_eq!(skip_name(b"\x03ab", 0), None);
        assert_eq!(skip_name(b"\xc0", 0), None);
        let mut long = Vec::new();
        for _ in 0..4 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.push(0);
        assert_eq!(skip_name(&long, 0), None);
        assert!(is_plain_name(&long[64..]));
    }

    #[test]
    fn compressed_names_are_followed_to_their_end_and_measured() {
        // "a.bc." at 0, then "x" + pointer to 0, then a pointer to the pointer's name.
        let msg = b"\x01a\x02bc\x00\x01x\xc0\x00\xc0\x06";
        let followed = |at| follow_name(msg, at).map(|n| (n.end, n.expanded));
        assert_eq!(followed(0), Some((6, 6)));
        assert_eq!(followed(6), Some((10, 8)));
        assert_eq!(followed(10), Some((12, 8)));
    }

    #[test]
    fn pointer_loops_forward_pointers_and_overlaps_are_refused() {
        // A pointer to itself, and two pointers to each other.
        assert_eq!(follow_name(b"\xc0\x00", 0), None);
        assert_eq!(follow_name(b"\x00\xc0\x03\xc0\x01", 3), None);
        // Forward: to a name after the pointer.
        assert_eq!(follow_name(b"\xc0\x02\x00", 0), None);
        // Back into the middle of the piece that pointed: labels would overlap it.
        assert_eq!(follow_name(b"\x02a\xc0\x00", 2), None);
        // A chain of pointers, each strictly back, ends; a chain longer than a name has
        // labels is refused.
        assert!(follow_name(b"\x00\xc0\x00\xc0\x01\xc0\x03", 5).is_some());
        let mut chain = vec![0, 0xc0, 0];
        while chain.len() < 2 * (MAX_POINTER_HOPS + 2) {
            let previous = u16::try_from(chain.len() - 2).unwrap();
            chain.extend_from_slice(&(0xc000 | previous).to_be_bytes());
        }
        let last = |hops: usize| 1 + 2 * (hops - 1);
        assert!(follow_name(&chain, last(MAX_POINTER_HOPS)).is_some());
        assert_eq!(follow_name(&chain, last(MAX_POINTER_HOPS + 1)), None);
    }

    #[test]
    fn a_name_longer_than_255_bytes_once_expanded_is_refused() {
        // 3 labels of 63 bytes (192) in place, then a pointer to another 63 bytes: 257.
        let mut msg = vec![63];
        msg.extend_from_slice(&[b'b'; 63]);
        msg.push(0);
        let start = msg.len();
        for _ in 0..3 {
            msg.push(63);
            msg.extend_from_slice(&[b'a'; 63]);
        }
        msg.extend_from_slice(&[0xc0, 0x00]);
        assert_eq!(follow_name(&msg, start), None);
        // Two labels of 63 and the same pointer: 193, accepted.
        msg.drain(start..start + 64);
        assert_eq!(follow_name(&msg, start).map(|n| n.expanded), Some(193));
    }

    #[test]
    fn suffixes_are_tried_longest_first_on_label_boundaries() {
        let name = b"\x01a\x07cluster\x01b\x00";
        let mut seen = Vec::new();
        let found = find_suffix(name, |suffix| {
            seen.push(suffix.len());
            (suffix == b"\x01b\x00").then_some("b")
        });
        assert_eq!(found, Some("b"));
        assert_eq!(seen, [name.len(), name.len() - 2, 3]);
        let starts: Vec<usize> = (0..name.len())
            .filter(|&at| is_label_start(name, at))
            .collect();
        assert_eq!(starts, [0, 2, 10, 12]);
        assert!(!is_label_start(name, name.len()));
    }
}
