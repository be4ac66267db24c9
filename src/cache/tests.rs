//! The cache's behaviour, one test per rule of the design's "Cache" section, through the real
//! entry points (`lookup`, `get_or_resolve`, `insert`, `last_good`, the gathered route's door)
//! and the real metrics registry. Every time-dependent test runs on tokio's paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};

use hickory_proto::op::{Edns, Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::rdata::{A, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::time::advance;

use prometheus::{IntCounter, IntGauge};

use super::*;

const SECOND: Duration = Duration::from_secs(1);

/// The generation of a cache no reload has touched.
const FIRST: Generation = Generation(0);

fn config(size: usize) -> CacheConfig {
    CacheConfig {
        size,
        max_ttl: Duration::from_secs(3600),
        negative_ttl: Duration::from_secs(5),
        serve_stale: Duration::from_secs(300),
    }
}

/// A query's bytes; `edns`: `None` for none, `Some(do_bit)` otherwise.
pub(super) fn query(name: &str, qtype: RecordType, edns: Option<bool>, cd: bool) -> Vec<u8> {
    let mut msg = Message::query();
    msg.metadata.id = 77;
    msg.metadata.recursion_desired = true;
    msg.metadata.checking_disabled = cd;
    msg.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(dnssec_ok) = edns {
        let mut e = Edns::new();
        e.set_dnssec_ok(dnssec_ok);
        msg.set_edns(e);
    }
    msg.to_vec().unwrap()
}

/// The plainest query: `name`, A, no EDNS, CD clear.
fn query_a(name: &str) -> Vec<u8> {
    query(name, RecordType::A, None, false)
}

fn reply_to(request: &[u8], rcode: ResponseCode) -> Message {
    let request = Message::from_vec(request).unwrap();
    let mut reply = Message::new(request.id, MessageType::Response, request.op_code);
    reply.metadata.response_code = rcode;
    reply.metadata.recursion_desired = request.recursion_desired;
    reply.queries = request.queries.clone();
    if request.edns.is_some() {
        reply.set_edns(Edns::new());
    }
    reply
}

/// A reply with one A record per TTL.
fn answer(request: &[u8], ttls: &[u32]) -> Vec<u8> {
    let mut reply = reply_to(request, ResponseCode::NoError);
    let name = reply.queries[0].name().clone();
    for (i, &ttl) in ttls.iter().enumerate() {
        let rdata = RData::A(A::new(10, 0, 0, i as u8));
        reply.add_answer(Record::from_rdata(name.clone(), ttl, rdata));
    }
    reply.to_vec().unwrap()
}

/// NXDOMAIN or NODATA with an SOA of the given TTL and MINIMUM.
fn negative(request: &[u8], rcode: ResponseCode, soa_ttl: u32, minimum: u32) -> Vec<u8> {
    let mut reply = reply_to(request, rcode);
    let zone = Name::from_ascii("example.").unwrap();
    let soa = SOA::new(zone.clone(), zone.clone(), 1, 2, 3, 4, minimum);
    reply.add_authority(Record::from_rdata(zone, soa_ttl, RData::SOA(soa)));
    reply.to_vec().unwrap()
}

fn servfail(request: &[u8]) -> Vec<u8> {
    reply_to(request, ResponseCode::ServFail).to_vec().unwrap()
}

fn ttls(reply: &[u8]) -> Vec<u32> {
    wire::ttl_fields(reply)
        .unwrap()
        .iter()
        .map(|f| f.ttl)
        .collect()
}

fn key(request: &[u8]) -> CacheKey {
    CacheKey::from_request(request).unwrap()
}

/// What `cache` has for `request` now, under `request`'s own key.
fn look(cache: &Cache, request: &[u8]) -> Lookup {
    cache.lookup(&key(request), request, Instant::now(), Vec::new())
}

/// The fresh hit `cache` has for `request` now, and whether it is due for a refresh.
fn fresh(cache: &Cache, request: &[u8]) -> (Vec<u8>, bool) {
    match look(cache, request) {
        Lookup::Fresh { reply, refresh } => (reply, refresh),
        Lookup::Miss => panic!("expected a fresh hit"),
    }
}

/// Whether a fresh entry answers `request` now.
fn is_cached(cache: &Cache, request: &[u8]) -> bool {
    matches!(look(cache, request), Lookup::Fresh { .. })
}

/// `reply` stored now under `request`'s own key, by the first configuration.
fn put(cache: &Cache, request: &[u8], reply: &[u8]) {
    cache.insert(&key(request), reply, Instant::now(), FIRST);
}

/// A cache with its own counters and background set.
struct Fixture {
    cache: Arc<Cache>,
    metrics: CacheMetrics,
    background: Arc<Background>,
}

fn fixture(config: CacheConfig) -> Fixture {
    let counter = |name: &str| IntCounter::new(name, name).unwrap();
    let metrics = CacheMetrics {
        hits: counter("hits"),
        misses: counter("misses"),
        stale_served: counter("stale_served"),
        entries: IntGauge::new("entries", "entries").unwrap(),
        evictions: counter("evictions"),
    };
    let background = Arc::new(Background::new(16));
    let cache = Arc::new(Cache::new(
        &config,
        metrics.clone(),
        Arc::clone(&background),
    ));
    Fixture {
        cache,
        metrics,
        background,
    }
}

fn cache(size: usize) -> Arc<Cache> {
    fixture(config(size)).cache
}

/// `(hits, misses, stale served, entries, evictions)`.
fn counts(c: &CacheMetrics) -> (u64, u64, u64, i64, u64) {
    (
        c.hits.get(),
        c.misses.get(),
        c.stale_served.get(),
        c.entries.get(),
        c.evictions.get(),
    )
}

/// A miss as the query path makes it: the deadline and the client timer of the defaults.
fn miss(upstream_failing: bool) -> Miss {
    Miss {
        deadline: Instant::now() + 2 * SECOND,
        client_timer: Duration::from_millis(500),
        upstream_failing,
        generation: FIRST,
    }
}

/// A miss as a query of configuration `generation` makes it.
fn miss_of(generation: Generation) -> Miss {
    Miss {
        generation,
        ..miss(false)
    }
}

/// A fake upstream that counts the resolutions it makes.
#[derive(Clone, Default)]
struct Upstream(Arc<AtomicUsize>);

impl Upstream {
    /// A resolution that counts itself, takes `delay`, and gives `reply`.
    fn after(
        &self,
        delay: Duration,
        reply: Vec<u8>,
    ) -> impl Future<Output = Vec<u8>> + Send + 'static {
        let asked = Arc::clone(&self.0);
        async move {
            asked.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            reply
        }
    }

    /// A resolution that counts itself and gives `reply` at once.
    fn at_once(&self, reply: Vec<u8>) -> impl Future<Output = Vec<u8>> + Send + 'static {
        self.after(Duration::ZERO, reply)
    }

    /// How many resolutions have started.
    fn asked(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A miss answered through `get_or_resolve` under `request`'s own key; the reply it gives.
async fn ask(
    cache: &Arc<Cache>,
    request: &[u8],
    miss: Miss,
    resolve: impl Future<Output = Vec<u8>> + Send + 'static,
) -> Vec<u8> {
    cache
        .get_or_resolve(&key(request), request, miss, move || resolve)
        .await
        .unwrap()
}

/// A miss of configuration `generation` for `request`, left in flight on a task of its own.
fn in_flight(
    cache: &Arc<Cache>,
    request: &[u8],
    generation: Generation,
    resolve: impl Future<Output = Vec<u8>> + Send + 'static,
) -> tokio::task::JoinHandle<Option<Vec<u8>>> {
    let (cache, request) = (Arc::clone(cache), request.to_vec());
    tokio::spawn(async move {
        cache
            .get_or_resolve(&key(&request), &request, miss_of(generation), move || {
                resolve
            })
            .await
    })
}

/// A query for `name`, A, whose entry (one record of TTL 10) expired a second ago: it can be
/// served stale.
async fn expired_entry(cache: &Cache, name: &str) -> Vec<u8> {
    let request = query_a(name);
    put(cache, &request, &answer(&request, &[10]));
    tokio::time::sleep(11 * SECOND).await;
    request
}

#[tokio::test(start_paused = true)]
async fn replies_carry_the_ttl_counting_down_and_expire() {
    let Fixture { cache, metrics, .. } = fixture(config(100));
    let request = query("a.example.", RecordType::A, Some(false), false);
    put(&cache, &request, &answer(&request, &[30, 60]));
    // Every record is cut to the entry's TTL (the smallest answer TTL).
    assert_eq!(ttls(&fresh(&cache, &request).0), [30, 30]);
    advance(Duration::from_millis(10_500)).await;
    let (reply, _) = fresh(&cache, &request);
    // 10.5 s old: counted as 11, so the client's copy never outlives the entry.
    assert_eq!(ttls(&reply), [19, 19]);
    assert!(
        Message::from_vec(&reply).unwrap().edns.is_some(),
        "OPT kept"
    );
    advance(Duration::from_millis(18_500)).await;
    assert_eq!(ttls(&fresh(&cache, &request).0), [1, 1]);
    advance(Duration::from_millis(999)).await;
    assert_eq!(
        ttls(&fresh(&cache, &request).0),
        [0, 0],
        "the last millisecond of the entry"
    );
    advance(Duration::from_millis(1)).await;
    assert_eq!(look(&cache, &request), Lookup::Miss);
    assert_eq!(counts(&metrics), (4, 1, 0, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn positive_ttls_are_capped_by_max_ttl() {
    let cache = fixture(CacheConfig {
        max_ttl: Duration::from_secs(60),
        ..config(100)
    })
    .cache;
    let request = query_a("a.example.");
    put(&cache, &request, &answer(&request, &[86_400]));
    assert_eq!(ttls(&fresh(&cache, &request).0), [60]);
    advance(60 * SECOND).await;
    assert_eq!(look(&cache, &request), Lookup::Miss);
}

#[tokio::test(start_paused = true)]
async fn negative_ttl_is_the_soa_minimum_capped_by_negative_ttl() {
    let cache = cache(100);
    // NXDOMAIN: min(SOA TTL 3, MINIMUM 60) = 3 s, under the 5 s cap.
    let nx = query_a("gone.example.");
    put(&cache, &nx, &negative(&nx, ResponseCode::NXDomain, 3, 60));
    // NODATA: min(600, 300) = 300 s, capped to 5 s.
    let nodata = query("a.example.", RecordType::AAAA, None, false);
    put(
        &cache,
        &nodata,
        &negative(&nodata, ResponseCode::NoError, 600, 300),
    );
    assert_eq!(ttls(&fresh(&cache, &nx).0), [3]);
    assert_eq!(ttls(&fresh(&cache, &nodata).0), [5]);
    advance(3 * SECOND).await;
    assert_eq!(look(&cache, &nx), Lookup::Miss);
    assert!(is_cached(&cache, &nodata));
    advance(2 * SECOND).await;
    assert_eq!(look(&cache, &nodata), Lookup::Miss);
}

/// The caps are live: a reload that lowers one holds for what is cached already.
#[tokio::test(start_paused = true)]
async fn a_reload_that_lowers_a_cap_cuts_the_ttls_of_the_entries_kept() {
    let minute = Duration::from_secs(60);
    let cache = fixture(CacheConfig {
        negative_ttl: minute,
        ..config(100)
    })
    .cache;
    let positive = query_a("a.example.");
    put(&cache, &positive, &answer(&positive, &[600]));
    let nodata = query("a.example.", RecordType::AAAA, None, false);
    put(
        &cache,
        &nodata,
        &negative(&nodata, ResponseCode::NoError, 600, 300),
    );
    assert_eq!(ttls(&fresh(&cache, &nodata).0), [60]);
    cache.reconfigure(&CacheConfig {
        max_ttl: Duration::from_secs(30),
        ..config(100)
    });
    assert_eq!(ttls(&fresh(&cache, &positive).0), [30]);
    assert_eq!(
        ttls(&fresh(&cache, &nodata).0),
        [5],
        "the negative cap, 5 s"
    );
    advance(5 * SECOND).await;
    assert_eq!(look(&cache, &nodata), Lookup::Miss);
    assert!(is_cached(&cache, &positive));
}

#[tokio::test(start_paused = true)]
async fn negative_answers_without_soa_truncated_refused_and_failures_are_not_inserted() {
    let cache = cache(100);
    let request = query_a("a.example.");
    let no_soa = reply_to(&request, ResponseCode::NXDomain).to_vec().unwrap();
    let refused = reply_to(&request, ResponseCode::Refused).to_vec().unwrap();
    let mut truncated = answer(&request, &[30]);
    truncated[2] |= 0x02;
    let zero_ttl = answer(&request, &[0]);
    let failed = servfail(&request);
    for reply in [
        no_soa,
        refused,
        truncated,
        zero_ttl,
        failed,
        request.clone(),
    ] {
        put(&cache, &request, &reply);
        assert_eq!(look(&cache, &request), Lookup::Miss);
    }
    assert!(cache.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failure_with_nothing_stale_is_remembered_one_second_then_longer_up_to_five() {
    let Fixture { cache, metrics, .. } = fixture(config(100));
    let request = query_a("dead.example.");
    let upstream = Upstream::default();
    let mut remembered = Vec::new();
    for _ in 0..5 {
        let failure = upstream.at_once(servfail(&request));
        let reply = ask(&cache, &request, miss(false), failure).await;
        assert_eq!(wire::rcode(&reply), Some(2));
        // Asked again only once the failure is forgotten.
        let before = upstream.asked();
        let mut waited = Duration::ZERO;
        while is_cached(&cache, &request) {
            advance(Duration::from_millis(100)).await;
            waited += Duration::from_millis(100);
        }
        assert_eq!(upstream.asked(), before);
        remembered.push(waited.as_secs_f32().round() as u64);
    }
    assert_eq!(remembered, [1, 2, 4, 5, 5]);
    assert_eq!(upstream.asked(), 5);
    assert!(metrics.hits.get() > 0, "remembered failures are served");
}

#[tokio::test(start_paused = true)]
async fn a_failure_never_replaces_an_answer_that_can_be_served_stale() {
    let cache = cache(100);
    let request = expired_entry(&cache, "a.example.").await;
    let upstream = Upstream::default();
    let failure = upstream.at_once(servfail(&request));
    let reply = ask(&cache, &request, miss(false), failure).await;
    assert_eq!(wire::rcode(&reply), Some(0), "served stale");
    assert_eq!(ttls(&reply), [10]);
    let stale = cache
        .stale(&key(&request), &request, Instant::now())
        .unwrap();
    assert_eq!(
        wire::rcode(&stale),
        Some(0),
        "the good answer survived the failure"
    );
}

#[tokio::test(start_paused = true)]
async fn stale_is_served_only_when_the_upstream_fails_and_within_serve_stale() {
    let Fixture { cache, metrics, .. } = fixture(config(100));
    let request = query_a("a.example.");
    let k = key(&request);
    put(&cache, &request, &answer(&request, &[120, 20]));
    advance(50 * SECOND).await;
    // Expired: the upstream is asked first, and its answer wins.
    let upstream = Upstream::default();
    let renewal = upstream.at_once(answer(&request, &[40]));
    assert_eq!(
        ttls(&ask(&cache, &request, miss(false), renewal).await),
        [40]
    );
    advance(41 * SECOND).await;
    // Only when it fails is the stale answer served, with TTLs of at most 30 s.
    let failure = upstream.at_once(servfail(&request));
    let stale = ask(&cache, &request, miss(false), failure).await;
    assert_eq!(ttls(&stale), [30]);
    assert_eq!(metrics.stale_served.get(), 1);
    advance(Duration::from_secs(40 + 300 - 41) - Duration::from_millis(1)).await;
    assert!(cache.stale(&k, &request, Instant::now()).is_some());
    advance(Duration::from_millis(1)).await;
    assert_eq!(cache.stale(&k, &request, Instant::now()), None);
}

#[tokio::test(start_paused = true)]
async fn stale_ttls_are_at_most_thirty_seconds() {
    let cache = cache(100);
    let request = query_a("a.example.");
    put(&cache, &request, &answer(&request, &[600]));
    advance(601 * SECOND).await;
    let stale = cache
        .stale(&key(&request), &request, Instant::now())
        .unwrap();
    assert_eq!(ttls(&stale), [STALE_TTL]);
}

#[tokio::test(start_paused = true)]
async fn with_stale_at_hand_a_slow_upstream_costs_one_client_timer_and_finishes_in_the_background()
{
    let Fixture {
        cache, background, ..
    } = fixture(config(100));
    let request = expired_entry(&cache, "slow.example.").await;
    let upstream = Upstream::default();
    let started = Instant::now();
    let slow = upstream.after(Duration::from_millis(800), answer(&request, &[60]));
    let reply = ask(&cache, &request, miss(false), slow).await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(ttls(&reply), [10], "stale");
    assert_eq!(background.len(), 1, "the exchange goes on");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(ttls(&fresh(&cache, &request).0), [59], "renewed 100 ms ago");
    assert_eq!(upstream.asked(), 1);
}

#[tokio::test(start_paused = true)]
async fn during_an_outage_stale_answers_are_served_at_once_and_refreshed_once_per_recheck_period() {
    let cache = cache(100);
    let request = expired_entry(&cache, "a.example.").await;
    let upstream = Upstream::default();
    // The upstream fails (after a second): this first query waits the client timer.
    let dead = || upstream.after(SECOND, servfail(&request));
    ask(&cache, &request, miss(false), dead()).await;
    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(upstream.asked(), 1);
    // Every query of the next 30 s is served stale at once, without asking again.
    for _ in 0..28 {
        let started = Instant::now();
        let reply = ask(&cache, &request, miss(false), dead()).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(wire::rcode(&reply), Some(0));
        tokio::time::sleep(SECOND).await;
    }
    assert_eq!(upstream.asked(), 1);
    // Then one refresh in the background, the client still served at once.
    tokio::time::sleep(2 * SECOND).await;
    for _ in 0..5 {
        let started = Instant::now();
        ask(&cache, &request, miss(false), dead()).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(upstream.asked(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failing_upstream_serves_stale_at_once_even_for_names_not_yet_asked_in_the_outage() {
    let cache = cache(100);
    let request = expired_entry(&cache, "b.example.").await;
    let upstream = Upstream::default();
    let started = Instant::now();
    let failure = upstream.after(SECOND, servfail(&request));
    let reply = ask(&cache, &request, miss(true), failure).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(wire::rcode(&reply), Some(0));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(upstream.asked(), 1, "refreshed in the background");
}

#[tokio::test(start_paused = true)]
async fn popular_entries_are_refreshed_once_shortly_before_expiry() {
    let cache = cache(100);
    let request = query_a("a.example.");
    put(&cache, &request, &answer(&request, &[100]));
    for _ in 0..5 {
        assert!(!fresh(&cache, &request).1, "not yet due");
    }
    tokio::time::sleep(89 * SECOND).await;
    assert!(!fresh(&cache, &request).1, "11 s left: not due");
    tokio::time::sleep(2 * SECOND).await;
    assert!(fresh(&cache, &request).1, "9 s left: due");
    assert!(!fresh(&cache, &request).1, "only the first caller");
    let upstream = Upstream::default();
    let renewal = upstream.at_once(answer(&request, &[100]));
    cache.refresh(&key(&request), FIRST, || renewal);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(upstream.asked(), 1);
    // The refreshed answer starts a new life (it is a millisecond old: 99 s left, rounded).
    assert_eq!(ttls(&fresh(&cache, &request).0), [99]);
}

#[tokio::test(start_paused = true)]
async fn rarely_asked_entries_are_not_refreshed() {
    let cache = cache(100);
    let request = query_a("a.example.");
    put(&cache, &request, &answer(&request, &[100]));
    advance(95 * SECOND).await;
    assert!(!fresh(&cache, &request).1);
}

#[tokio::test(start_paused = true)]
async fn do_cd_edns_and_types_are_different_entries() {
    let cache = cache(100);
    let base = query("a.example.", RecordType::A, Some(false), false);
    put(&cache, &base, &answer(&base, &[30]));
    for other in [
        query("a.example.", RecordType::AAAA, Some(false), false),
        query("a.example.", RecordType::A, Some(true), false),
        query("a.example.", RecordType::A, Some(false), true),
        query("a.example.", RecordType::A, None, false),
    ] {
        assert_eq!(look(&cache, &other), Lookup::Miss);
    }
    assert!(is_cached(&cache, &base));
}

#[tokio::test(start_paused = true)]
async fn keys_ignore_case_but_replies_echo_the_clients_spelling_id_rd_and_cd() {
    let cache = cache(100);
    let first = query_a("mongo-0.mongo.db.cluster.b.");
    put(&cache, &first, &answer(&first, &[30]));
    let mut second = query_a("Mongo-0.MONGO.db.Cluster.B.");
    wire::set_id(&mut second, 0xbeef);
    second[2] &= !0x01; // RD clear
    let parsed = Message::from_vec(&fresh(&cache, &second).0).unwrap();
    assert_eq!(parsed.id, 0xbeef);
    assert!(!parsed.recursion_desired);
    assert_eq!(
        parsed.queries[0].name().to_ascii(),
        "Mongo-0.MONGO.db.Cluster.B."
    );
    assert_eq!(parsed.answers.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn per_client_edns_options_are_neither_stored_nor_shared() {
    let cache = cache(100);
    let request = query("nsid.example.", RecordType::A, Some(false), false);
    let k = key(&request);
    let mut with_nsid = Message::from_vec(&answer(&request, &[30])).unwrap();
    if let Some(edns) = with_nsid.edns.as_mut() {
        for (code, data) in [
            (wire::OPTION_NSID, b"ns1".to_vec()),
            (wire::OPTION_COOKIE, vec![7; 16]),
        ] {
            edns.options_mut().insert(EdnsOption::Unknown(code, data));
        }
    }
    let with_nsid = with_nsid.to_vec().unwrap();
    let upstream = Upstream::default();
    let resolve = || upstream.after(SECOND, with_nsid.clone());
    let (first, follower) = tokio::join!(
        cache.get_or_resolve(&k, &request, miss(false), resolve),
        async {
            tokio::task::yield_now().await;
            cache
                .get_or_resolve(&k, &request, miss(false), resolve)
                .await
        }
    );
    assert_eq!(upstream.asked(), 1);
    let options = |reply: &[u8]| wire::opt(reply).unwrap().unwrap().options;
    assert!(
        options(&first.unwrap()).contains(wire::OPTION_NSID),
        "the asker's own"
    );
    for shared in [follower.unwrap(), fresh(&cache, &request).0] {
        assert!(!options(&shared).contains(wire::OPTION_NSID));
        assert!(!options(&shared).contains(wire::OPTION_COOKIE));
    }
}

#[tokio::test(start_paused = true)]
async fn partial_answers_are_capped_and_legs_keep_their_last_good_answer() {
    let cache = cache(100);
    let request = query(
        "_db._tcp.mongo.db.svc.distributed.local.",
        RecordType::SRV,
        None,
        false,
    );
    // A partial merged answer arrives with its TTLs capped by the merge; the entry follows.
    put(&cache, &request, &answer(&request, &[5]));
    assert_eq!(ttls(&fresh(&cache, &request).0), [5]);
    advance(6 * SECOND).await;
    assert_eq!(look(&cache, &request), Lookup::Miss);

    let flags = KeyFlags {
        edns: true,
        ..KeyFlags::default()
    };
    let scope = TargetId::fresh();
    let leg_request = query(
        "_db._tcp.mongo.db.svc.cluster.local.",
        RecordType::SRV,
        Some(false),
        false,
    );
    let leg_question = wire::first_question(&leg_request).unwrap();
    let leg = CacheKey::for_leg(scope, leg_question, flags).unwrap();
    cache.insert(&leg, &answer(&leg_request, &[30]), Instant::now(), FIRST);
    advance(10 * SECOND).await;
    assert_eq!(ttls(&cache.last_good(&leg, Instant::now()).unwrap()), [20]);
    advance(100 * SECOND).await;
    assert_eq!(ttls(&cache.last_good(&leg, Instant::now()).unwrap()), [30]);
    advance(300 * SECOND).await;
    assert_eq!(cache.last_good(&leg, Instant::now()), None);
}

#[tokio::test(start_paused = true)]
async fn the_gather_door_keeps_only_shared_legs_of_its_own_configuration_and_drops_wrong_answers() {
    let cache = cache(100);
    let door = GatherDoor::new(Arc::clone(&cache), FIRST);
    let flags = KeyFlags {
        edns: true,
        ..KeyFlags::default()
    };
    let leg_request = query("db.svc.cluster.local.", RecordType::A, Some(false), false);
    let leg = |target| {
        CacheKey::for_leg(target, wire::first_question(&leg_request).unwrap(), flags).unwrap()
    };
    let ask = |key: CacheKey, shared: bool| {
        let bytes = answer(&leg_request, &[30]);
        door.ask(key, shared, async move { ("outcome", Some(bytes)) })
    };
    // A reply that may be scoped to the client's subnet is no leg's answer for others.
    let scoped = leg(TargetId::fresh());
    assert_eq!(ask(scoped.clone(), false).await, "outcome");
    assert_eq!(door.last_good(&scoped), None);
    let shared = leg(TargetId::fresh());
    assert_eq!(ask(shared.clone(), true).await, "outcome");
    assert_eq!(ttls(&door.last_good(&shared).unwrap()), [30]);
    // A leg that straggles past a reload writes nothing into the new configuration's cache.
    cache.advance(FIRST.next());
    let late = leg(TargetId::fresh());
    ask(late.clone(), true).await;
    assert_eq!(door.last_good(&late), None);
    // A gathered answer known wrong is not served again, not even stale.
    let gathered = query_a("db.svc.distributed.local.");
    cache.insert(
        &key(&gathered),
        &answer(&gathered, &[30]),
        Instant::now(),
        FIRST.next(),
    );
    door.forget_answer(&key(&gathered));
    assert_eq!(look(&cache, &gathered), Lookup::Miss);
    assert_eq!(
        cache.stale(&key(&gathered), &gathered, Instant::now()),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn inserting_ten_times_the_size_keeps_the_entry_count_at_the_bound() {
    let Fixture { cache, metrics, .. } = fixture(config(1000));
    for i in 0..10_000 {
        let request = query_a(&format!("r{i}.example."));
        put(
            &cache,
            &request,
            &negative(&request, ResponseCode::NXDomain, 5, 5),
        );
        assert!(cache.len() <= 1000);
    }
    assert_eq!(cache.len(), 1000);
    let (_, _, _, entries, evictions) = counts(&metrics);
    assert_eq!((entries, evictions), (1000, 9000));
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_random_names_keeps_popular_entries() {
    let cache = cache(1000);
    let popular: Vec<Vec<u8>> = (0..500)
        .map(|i| query_a(&format!("member-{i}.db.svc.cluster.local.")))
        .collect();
    for request in &popular {
        put(&cache, request, &answer(request, &[3600]));
        fresh(&cache, request);
    }
    for i in 0..20_000 {
        let request = query_a(&format!("x{i}.flood.example."));
        put(
            &cache,
            &request,
            &negative(&request, ResponseCode::NXDomain, 5, 5),
        );
    }
    let kept = popular.iter().filter(|r| is_cached(&cache, r)).count();
    assert_eq!(kept, 500, "plain LRU would keep none");
    assert_eq!(cache.len(), 1000);
}

#[tokio::test(start_paused = true)]
async fn size_zero_disables_the_cache() {
    let cache = cache(0);
    let request = query_a("a.example.");
    put(&cache, &request, &answer(&request, &[30]));
    assert_eq!(look(&cache, &request), Lookup::Miss);
    assert_eq!(cache.stale(&key(&request), &request, Instant::now()), None);
    assert!(cache.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_herd_of_fifty_identical_misses_makes_one_upstream_query() {
    let cache = cache(0); // sharing works even with caching off
    let (upstream, made) = (Upstream::default(), Arc::new(AtomicUsize::new(0)));
    let mut herd = tokio::task::JoinSet::new();
    for i in 0..50u16 {
        let (cache, upstream, made) = (Arc::clone(&cache), upstream.clone(), Arc::clone(&made));
        herd.spawn(async move {
            let mut request = query_a("Herd.Example.");
            wire::set_id(&mut request, i);
            let resolve = || {
                made.fetch_add(1, Ordering::SeqCst);
                upstream.after(Duration::from_millis(50), answer(&request, &[30]))
            };
            let reply = cache
                .get_or_resolve(&key(&request), &request, miss(false), resolve)
                .await
                .unwrap();
            assert_eq!(wire::id(&reply), Some(i));
        });
    }
    while let Some(done) = herd.join_next().await {
        done.unwrap();
    }
    assert_eq!(upstream.asked(), 1);
    assert_eq!(
        made.load(Ordering::SeqCst),
        1,
        "followers make no resolution"
    );
    assert_eq!(cache.flights.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lost_leader_hands_the_flight_to_one_follower() {
    let cache = cache(100);
    let request = query_a("a.example.");
    let upstream = Upstream::default();
    let slow = upstream.after(10 * SECOND, answer(&request, &[30]));
    let doomed = in_flight(&cache, &request, FIRST, slow);
    tokio::task::yield_now().await;
    let followers: Vec<_> = (0..10)
        .map(|_| {
            let resolve = upstream.after(Duration::from_millis(50), answer(&request, &[30]));
            in_flight(&cache, &request, FIRST, resolve)
        })
        .collect();
    tokio::task::yield_now().await;
    doomed.abort(); // a cancelled task
    for follower in followers {
        assert_eq!(wire::rcode(&follower.await.unwrap().unwrap()), Some(0));
    }
    assert_eq!(upstream.asked(), 2, "the lost leader, then one follower");
    assert!(is_cached(&cache, &request));
}

#[tokio::test(start_paused = true)]
async fn the_first_reply_already_carries_the_capped_ttls() {
    let cache = cache(100);
    let upstream = Upstream::default();
    let request = query("gone.example.", RecordType::A, Some(false), false);
    let nxdomain = negative(&request, ResponseCode::NXDomain, 60, 60);
    let reply = ask(&cache, &request, miss(false), upstream.at_once(nxdomain)).await;
    assert_eq!(ttls(&reply), [5]);
    let request = query("big.example.", RecordType::A, Some(false), false);
    let long_lived = answer(&request, &[7200]);
    let reply = ask(&cache, &request, miss(false), upstream.at_once(long_lived)).await;
    assert_eq!(ttls(&reply), [3600]);
}

#[tokio::test(start_paused = true)]
async fn a_reply_to_another_question_is_not_stored_under_the_key() {
    let cache = cache(100);
    let request = query("a.example.", RecordType::A, Some(false), false);
    let other = query("longer-name.example.", RecordType::A, Some(false), false);
    put(&cache, &request, &answer(&other, &[30]));
    assert_eq!(look(&cache, &request), Lookup::Miss);
    let aaaa = query("a.example.", RecordType::AAAA, Some(false), false);
    put(&cache, &request, &answer(&aaaa, &[30]));
    assert_eq!(look(&cache, &request), Lookup::Miss);
    let spelled = query("A.Example.", RecordType::A, Some(false), false);
    put(&cache, &request, &answer(&spelled, &[30]));
    assert!(is_cached(&cache, &request));
}

// --- Generations (docs/design.md, "Live configuration") -------------------------------------

#[tokio::test(start_paused = true)]
async fn an_answer_of_a_previous_configuration_arriving_after_a_reload_is_not_cached() {
    let cache = cache(100);
    let request = query_a("member-0.mongo.db.cluster.b.");
    let k = key(&request);
    let upstream = Upstream::default();
    let slow = upstream.after(SECOND, answer(&request, &[30]));
    let old = in_flight(&cache, &request, FIRST, slow);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The reload: the route of the name changed.
    cache.advance(FIRST.next());
    let answered = old.await.unwrap().unwrap();
    assert_eq!(
        wire::rcode(&answered),
        Some(0),
        "its own client is answered"
    );
    assert!(!is_cached(&cache, &request), "but nothing of it is cached");
    // Nor is a leg of the old configuration, nor a refresh of it.
    put(&cache, &request, &answer(&request, &[30]));
    let renewal = upstream.after(SECOND, answer(&request, &[30]));
    cache.refresh(&k, FIRST, || renewal);
    tokio::time::sleep(2 * SECOND).await;
    assert!(!is_cached(&cache, &request));
    // Work of the new configuration is cached as ever.
    cache.insert(&k, &answer(&request, &[30]), Instant::now(), FIRST.next());
    assert!(is_cached(&cache, &request));
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_a_miss_never_waits_on_nor_inherits_the_failure_of_an_old_exchange() {
    let cache = cache(100);
    let request = query_a("member-0.mongo.db.cluster.b.");
    let k = key(&request);
    let upstream = Upstream::default();
    // An exchange to a black-holed endpoint: it fails at the query's deadline.
    let black_holed = upstream.after(2 * SECOND, servfail(&request));
    let old = in_flight(&cache, &request, FIRST, black_holed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let new = FIRST.next();
    cache.advance(new);
    let started = Instant::now();
    let renewal = upstream.at_once(answer(&request, &[30]));
    let reply = ask(&cache, &request, miss_of(new), renewal).await;
    assert_eq!(wire::rcode(&reply), Some(0));
    assert_eq!(started.elapsed(), Duration::ZERO, "answered at once");
    assert_eq!(upstream.asked(), 2, "its own exchange");
    // The old exchange fails; its own client gets what the new configuration has cached
    // meanwhile (as for any failure with an answer at hand), and the failure is neither
    // remembered nor marked on the new entry.
    assert_eq!(wire::rcode(&old.await.unwrap().unwrap()), Some(0));
    assert_eq!(wire::rcode(&fresh(&cache, &request).0), Some(0));
    let store = cache.lock();
    let failed_at = store.get(&k).map(|slot| store.entry(slot).failed_at);
    assert_eq!(
        failed_at,
        Some(None),
        "no recheck period from the old failure"
    );
    drop(store);
    assert_eq!(cache.flights.len(), 0);
}

/// A miss of the first configuration for `request` leading a flight that takes `old_delay`
/// (an answer of TTL 30), one following it (TTL 5 if it ever asked), then a reload and a miss
/// of the new configuration leading a flight of its own (one second, TTL 60): each on a task
/// of its own, 100 ms apart.
async fn a_followed_flight_then_a_reload(
    cache: &Arc<Cache>,
    request: &[u8],
    upstream: &Upstream,
    old_delay: Duration,
) -> [tokio::task::JoinHandle<Option<Vec<u8>>>; 3] {
    let leading = upstream.after(old_delay, answer(request, &[30]));
    let old = in_flight(cache, request, FIRST, leading);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let following = upstream.at_once(answer(request, &[5]));
    let follower = in_flight(cache, request, FIRST, following);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let new = FIRST.next();
    cache.advance(new);
    let leading_anew = upstream.after(SECOND, answer(request, &[60]));
    let newer = in_flight(cache, request, new, leading_anew);
    [old, follower, newer]
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_the_followers_of_an_old_flight_still_get_its_reply() {
    let cache = cache(100);
    let request = query_a("member-0.mongo.db.cluster.b.");
    let upstream = Upstream::default();
    let started = Instant::now();
    // The new flight is still in the air when the old one lands.
    let [old, follower, newer] =
        a_followed_flight_then_a_reload(&cache, &request, &upstream, SECOND).await;
    let followed = follower.await.unwrap().unwrap();
    assert_eq!(ttls(&followed), [30], "the old flight's reply");
    assert_eq!(started.elapsed(), SECOND, "when the old one landed");
    assert_eq!(ttls(&old.await.unwrap().unwrap()), [30]);
    assert_eq!(ttls(&newer.await.unwrap().unwrap()), [60]);
    assert_eq!(upstream.asked(), 2, "the old leader, the new");
    assert_eq!(cache.flights.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_the_followers_of_a_lost_old_leader_follow_the_new_flight() {
    let cache = cache(100);
    let request = query_a("member-0.mongo.db.cluster.b.");
    let upstream = Upstream::default();
    let [doomed, follower, newer] =
        a_followed_flight_then_a_reload(&cache, &request, &upstream, 10 * SECOND).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    doomed.abort();
    // Released, the follower joins again and follows the newer flight (it never asks).
    assert_eq!(ttls(&follower.await.unwrap().unwrap()), [60]);
    assert_eq!(ttls(&newer.await.unwrap().unwrap()), [60]);
    assert_eq!(upstream.asked(), 2, "the lost leader, the new");
    assert_eq!(cache.flights.len(), 0);
}

/// A reload looks at no entry: a changed target has a new identity, so what its old one cached
/// (a remembered failure too) is never found again, and an unchanged one keeps its entries.
#[tokio::test(start_paused = true)]
async fn a_reload_keeps_the_entries_of_unchanged_targets_and_loses_those_of_changed_ones() {
    let cache = cache(100);
    let kept = query_a("www.example.com.");
    let failed = query_a("member-0.mongo.db.cluster.b.");
    let (kube_dns, old_b) = (TargetId::fresh(), TargetId::fresh());
    let on = |target: TargetId, request: &[u8]| key(request).for_target(target);
    let at = |target: TargetId, request: &[u8]| {
        matches!(
            cache.lookup(&on(target, request), request, Instant::now(), Vec::new()),
            Lookup::Fresh { .. }
        )
    };
    let kept_answer = answer(&kept, &[30]);
    cache.insert(&on(kube_dns, &kept), &kept_answer, Instant::now(), FIRST);
    let upstream = Upstream::default();
    let servfail = upstream.at_once(servfail(&failed));
    let old_key = on(old_b, &failed);
    let failure = cache.get_or_resolve(&old_key, &failed, miss(false), || servfail);
    assert_eq!(wire::rcode(&failure.await.unwrap()), Some(2));
    assert!(at(old_b, &failed), "the failure is remembered");
    let (new, new_b) = (FIRST.next(), TargetId::fresh());
    cache.advance(new);
    assert!(at(kube_dns, &kept), "kube-dns did not change");
    let new_key = on(new_b, &failed);
    let answering = upstream.at_once(answer(&failed, &[30]));
    let reply = cache.get_or_resolve(&new_key, &failed, miss_of(new), || answering);
    assert_eq!(
        wire::rcode(&reply.await.unwrap()),
        Some(0),
        "b's new target is asked"
    );
    // Never back: an older generation does not reopen the door.
    cache.advance(FIRST);
    cache.insert(&on(old_b, &kept), &kept_answer, Instant::now(), FIRST);
    assert!(!at(old_b, &kept));
}

// --- AD (RFC 6840 §5.8) --------------------------------------------------------------------

/// `request` with the AD bit set.
fn with_ad(mut request: Vec<u8>) -> Vec<u8> {
    request[3] |= 0x20;
    request
}

/// An answer to `request` with AD set, as a validating upstream gives it.
fn validated(request: &[u8]) -> Vec<u8> {
    let mut validated = Message::from_vec(&answer(request, &[30])).unwrap();
    validated.metadata.authentic_data = true;
    validated.to_vec().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_cached_reply_carries_ad_only_to_a_client_that_set_ad_or_do() {
    let cache = cache(100);
    let asked_with_ad = with_ad(query("signed.example.", RecordType::A, Some(false), false));
    put(&cache, &asked_with_ad, &validated(&asked_with_ad));
    let ad = |request: &[u8]| wire::authentic_data(&fresh(&cache, request).0);
    assert!(ad(&asked_with_ad), "kept for a client that set AD");
    let plain = query("signed.example.", RecordType::A, Some(false), false);
    let (hit, _) = fresh(&cache, &plain);
    assert!(
        !wire::authentic_data(&hit),
        "cleared for one that set neither AD nor DO"
    );
    assert_eq!(
        hit[3] & 0x0f,
        0,
        "nothing else of the header's fourth byte changed"
    );

    let with_do = query("signed.example.", RecordType::A, Some(true), false);
    put(&cache, &with_do, &validated(&with_do));
    assert!(ad(&with_do), "kept for a client that set DO");
}
