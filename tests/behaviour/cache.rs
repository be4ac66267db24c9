//! The cache (docs/design.md, "Cache"), seen from a client: what is asked upstream again
//! and what is not, the TTLs replies carry (TTL 0 and a TTL with its top bit set used once,
//! the positive and negative caps on every section, a lowered cap applied at once), in-flight
//! sharing, negative caching (a CNAME to NODATA included), serve-stale (also for one leg of a
//! gathered answer) and never after a newer answer said the name is gone or moved, and the
//! bound under a flood of random names.
//!
//! The fakes count what reaches them: a cache hit is a query the fake never saw. Tests about
//! time run on tokio's paused clock (the fakes still answer over 127.0.0.1): a sleep past a
//! TTL takes no wall time, and the durations measured are exact virtual time.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{RData, Record, RecordType};
use support::{Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, Reply, ask, query, rr, udp};
use tokio::time::Instant;

const NAME: &str = "www.example.com.";

/// `MESHDNS_ATTEMPT_TIMEOUT` of the tests where an upstream goes silent.
const ATTEMPT: Duration = Duration::from_millis(200);

/// An upstream that knows [`NAME`] A and AAAA, with TTL `ttl`.
fn upstream_with_ttl(ttl: u32) -> FakeDnsBuilder {
    FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 1]), ttl)]),
        )
        .answer(
            NAME,
            RecordType::AAAA,
            Answer::records([rr::with_ttl(rr::aaaa(NAME, "2001:db8::1"), ttl)]),
        )
}

fn edns(msg: Message, dnssec_ok: bool) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    edns.set_dnssec_ok(dnssec_ok);
    let mut msg = msg;
    msg.set_edns(edns);
    msg
}

fn ttls(reply: &Reply) -> Vec<u32> {
    reply
        .msg
        .answers
        .iter()
        .chain(&reply.msg.authorities)
        .chain(&reply.msg.additionals)
        .map(|r| r.ttl)
        .collect()
}

#[tokio::test]
async fn a_second_identical_query_is_answered_from_the_cache() {
    let upstream = upstream_with_ttl(30).start().await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    let first = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    let second = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "the second query was not asked upstream"
    );
    assert_eq!(second.answer_lines(), first.answer_lines());
    assert_eq!(second.answer_lines(), [format!("{NAME} A 192.0.2.1")]);
    assert!(second.msg.answers[0].ttl <= first.msg.answers[0].ttl);
    assert!(first.msg.answers[0].ttl <= 30);
}

#[tokio::test(start_paused = true)]
async fn cached_ttls_count_down() {
    let upstream = upstream_with_ttl(30).start().await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    let first = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(first.msg.answers[0].ttl, 30);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(upstream.exchanges().len(), 1);
    assert_eq!(
        later.msg.answers[0].ttl, 28,
        "30 s less the 2 s the answer has been cached"
    );
}

/// On the paused clock, all 50 clients ask before the upstream's 200 ms pass, however loaded
/// the machine.
#[tokio::test(start_paused = true)]
async fn identical_misses_in_flight_share_one_upstream_query() {
    let slow = Behaviour::Delay(
        Duration::from_millis(200),
        Answer::records([rr::a(NAME, [192, 0, 2, 1])]),
    );
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, slow)
        .start()
        .await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    let clients = (1..=50u16).map(|id| {
        let mut msg = query(NAME, RecordType::A);
        msg.metadata.id = id;
        let server = meshdns.addr;
        // `udp` checks the reply carries this client's ID.
        tokio::spawn(async move { udp(server, &msg).await })
    });
    let replies = futures_join(clients).await;
    assert_eq!(replies.len(), 50);
    for reply in &replies {
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert_eq!(reply.answer_lines(), [format!("{NAME} A 192.0.2.1")]);
    }
    let mut ids: Vec<u16> = replies.iter().map(|r| r.msg.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=50).collect::<Vec<u16>>());
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "one upstream query for 50 misses"
    );
}

async fn futures_join(handles: impl Iterator<Item = tokio::task::JoinHandle<Reply>>) -> Vec<Reply> {
    let mut replies = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        replies.push(handle.await.expect("the client task"));
    }
    replies
}

#[tokio::test]
async fn do_bit_cd_bit_and_type_make_different_entries() {
    let upstream = upstream_with_ttl(30).start().await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    let variants = || {
        let mut cd = edns(query(NAME, RecordType::A), false);
        cd.metadata.checking_disabled = true;
        [
            edns(query(NAME, RecordType::A), false),
            edns(query(NAME, RecordType::A), true),
            cd,
            edns(query(NAME, RecordType::AAAA), false),
        ]
    };
    for (asked, msg) in variants().iter().enumerate() {
        let reply = udp(meshdns.addr, msg).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert_eq!(
            upstream.exchanges().len(),
            asked + 1,
            "variant {asked} has its own entry"
        );
    }
    for msg in &variants() {
        udp(meshdns.addr, msg).await;
    }
    assert_eq!(
        upstream.exchanges().len(),
        4,
        "each variant is cached on its own"
    );
}

#[tokio::test]
async fn keys_ignore_case_and_the_reply_keeps_the_clients_spelling() {
    let upstream = upstream_with_ttl(30).start().await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    udp(meshdns.addr, &query("WWW.Example.COM.", RecordType::A)).await;
    let reply = udp(meshdns.addr, &query("www.EXAMPLE.com.", RecordType::A)).await;
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "the other spelling is the same entry"
    );
    assert_eq!(reply.msg.queries[0].name().to_ascii(), "www.EXAMPLE.com.");
    assert_eq!(reply.msg.answers.len(), 1);
}

#[tokio::test]
async fn nxdomain_is_cached_with_the_ttl_capped_by_the_negative_cap() {
    // The upstream's SOA says 30 s (minimum) and 60 s (TTL); the cap is 5 s.
    let soa = SOA::new(
        rr::name("ns.dns.example.com."),
        rr::name("hostmaster.example.com."),
        1,
        7200,
        1800,
        86_400,
        30,
    );
    let nx = Answer {
        authorities: vec![Record::from_rdata(
            rr::name("example.com."),
            60,
            RData::SOA(soa),
        )],
        ..Answer::nxdomain("example.com.")
    };
    let gone = "gone.example.com.";
    let upstream = FakeDns::builder()
        .answer(gone, RecordType::A, nx)
        .start()
        .await;
    let meshdns = Meshdns::cached(&upstream, &[("MESHDNS_CACHE_NEGATIVE_TTL", "5s")]).await;
    for _ in 0..2 {
        let reply = udp(meshdns.addr, &query(gone, RecordType::A)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
        assert_eq!(reply.msg.authorities.len(), 1, "the SOA is kept");
        let ttl = reply.msg.authorities[0].ttl;
        assert!(ttl <= 5, "negative TTL {ttl} above the cap");
    }
    assert_eq!(upstream.exchanges().len(), 1, "the NXDOMAIN was cached");
}

#[tokio::test(start_paused = true)]
async fn an_expired_answer_is_served_stale_when_the_upstream_fails() {
    let answer = Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 7]), 1)]);
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::AnswerThenDrop(1, answer))
        .start()
        .await;
    let meshdns = Meshdns::cached(
        &upstream,
        &[
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "1s"),
        ],
    )
    .await;
    let fresh = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(fresh.answer_lines(), [format!("{NAME} A 192.0.2.7")]);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let started = Instant::now();
    let stale = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    let took = started.elapsed();
    assert_eq!(stale.msg.response_code, ResponseCode::NoError);
    assert_eq!(stale.answer_lines(), [format!("{NAME} A 192.0.2.7")]);
    assert!(stale.msg.answers[0].ttl <= 30);
    // RFC 8767's client response timer: one attempt timeout, not the whole MESHDNS_TIMEOUT.
    assert_eq!(took, ATTEMPT);
    assert!(
        upstream.exchanges().len() >= 2,
        "the expired entry was asked again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_leg_of_a_gathered_answer_is_filled_from_its_stale_answer() {
    let srv_owner = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let srv_answer = |n: u8, ttl: u32| {
        let pod = "mongo-0.mongo.db.svc.cluster.local.";
        Answer::records([rr::with_ttl(rr::srv(srv_owner, 27017, pod), ttl)])
            .additional(rr::with_ttl(rr::a(pod, [10, n, 1, 0]), ttl))
    };
    let up = |n: u8| FakeDns::builder().answer(srv_owner, RecordType::SRV, srv_answer(n, 30));
    // Cluster c answers once, with TTL 1, then goes silent.
    let c = FakeDns::builder()
        .on(
            srv_owner,
            RecordType::SRV,
            Behaviour::AnswerThenDrop(1, srv_answer(3, 1)),
        )
        .start()
        .await;
    let (a, b) = (up(1).start().await, up(2).start().await);
    let clusters = format!("a=; b={}; c={}", b.addr, c.addr);
    let meshdns = Meshdns::cached(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "2s"),
        ],
    )
    .await;
    let asked = "_mongodb._tcp.mongo.db.svc.distributed.local.";
    let all_three = [
        "a-mongo-0.mongo.db.svc.distributed.local.",
        "b-mongo-0.mongo.db.svc.distributed.local.",
        "c-mongo-0.mongo.db.svc.distributed.local.",
    ];
    let first = udp(meshdns.addr, &query(asked, RecordType::SRV)).await;
    assert_eq!(first.srv_targets(), all_three);

    // The merged entry (TTL 1, from c) and c's leg expire; c is silent now.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = Instant::now();
    let filled = udp(meshdns.addr, &query(asked, RecordType::SRV)).await;
    let took = started.elapsed();
    assert_eq!(filled.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        filled.srv_targets(),
        all_three,
        "c's records from its stale answer"
    );
    assert!(
        filled
            .additional_lines()
            .contains(&"c-mongo-0.mongo.db.svc.distributed.local. A 10.3.1.0".to_string())
    );
    let max = ttls(&filled).into_iter().max().unwrap_or(0);
    assert!(max <= 5, "a partial answer's TTLs are capped, got {max}");
    // c's leg is cut one attempt timeout after a and b answered, not at the 2 s deadline.
    assert_eq!(took, ATTEMPT);
    assert!(c.exchanges().len() >= 2, "c was asked again");
}

#[tokio::test]
async fn a_flood_of_random_names_keeps_the_cache_bounded() {
    const FLOOD: usize = 500;
    const SIZE: usize = 50;
    let upstream = upstream_with_ttl(300)
        .otherwise(Behaviour::Answer(Answer::nxdomain("example.com.")))
        .start()
        .await;
    let size = SIZE.to_string();
    let meshdns = Meshdns::cached(&upstream, &[("MESHDNS_CACHE_SIZE", &size)]).await;
    // A name the workload keeps asking for: stored, then hit.
    for _ in 0..2 {
        udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    }
    let names: Vec<String> = (0..FLOOD)
        .map(|i| format!("r{i}x.flood.example.com."))
        .collect();
    for batch in names.chunks(50) {
        let clients: Vec<_> = batch
            .iter()
            .map(|name| {
                let (server, msg) = (meshdns.addr, query(name, RecordType::A));
                tokio::spawn(async move { udp(server, &msg).await })
            })
            .collect();
        for client in clients {
            let reply = client.await.expect("the client task");
            assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
        }
    }
    // One exchange per name (a datagram the loaded machine answered after the retransmission
    // timeout may have been sent twice).
    assert_eq!(upstream.exchanges().len(), 1 + FLOOD);

    // Still answering, from the cache for the most recent names and for the popular one.
    let last = udp(meshdns.addr, &query(&names[FLOOD - 1], RecordType::A)).await;
    assert_eq!(last.msg.response_code, ResponseCode::NXDomain);
    let popular = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(popular.answer_lines(), [format!("{NAME} A 192.0.2.1")]);
    assert_eq!(
        upstream.exchanges().len(),
        1 + FLOOD,
        "the latest name and the popular one are still cached"
    );

    assert_eq!(
        meshdns.metric("meshdns_cache_entries", &[]).await,
        SIZE as f64
    );
    assert_eq!(
        meshdns.metric("meshdns_cache_evictions_total", &[]).await,
        (1 + FLOOD - SIZE) as f64,
        "every name beyond the size evicts one"
    );
}

/// The cache key holds the question's class: an answer cached for class IN is never the answer
/// to the same name and type in another class (CHAOS, HESIOD), on the hit path or the miss.
#[tokio::test]
async fn an_answer_cached_for_class_in_never_answers_another_class() {
    use hickory_proto::rr::DNSClass;
    const WWW: &str = "www.example.com.";
    let kube = FakeDns::builder()
        .on(
            WWW,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([rr::a(WWW, [192, 0, 2, 1])]),
                Answer::records([rr::a(WWW, [192, 0, 2, 2])]),
            ]),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let first = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(first.answer_lines(), [format!("{WWW} A 192.0.2.1")]);
    for class in [DNSClass::CH, DNSClass::HS] {
        let mut asked = query(WWW, RecordType::A);
        asked.queries[0].set_query_class(class);
        let reply = udp(meshdns.addr, &asked).await;
        assert_eq!(
            reply.msg.queries[0].query_class(),
            class,
            "the client's question"
        );
        assert_ne!(
            reply.answer_lines(),
            first.answer_lines(),
            "{class}: the IN answer came from the cache"
        );
    }
    assert_eq!(kube.exchanges().len(), 3, "every class asked upstream");
}

/// A kube-dns that answers `NAME` A with 192.0.2.1 and `ttl`.
async fn answering_192_0_2_1(ttl: u32) -> FakeDns {
    let answer = Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 1]), ttl)]);
    (FakeDns::builder().answer(NAME, RecordType::A, answer))
        .start()
        .await
}

/// The SOA of `zone` with this TTL and MINIMUM.
fn soa_with(zone: &str, ttl: u32, minimum: u32) -> Record {
    let soa = SOA::new(
        rr::name(&format!("ns.dns.{zone}")),
        rr::name(&format!("hostmaster.{zone}")),
        1,
        7200,
        1800,
        86_400,
        minimum,
    );
    Record::from_rdata(rr::name(zone), ttl, RData::SOA(soa))
}

/// meshdns (cache on) in front of a kube-dns whose [`NAME`] A is first 192.0.2.7 with TTL 1 s,
/// then `then`: asked once, and again 2 s later, once the first answer has expired; then
/// kube-dns goes silent. Returns meshdns, the silent kube-dns and the second reply.
async fn answered_then_down(then: Answer) -> (Meshdns, FakeDns, Reply) {
    let first = Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 7]), 1)]);
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::Sequence(vec![first, then]))
        .start()
        .await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    let first = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{NAME} A 192.0.2.7")]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = ask(&meshdns, NAME, RecordType::A).await;
    let down = FakeDns::builder()
        .otherwise(Behaviour::Drop)
        .replace(upstream)
        .await;
    (meshdns, down, second)
}

/// The name was cached (TTL 1 s), then removed: kube-dns now answers NXDOMAIN, but without an
/// SOA (nothing to cache it by, RFC 2308 §5). When kube-dns then stops answering, the old
/// address must not come back as a stale answer: the upstream said "no such name" after it
/// (docs/design.md, "Cache": an answer that is not kept still replaces what was known; RFC
/// 8767 §4 serves stale data only as the freshest there is).
#[tokio::test(start_paused = true)]
async fn a_name_the_upstream_just_said_is_gone_never_comes_back_stale() {
    let gone = Answer {
        authoritative: true,
        ..Answer::rcode(ResponseCode::NXDomain)
    };
    let (meshdns, _down, removed) = answered_then_down(gone).await;
    assert_eq!(removed.msg.response_code, ResponseCode::NXDomain);
    let later = ask(&meshdns, NAME, RecordType::A).await;
    assert!(
        later.msg.answers.is_empty(),
        "the removed name came back stale: {:?} ({})",
        later.answer_lines(),
        later.msg.response_code
    );
}

/// The same with an answer the cache does not keep because its TTL is 0: kube-dns moved the
/// name to a new address, with TTL 0 (RFC 1035 §3.2.1: use it for this transaction only).
/// When kube-dns then stops answering, the old address must not be served stale: it is no
/// longer the freshest answer there is — it is another pod's address.
#[tokio::test(start_paused = true)]
async fn an_address_replaced_by_a_ttl_0_answer_never_comes_back_stale() {
    let moved = Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 8]), 0)]);
    let (meshdns, _down, moved) = answered_then_down(moved).await;
    assert_eq!(moved.answer_lines(), [format!("{NAME} A 192.0.2.8")]);
    assert_eq!(moved.msg.answers[0].ttl, 0, "TTL 0 relayed as it is");
    let later = ask(&meshdns, NAME, RecordType::A).await;
    assert_ne!(
        later.answer_lines(),
        [format!("{NAME} A 192.0.2.7")],
        "the old address came back stale after a newer answer"
    );
}

/// A CNAME whose target has no record of the type asked (NOERROR, the CNAME in the answer,
/// the target zone's SOA in authority) is a negative answer (RFC 2308 §2.2): it is cached no
/// longer than `MESHDNS_CACHE_NEGATIVE_TTL` (docs/design.md, "Cache"), whatever the CNAME's TTL.
/// Once the record appears, it is seen after the negative cap, not after the CNAME's TTL.
#[tokio::test(start_paused = true)]
async fn a_cname_to_nodata_is_cached_no_longer_than_the_negative_cap() {
    let alias = "alias.example.com.";
    let target = "target.example.net.";
    let cname = rr::with_ttl(rr::cname(alias, target), 300);
    let nodata = Answer {
        answers: vec![cname.clone()],
        authorities: vec![soa_with("example.net.", 5, 5)],
        ..Answer::rcode(ResponseCode::NoError)
    };
    let appeared = Answer::records([cname, rr::with_ttl(rr::aaaa(target, "2001:db8::9"), 300)]);
    let upstream = FakeDns::builder()
        .on(
            alias,
            RecordType::AAAA,
            Behaviour::Sequence(vec![nodata, appeared]),
        )
        .start()
        .await;
    let meshdns =
        Meshdns::cached_failing_fast(&upstream, &[("MESHDNS_CACHE_NEGATIVE_TTL", "5s")]).await;
    let first = ask(&meshdns, alias, RecordType::AAAA).await;
    assert_eq!(first.msg.answers.len(), 1, "the CNAME alone");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let later = ask(&meshdns, alias, RecordType::AAAA).await;
    assert_eq!(
        upstream.exchanges().len(),
        2,
        "the negative part was served from the cache past the negative cap"
    );
    assert_eq!(later.msg.answers.len(), 2, "{:?}", later.answer_lines());
}

/// `MESHDNS_CACHE_MAX_TTL` caps every record a reply carries (docs/design.md, "Cache": "Replies
/// carry the capped TTLs"), the authority and additional sections too, on the miss that
/// fetched it and on a hit: a client never holds the delegation or the glue longer than
/// meshdns would hold the answer.
#[tokio::test(start_paused = true)]
async fn the_max_ttl_cap_applies_to_authority_and_additional_records_on_a_miss_and_a_hit() {
    let day = 86_400;
    let answer = Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 1]), day)])
        .authority(rr::with_ttl(
            rr::ns("example.com.", "ns1.example.com."),
            2 * day,
        ))
        .additional(rr::with_ttl(
            rr::a("ns1.example.com.", [192, 0, 2, 53]),
            2 * day,
        ));
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns =
        Meshdns::cached_failing_fast(&upstream, &[("MESHDNS_CACHE_MAX_TTL", "60s")]).await;
    for round in ["miss", "hit"] {
        let reply = ask(&meshdns, NAME, RecordType::A).await;
        let ttls: Vec<u32> = (reply.msg.answers.iter())
            .chain(&reply.msg.authorities)
            .chain(reply.msg.additionals.iter())
            .map(|r| r.ttl)
            .collect();
        assert_eq!(ttls.len(), 3, "{round}: every section kept");
        assert!(ttls.iter().all(|&t| t <= 60), "{round}: {ttls:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

/// An answer with TTL 0 is relayed with TTL 0 (RFC 1035 §3.2.1) and never cached: each query
/// asks the upstream again.
#[tokio::test(start_paused = true)]
async fn a_ttl_0_answer_is_relayed_as_it_is_and_never_cached() {
    let upstream = answering_192_0_2_1(0).await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    for _ in 0..3 {
        let reply = ask(&meshdns, NAME, RecordType::A).await;
        assert_eq!(reply.answer_lines(), [format!("{NAME} A 192.0.2.1")]);
        assert_eq!(reply.msg.answers[0].ttl, 0);
    }
    assert_eq!(upstream.exchanges().len(), 3, "nothing was cached");
}

/// The name was cached, then removed: kube-dns answers NXDOMAIN with its SOA (cached, 5 s).
/// When kube-dns then stops answering, the old address never comes back stale — neither
/// while the NXDOMAIN is fresh nor once it has expired (then the NXDOMAIN is what is stale).
#[tokio::test(start_paused = true)]
async fn a_name_the_upstream_said_is_gone_with_an_soa_never_comes_back_stale() {
    let (meshdns, _down, removed) = answered_then_down(Answer::nxdomain("example.com.")).await;
    assert_eq!(removed.msg.response_code, ResponseCode::NXDomain);
    for wait in [1, 6, 30] {
        tokio::time::sleep(Duration::from_secs(wait)).await;
        let later = ask(&meshdns, NAME, RecordType::A).await;
        assert!(
            later.msg.answers.is_empty(),
            "after {wait} s more: {:?}",
            later.answer_lines()
        );
    }
}

/// `MESHDNS_CACHE_MAX_TTL` is live (README.md: "cap on positive TTLs | live"): after a reload
/// lowers it, no reply carries a TTL above the cap in force — an entry stored under the old
/// cap is served with its TTLs cut to the new one, and expires by it (docs/design.md,
/// "Cache": both caps are live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reload_lowers_the_max_ttl_no_reply_carries_a_ttl_above_it() {
    use support::configmap::ConfigMapDir;
    let upstream = answering_192_0_2_1(300).await;
    let mut dir = ConfigMapDir::new("max-ttl", &[("MESHDNS_CACHE_MAX_TTL", "3600s")]);
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[("MESHDNS_CONFIG_DIR", &path)]).await;
    let first = ask(&meshdns, NAME, RecordType::A).await;
    assert!(first.msg.answers[0].ttl > 250);
    dir.update(&[("MESHDNS_CACHE_MAX_TTL", "10s")]);
    assert!(
        support::eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    let after = ask(&meshdns, NAME, RecordType::A).await;
    assert!(
        after.msg.answers[0].ttl <= 10,
        "TTL {} above the 10 s cap in force",
        after.msg.answers[0].ttl
    );
}

/// RFC 2181 §8: a TTL with its most significant bit set is to be treated as 0 — the record is
/// used for this answer only. meshdns must not cache it for `MESHDNS_CACHE_MAX_TTL` nor hand
/// it to its client as a TTL of an hour.
#[tokio::test(start_paused = true)]
async fn a_ttl_with_the_top_bit_set_is_taken_as_0() {
    let upstream = answering_192_0_2_1(0x8000_0000).await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    for _ in 0..2 {
        let reply = ask(&meshdns, NAME, RecordType::A).await;
        let ttl = reply.msg.answers[0].ttl;
        assert!(ttl == 0 || ttl == 0x8000_0000, "TTL {ttl}");
    }
    assert_eq!(upstream.exchanges().len(), 2, "not cached");
}
