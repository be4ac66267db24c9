//! Turning stored bytes into a reply for one client, and a client's reply into bytes that may
//! be stored or shared: the byte-level edits of the cache.

use std::borrow::Cow;
use std::time::Duration;

use super::key::CacheKey;
use crate::wire;

/// The TTL of a stale reply, at most (RFC 8767 §4 recommends 30 s).
pub const STALE_TTL: u32 = 30;

/// The stored reply as served: copied once (into `reply`, a buffer whose room is reused),
/// header and question patched for `request` (if any, with the key it was looked up under),
/// TTLs counted down by `age` (fresh) or cut to [`STALE_TTL`] (stale).
pub fn served(
    stored: &[u8],
    request: Option<(&[u8], &CacheKey)>,
    age: Duration,
    fresh: bool,
    mut reply: Vec<u8>,
) -> Option<Vec<u8>> {
    reply.clear();
    reply.extend_from_slice(stored);
    if let Some((request, key)) = request
        && !patch_header_and_question(&mut reply, request, key)
    {
        return None;
    }
    // Whole seconds, rounded up: a client never holds an answer past the entry's expiry.
    let age = u32::try_from(age.as_secs() + u64::from(age.subsec_nanos() > 0)).unwrap_or(u32::MAX);
    if fresh {
        wire::rewrite_ttls(stored, &mut reply, |ttl| ttl.saturating_sub(age));
    } else {
        wire::rewrite_ttls(stored, &mut reply, |ttl| ttl.min(STALE_TTL));
    }
    Some(reply)
}

/// Gives `reply` the request's ID, RD and CD bits, AD only if the request asked for it (AD
/// set, or DO — which its `key` carries — RFC 6840 §5.8), and the request's question bytes
/// (its spelling) over the stored question. `false` when the questions differ beyond letter
/// case.
pub fn patch_header_and_question(reply: &mut [u8], request: &[u8], key: &CacheKey) -> bool {
    let (Some(asked), Some(id)) = (wire::first_question(request), wire::id(request)) else {
        return false;
    };
    let Some(stored) = reply.get_mut(wire::HEADER_LEN..wire::HEADER_LEN + asked.len()) else {
        return false;
    };
    if !wire::same_question(stored, asked) {
        return false;
    }
    stored.copy_from_slice(asked);
    wire::set_id(reply, id);
    wire::copy_request_bits(reply, request);
    wire::clear_unasked_ad(reply, request, key.flags().dnssec_ok);
    true
}

/// The reply as it may be stored or handed to other clients: without the EDNS options that
/// belong to the one client whose query produced it (NSID) or to one hop (COOKIE, PADDING,
/// TCP-KEEPALIVE: [`wire::is_per_client_option`]).
pub fn shareable(reply: &[u8]) -> Cow<'_, [u8]> {
    match wire::without_options(reply, wire::is_per_client_option) {
        Some(stripped) => Cow::Owned(stripped),
        None => Cow::Borrowed(reply),
    }
}
