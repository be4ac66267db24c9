//! The one name walker: every place that reads a domain name from raw bytes (skipping names
//! in records, reading the question, building cache keys, routing on a question name) goes
//! through [`walk_name`], so the rules for labels, compression pointers and the 255-byte limit
//! live in one loop.

use std::ops::ControlFlow;

/// The longest name in wire form (RFC 1035 §3.1).
pub const MAX_NAME: usize = 255;

/// How a name walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameEnd {
    /// At the root label; the offset just past it.
    Root(usize),
    /// At a compression pointer; the offset just past its two bytes.
    Pointer(usize),
}

impl NameEnd {
    /// The offset just past the name as it is stored in place.
    pub fn offset(self) -> usize {
        match self {
            NameEnd::Root(end) | NameEnd::Pointer(end) => end,
        }
    }
}

/// Walks the name stored at `start`, calling `visit` with the offset of each label (the root
/// label included) until it returns `Break`. Returns how the name ends; `None` when it runs off
/// the message, uses a reserved label type, is longer than [`MAX_NAME`] in place, or when
/// `visit` stopped the walk.
pub fn walk_name(
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
pub fn skip_name(msg: &[u8], at: usize) -> Option<usize> {
    walk_name(msg, at, |_| ControlFlow::Continue(())).map(NameEnd::offset)
}

/// The offset just past a name of plain labels (no compression pointer) starting at `start`.
pub fn skip_plain_name(msg: &[u8], start: usize) -> Option<usize> {
    match walk_name(msg, start, |_| ControlFlow::Continue(()))? {
        NameEnd::Root(end) => Some(end),
        NameEnd::Pointer(_) => None,
    }
}

/// Whether `name` is exactly one name of plain labels ending at the root.
pub fn is_plain_name(name: &[u8]) -> bool {
    skip_plain_name(name, 0) == Some(name.len())
}

/// The first suffix of `name` (a plain name in wire form), longest first, that `matches`
/// accepts; the suffixes start at each label, the root label last.
pub fn find_suffix<T>(name: &[u8], mut matches: impl FnMut(&[u8]) -> Option<T>) -> Option<T> {
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
pub fn is_label_start(name: &[u8], at: usize) -> bool {
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
pub fn lowercase_name<'a>(labels: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
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
