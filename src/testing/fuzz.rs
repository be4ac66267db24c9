//! The fuzz targets of meshdns, shared by the cargo-fuzz binaries in `fuzz/fuzz_targets/`
//! (libFuzzer, for long local runs) and the stable harness in `tests/fuzz.rs` (a seeded
//! mutator over `fuzz/corpus/`, a few seconds per target in CI). They live in the crate, behind
//! the `testing` feature, so that what they drive stays `pub(crate)`: their table is the
//! surface.
//!
//! Each target feeds arbitrary bytes through one stage of the request path — client bytes,
//! or an upstream's reply in each route — and panics when an invariant breaks: every reply
//! parses, carries the client's ID, and fits the client's size.
//!
//! The socket-level run of the harness asks [`ReplyBounds`] what a reply to its mutated bytes
//! may be, so that it needs no routing or parsing of meshdns's own.

use std::sync::LazyLock;

use crate::cache::{Cache, CacheKey, Lookup};
use crate::config::CacheConfig;
use crate::config::{Cluster, Config};
use crate::gather::{Leg, Naming, Scheme, merge};
use crate::reply::{encode_fitted, fit_wire};
use crate::request::{Inspected, inspect};
use crate::rewrite::ZoneMap;
use crate::route::{Route, Router};
use crate::wire;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::time::Instant;

/// Every target, by the name of its corpus directory.
/// A target: arbitrary bytes in, a panic when an invariant breaks.
pub(crate) type Target = fn(&[u8]);

pub const TARGETS: [(&str, Target); 7] = [
    ("client_query", client_query),
    ("upstream_passthrough", upstream_passthrough),
    ("upstream_cluster", upstream_cluster),
    ("gather_merge", gather_merge),
    ("fit_wire", fit_wire_target),
    ("cache", cache),
    ("wire", wire_target),
];

/// The target of corpus directory `name`: how a cargo-fuzz binary (`fuzz/fuzz_targets/`)
/// finds its own.
pub fn target(name: &str) -> Target {
    TARGETS
        .iter()
        .find(|(corpus, _)| *corpus == name)
        .map(|(_, target)| *target)
        .expect("a fuzz target of that name")
}

/// A configuration with three clusters (a local, b, c with its own prefix) and the default
/// distributed zone (never bound): the fuzz targets'.
fn three_clusters() -> Config {
    let vars = [
        ("MESHDNS_UPSTREAMS", "127.0.0.1:9"),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        (
            "MESHDNS_CLUSTERS",
            "a=; b=127.0.0.1:9; c=127.0.0.1:9 prefix=west-",
        ),
        ("MESHDNS_ADMIN_LISTEN", ""),
    ];
    Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .expect("the fuzz configuration is valid")
}

static CONFIG: LazyLock<Config> = LazyLock::new(three_clusters);

/// Splits `data` into a length-prefixed first part and the rest: `[len:u16][first][rest]`.
pub(crate) fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return (&[], data);
    };
    let len = usize::from(u16::from_be_bytes(*len)).min(rest.len());
    rest.split_at(len)
}

/// A client's size: what the first two bytes say, as `max_payload` would clamp it.
fn client_limit(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first_chunk::<2>() {
        Some((size, rest)) => (usize::from(u16::from_be_bytes(*size).max(512)), rest),
        None => (512, data),
    }
}

/// A reply meshdns built must parse, carry `id`, and fit `limit`.
fn assert_reply(reply: &[u8], id: u16, limit: usize, what: &str) {
    assert!(
        reply.len() <= limit,
        "{what}: {} > {limit} bytes",
        reply.len()
    );
    let parsed = Message::from_vec(reply).unwrap_or_else(|e| panic!("{what}: unparseable: {e}"));
    assert_eq!(parsed.id, id, "{what}: the client's ID");
}

/// Client bytes → inspect: replies meshdns writes at once parse, echo the ID, fit 512; a
/// served query has one question, the one hickory reads, and the cache-hit path's key; the
/// query a peer gets from it asks the same question without a hop-by-hop option.
pub(crate) fn client_query(data: &[u8]) {
    match inspect(bytes::Bytes::copy_from_slice(data), None) {
        Inspected::Drop => {}
        Inspected::Reply(reply) => {
            let id = wire::id(data).expect("a reply needs a header");
            assert_reply(&reply, id, wire::CLASSIC_UDP_SIZE, "inspect");
        }
        Inspected::Query(request) => {
            assert_eq!(request.message().queries, [request.query().clone()]);
            assert_eq!(
                CacheKey::from_request(data).as_ref(),
                request.shared_key(),
                "the cache-hit path's key is the request's"
            );
            let peer = request
                .for_peer(request.name())
                .expect("the client's own name fits");
            let opt = wire::opt(&peer).expect("the peer's query walks");
            let options = opt.map(|o| o.options).unwrap_or_default();
            assert!(
                (0..32).all(|code| !(wire::is_hop_by_hop_option(code) && options.contains(code)))
            );
            let without_options = wire::without_options(&peer, |_| true).unwrap_or(peer);
            let parsed = Message::from_vec(&without_options).expect("the peer's query parses");
            assert_eq!(parsed.queries, [request.query().clone()]);
        }
    }
}

/// What the socket harness (`tests/fuzz.rs`) may expect of meshdns's reply to a client's
/// bytes, for a meshdns run with a given configuration.
pub struct ReplyBounds {
    /// Routes without upstreams: only the route's kind matters here.
    router: Router<Cluster>,
}

impl ReplyBounds {
    /// The bounds of a meshdns run with `config`.
    pub fn new(config: &Config) -> Self {
        Self {
            router: Router::new(config, &config.clusters),
        }
    }

    /// The client's size for `query` (512 without EDNS, else its EDNS size, never below 512),
    /// and whether the reply may be kube-dns's bytes as they came: a query meshdns passes
    /// through, whose records the client's resolver judges, not meshdns.
    pub fn of(&self, query: &[u8]) -> (usize, bool) {
        let limit = match wire::opt(query).flatten() {
            Some(opt) => usize::from(opt.payload.max(512)),
            None => 512,
        };
        let verbatim = match inspect(bytes::Bytes::copy_from_slice(query), None) {
            Inspected::Query(request) => *self.router.route(request.name()) == Route::Passthrough,
            _ => false,
        };
        (limit, verbatim)
    }
}

/// The query the pass-through target's replies answer (ID 0x1234, `www.example.org. A`, EDNS).
pub static PASSTHROUGH_QUERY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut query = Message::query();
    query.metadata.id = 0x1234;
    query.add_query(Query::query(
        Name::from_ascii("www.example.org.").expect("a valid name"),
        RecordType::A,
    ));
    query.set_edns(hickory_proto::op::Edns::new());
    query.to_vec().expect("the query encodes")
});

/// Pass-through, the real path: an upstream reply that the exchange accepts for the query
/// (`upstream::acceptable`, with the query's ID standing for the random one) goes to the
/// client through `passthrough::to_client` and is cut to the client's size: it carries the
/// client's ID and question, no COOKIE, and fits.
pub(crate) fn upstream_passthrough(data: &[u8]) {
    let (limit, reply) = client_limit(data);
    let query = PASSTHROUGH_QUERY.as_slice();
    if !crate::upstream::acceptable(reply, 0x1234, query) {
        return;
    }
    let mut client_query = query.to_vec();
    wire::set_id(&mut client_query, 0xbeef);
    let out = fit_wire(
        crate::passthrough::to_client(reply.to_vec(), &client_query),
        limit,
    );
    assert!(out.len() <= limit, "pass-through: {} > {limit}", out.len());
    assert_eq!(
        wire::id(&out),
        Some(0xbeef),
        "pass-through: the client's ID"
    );
    let asked = wire::first_question(query);
    assert!(
        wire::first_question(&out).is_none_or(|q| Some(q)
            .zip(asked)
            .is_some_and(|(a, b)| wire::same_question(a, b))),
        "pass-through: the client's question or none"
    );
    if let Some(Some(opt)) = wire::opt(&out) {
        assert!(
            !opt.options.contains(wire::OPTION_COOKIE),
            "no cookie passes"
        );
    }
}

/// Cluster zone: any upstream reply is mapped back and encoded for the client.
pub(crate) fn upstream_cluster(data: &[u8]) {
    let (limit, reply) = client_limit(data);
    let Ok(reply) = Message::from_vec(reply) else {
        return;
    };
    let map = ZoneMap::new(
        Name::from_ascii("cluster.b.").unwrap(),
        Name::from_ascii("svc.cluster.local.").unwrap(),
    );
    let asked = Query::query(
        Name::from_ascii("Mongo-0.mongo.db.cluster.b.").unwrap(),
        RecordType::A,
    );
    let Some(mut client) = map.reply_to_client(reply, &asked) else {
        return; // a name too long for the cluster zone: SERVFAIL, built elsewhere
    };
    client.metadata.id = 0xbeef;
    let out = encode_fitted(&client, limit);
    assert_reply(&out, 0xbeef, limit, "cluster reply");
    let parsed = Message::from_vec(&out).unwrap();
    if let Some(q) = parsed.queries.first() {
        assert!(
            q.name().eq_case(asked.name()),
            "the question as the client spelled it"
        );
    }
}

/// Distributed zone: a leg of arbitrary bytes per cluster (`[len][leg]…`, unparseable legs
/// count as failed) merged and encoded; every answer is owned by the question.
pub(crate) fn gather_merge(data: &[u8]) {
    let (limit, mut rest) = client_limit(data);
    let mut legs = Vec::new();
    for (index, cluster) in CONFIG.clusters.iter().enumerate() {
        let (leg, after) = split(rest);
        rest = after;
        let leg = match Message::from_vec(leg) {
            Ok(msg) if index == 2 && leg.len() % 2 == 1 => Leg::Stale(msg),
            Ok(msg) => Leg::Answered(msg),
            Err(_) => Leg::Failed,
        };
        legs.push((cluster, leg));
    }
    let mut request = Message::query();
    request.metadata.id = 0xbeef;
    let question = Name::from_ascii("_mongodb._tcp.mongo.db.svc.distributed.local.").unwrap();
    let qtype = match rest.first().map(|b| b % 4) {
        Some(0) => RecordType::A,
        Some(1) => RecordType::AAAA,
        Some(2) => RecordType::TXT,
        _ => RecordType::SRV,
    };
    request.add_query(Query::query(question.clone(), qtype));
    let naming = Naming {
        zone: Name::from_ascii("distributed.local.").unwrap(),
        scheme: Scheme::Prefix,
    };
    let merged = merge(&request, &naming, &legs, CONFIG.cache.negative_ttl);
    for record in &merged.reply.answers {
        assert!(
            record.name.eq_ignore_root(&question),
            "answers owned by the question"
        );
    }
    let out = encode_fitted(&merged.reply, limit);
    assert_reply(&out, 0xbeef, limit, "merged reply");
}

/// Any reply meshdns holds, cut to any client size.
pub(crate) fn fit_wire_target(data: &[u8]) {
    let (limit, reply) = client_limit(data);
    let parses = Message::from_vec(reply).is_ok();
    let out = fit_wire(reply.to_vec(), limit);
    assert!(out.len() <= limit);
    if out != reply && reply.len() >= wire::HEADER_LEN {
        assert_reply(&out, wire::id(reply).unwrap(), limit, "fitted reply");
    }
    if parses {
        Message::from_vec(&out).expect("a reply that parsed still parses once cut");
    }
}

/// Cache: `[len][request][reply]`: the reply stored under the request's key, then served to
/// the same request with its ID and decremented TTLs.
pub(crate) fn cache(data: &[u8]) {
    let (request, reply) = split(data);
    let Some(key) = CacheKey::from_request(request) else {
        return;
    };
    // A cache per input, so that what is served comes from this input.
    let background = std::sync::Arc::new(crate::background::Background::new(1));
    let cache = Cache::new(
        &CacheConfig {
            size: 4,
            ..CONFIG.cache.clone()
        },
        crate::metrics::Metrics::new().cache(),
        background,
    );
    let now = Instant::now();
    cache.insert(&key, reply, now, crate::cache::Generation::default());
    if let Lookup::Fresh { reply: served, .. } = cache.lookup(&key, request, now, Vec::new()) {
        assert_eq!(
            wire::id(&served),
            wire::id(request),
            "cache hit with the client's ID"
        );
        // What the cache serves must parse whenever the reply, given the client's ID as any
        // forwarder gives it, parses. (A compression pointer into the header makes a name
        // depend on the ID: patching the ID changes it, cache or not.)
        let mut with_client_id = reply.to_vec();
        wire::set_id(&mut with_client_id, wire::id(request).unwrap_or_default());
        if Message::from_vec(&with_client_id).is_ok() {
            Message::from_vec(&served).expect("a stored reply that parsed still parses");
        }
    }
    if let Some(stale) = cache.stale(&key, request, now) {
        assert_eq!(wire::id(&stale), wire::id(request));
    }
}

/// Record types whose RDATA the full walk (`wire::walks_fully`) reads whole, as hickory does:
/// A, NS, CNAME, SOA, PTR, MX, AAAA, SRV, ANAME, and OPT without options. Of the others it
/// checks the framing only (docs/design.md, "Replies are walked once, fully").
const WALKED_TYPES: [u16; 10] = [1, 2, 5, 6, 12, 15, 28, 33, 41, 65305];

/// The full walk accepts exactly what hickory's full decoder accepts: every message that
/// parses walks, and every message that walks parses, when its records are of the types the
/// walk reads whole ([`WALKED_TYPES`]; otherwise what hickory checks inside their RDATA is not
/// the walk's business).
pub fn walk_agrees_with_decoder(data: &[u8]) {
    let walks = wire::walks_fully(data);
    let parses = Message::from_vec(data).is_ok();
    if parses {
        assert!(walks, "a message hickory parses walks fully");
    }
    let mut read_whole = true;
    let framed = wire::for_each_record(data, |record| {
        let opt_with_options = record.rtype == 41 && record.rdata_len > 0;
        read_whole &= WALKED_TYPES.contains(&record.rtype) && !opt_with_options;
    });
    if walks {
        assert!(framed.is_some(), "a message that walks fully is framed");
    }
    if walks && read_whole {
        assert!(parses, "a message that walks fully parses");
    }
}

/// The byte-level readers on anything; where hickory parses a message, they agree with it.
pub(crate) fn wire_target(data: &[u8]) {
    walk_agrees_with_decoder(data);
    let _ = (wire::id(data), wire::rcode(data), wire::opcode(data));
    let _ = wire::first_question(data);
    let _ = wire::opt(data);
    let fields = wire::ttl_fields(data);
    if let Some(fields) = &fields {
        let mut copy = data.to_vec();
        for field in fields {
            wire::set_ttl(&mut copy, *field, 1);
        }
    }
    if let Ok(msg) = Message::from_vec(data) {
        let mut records = 0usize;
        if wire::for_each_record(data, |_| records += 1).is_some() {
            let expected = msg.answers.len()
                + msg.authorities.len()
                + msg.additionals.len()
                + usize::from(msg.edns.is_some())
                + usize::from(msg.signature.is_some());
            assert!(
                records >= expected,
                "the walk sees every record hickory sees"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::acceptable;

    /// Every pass-through seed on disk (`fuzz/corpus/upstream_passthrough/`, written by the
    /// harness's `write_seed_corpus`) is a reply the exchange accepts for the target's query,
    /// after its client size: a seed it rejected would test nothing.
    #[test]
    fn every_pass_through_seed_is_a_reply_the_exchange_accepts_for_the_targets_query() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/corpus/upstream_passthrough"
        );
        let mut seeds = 0;
        for entry in std::fs::read_dir(dir).expect("the pass-through corpus") {
            let seed = std::fs::read(entry.expect("a corpus entry").path()).expect("a seed");
            let reply = &seed[2..];
            assert!(
                acceptable(reply, 0x1234, &PASSTHROUGH_QUERY),
                "seed not accepted: {reply:02x?}"
            );
            seeds += 1;
        }
        assert!(seeds > 0, "{dir} holds seeds");
    }
}
