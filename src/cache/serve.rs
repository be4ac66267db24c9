//! Turning stored bytes into a reply for one client, and a client's reply into bytes that may
//! be stored or shared: the byte-level edits of the cache.
//!
//! It owns those edits (the patched ID, bits and question, the TTLs counted down, capped, or
//! cut to [`STALE_TTL`], the per-client options left out) and nothing else: it decides neither
//! whether an entry is served nor for how long it is kept (the parent and `policy` do), and
//! holds no state.

use std::borrow::Cow;
use std::time::Duration;

use super::key::CacheKey;
use crate::wire;

/// The TTL of a stale reply, at most (RFC 8767 §4 recommends 30 s).
pub const STALE_TTL: u32 = 30;

/// The stored reply of `key` as served: copied once (into `reply`, a buffer whose room is
/// reused), header and question patched for `request` (if any; `key` is its own, which it was
/// looked up under), TTLs counted down by `age` (fresh) or cut to [`STALE_TTL`] (stale).
pub(super) fn served(
    stored: &[u8],
    key: &CacheKey,
    request: Option<&[u8]>,
    age: Duration,
    fresh: bool,
    mut reply: Vec<u8>,
) -> Option<Vec<u8>> {
    reply.clear();
    reply.extend_from_slice(stored);
    if let Some(request) = request
        && !patch_stored(&mut reply, request, key)
    {
        return None;
    }
    // Whole seconds, rounded up: a client never holds an answer past the entry's expiry.
    let age = u32::try_from(age.as_secs() + u64::from(age.subsec_nanos() > 0)).unwrap_or(u32::MAX);
    // A reply is stored only under its own question: its records follow the key's.
    let records_at = key.question_range().end;
    if fresh {
        wire::rewrite_ttls(stored, &mut reply, records_at, |ttl| {
            ttl.saturating_sub(age)
        });
    } else {
        wire::rewrite_ttls(stored, &mut reply, records_at, |ttl| ttl.min(STALE_TTL));
    }
    Some(reply)
}

/// A shared reply (a flight leader's, as its upstream sent it) patched for a follower's
/// `request` as [`patch_stored`] does, once it is known to answer the same question (letter
/// case aside). `false` when it does not.
pub(super) fn patch_header_and_question(reply: &mut [u8], request: &[u8], key: &CacheKey) -> bool {
    let question = key.question_range();
    let same = (reply.get(question.clone()))
        .zip(request.get(question))
        .is_some_and(|(stored, asked)| wire::same_question(stored, asked));
    same && patch_stored(reply, request, key)
}

/// `reply` with every TTL after its question (which ends at `records_at`) cut to `ttl`: how
/// an answer is kept for no longer than the cache's caps allow, when it is stored and when a
/// reload lowers a cap.
pub(super) fn capped(reply: &[u8], records_at: usize, ttl: Duration) -> Vec<u8> {
    let secs = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
    let mut capped = reply.to_vec();
    wire::rewrite_ttls(reply, &mut capped, records_at, |stored| stored.min(secs));
    capped
}

/// Gives `reply`, stored under `key`, the request's ID, RD and CD bits, AD only if the
/// request asked for it (AD set, or DO — which its `key` carries — RFC 6840 §5.8), and the
/// request's question bytes (its spelling) over the stored question. Nothing is walked or
/// compared: `key` is the request's own, so it gives where the request's question lies, and a
/// reply is stored only under its own question (`Cache::store_reply`), so the two questions
/// are the same but for letter case. `false` when either message is too short to hold it.
fn patch_stored(reply: &mut [u8], request: &[u8], key: &CacheKey) -> bool {
    let question = key.question_range();
    let (Some(asked), Some(id)) = (request.get(question.clone()), wire::id(request)) else {
        return false;
    };
    let Some(stored) = reply.get_mut(question) else {
        return false;
    };
    debug_assert!(wire::same_question(stored, asked));
    stored.copy_from_slice(asked);
    wire::set_id(reply, id);
    wire::copy_request_bits(reply, request);
    wire::clear_unasked_ad(reply, request, key.flags().dnssec_ok);
    true
}

/// The reply as it may be stored or handed to other clients: without the EDNS options that
/// belong to the one client whose query produced it (NSID) or to one hop (COOKIE, PADDING,
/// TCP-KEEPALIVE: [`wire::is_per_client_option`]).
pub(super) fn shareable(reply: &[u8]) -> Cow<'_, [u8]> {
    match wire::without_options(reply, wire::is_per_client_option) {
        Some(stripped) => Cow::Owned(stripped),
        None => Cow::Borrowed(reply),
    }
}
