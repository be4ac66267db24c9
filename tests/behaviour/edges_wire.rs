//! A third review of the edges, on the wire: TTL semantics, truncation and big answers, the
//! TCP server, serve-stale and remembered failures, EDNS. Each test is named after what must
//! hold; seven reproduced a bug found by the review: an answer the cache does not keep
//! (NXDOMAIN without an SOA, TTL 0) left the older entry to come back stale, on pass-through
//! and for a gathered leg; a CNAME to NODATA cached past the negative cap; TTLs above a
//! `MESHDNS_CACHE_MAX_TTL` lowered by a reload; a TTL with its top bit set cached for an
//! hour; the fallback cut dropping an EDNS client's OPT record.
//!
//! The fakes stand on 127.0.0.1; tests about time run on tokio's paused clock.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{RData, Record, RecordType};
use support::{Answer, Behaviour, FakeDns, Meshdns, Reply, ask, query, rr, udp, with_edns};

const NAME: &str = "www.example.com.";

/// meshdns with its cache on, in front of `upstream`; an attempt of 200 ms, a query of 1 s.
async fn cached(upstream: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
    let mut all = vec![
        ("MESHDNS_CACHE_SIZE", "10000"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "1s"),
    ];
    all.extend_from_slice(vars);
    Meshdns::before(upstream, &all).await
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

// --- Serve-stale: a newer answer the cache does not keep ------------------------------------

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
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 7]), 1)]),
                gone,
            ]),
        )
        .start()
        .await;
    let meshdns = cached(&upstream, &[]).await;
    let first = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{NAME} A 192.0.2.7")]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let removed = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(removed.msg.response_code, ResponseCode::NXDomain);

    let _down = FakeDns::builder()
        .otherwise(Behaviour::Drop)
        .replace(upstream)
        .await;
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
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 7]), 1)]),
                Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 8]), 0)]),
            ]),
        )
        .start()
        .await;
    let meshdns = cached(&upstream, &[]).await;
    let first = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{NAME} A 192.0.2.7")]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let moved = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(moved.answer_lines(), [format!("{NAME} A 192.0.2.8")]);
    assert_eq!(moved.msg.answers[0].ttl, 0, "TTL 0 relayed as it is");

    let _down = FakeDns::builder()
        .otherwise(Behaviour::Drop)
        .replace(upstream)
        .await;
    let later = ask(&meshdns, NAME, RecordType::A).await;
    assert_ne!(
        later.answer_lines(),
        [format!("{NAME} A 192.0.2.7")],
        "the old address came back stale after a newer answer"
    );
}

// --- TTLs ----------------------------------------------------------------------------------

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
    let meshdns = cached(&upstream, &[("MESHDNS_CACHE_NEGATIVE_TTL", "5s")]).await;
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
    let meshdns = cached(&upstream, &[("MESHDNS_CACHE_MAX_TTL", "60s")]).await;
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

// --- Truncation ----------------------------------------------------------------------------

/// `query` with an OPT record advertising `size` bytes, written into the bytes (hickory raises
/// any size below 512 to 512 when it encodes).
fn with_raw_edns_size(msg: &Message, size: u16) -> Vec<u8> {
    let mut bytes = with_edns(msg.clone(), 1232).to_vec().unwrap();
    let class_at = bytes.len() - 8; // OPT: root(1) type(2) CLASS(2) TTL(4) RDLEN(2), no options
    bytes[class_at..class_at + 2].copy_from_slice(&size.to_be_bytes());
    bytes
}

/// A client advertising an EDNS payload below 512 is answered as if it said 512 (RFC 6891
/// §6.2.3: "Values lower than 512 MUST be treated as equal to 512"): an answer of ~400 bytes
/// comes whole, without TC, with an OPT record, on a miss and on a hit.
#[tokio::test]
async fn an_edns_payload_below_512_is_taken_as_512() {
    let records: Vec<Record> = (0..20u8).map(|i| rr::a(NAME, [192, 0, 2, i])).collect();
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, Answer::records(records))
        .start()
        .await;
    let meshdns = cached(&upstream, &[]).await;
    for round in ["miss", "hit"] {
        let asked = query(NAME, RecordType::A);
        let bytes = with_raw_edns_size(&asked, 100);
        let reply = support::udp_raw(meshdns.addr, &bytes).await.expect(round);
        assert!(
            reply.len() > 100 && reply.len() <= 512,
            "{round}: {}",
            reply.len()
        );
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.id, asked.id);
        assert!(!reply.truncation, "{round}: cut below 512");
        assert_eq!(reply.answers.len(), 20, "{round}");
        assert!(reply.edns.is_some(), "{round}: the OPT record kept");
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

// --- The TCP server ------------------------------------------------------------------------

/// Queries pipelined on one connection with the same ID (RFC 7766 §7: a client should not,
/// but a server must cope) each get a reply of their own, complete and carrying the question
/// it answers — two of them the same question, one of them another.
#[tokio::test]
async fn pipelined_queries_with_one_id_each_get_their_own_complete_answer() {
    use tokio::io::AsyncWriteExt;
    let names = ["one.example.com.", "two.example.com."];
    let mut builder = FakeDns::builder();
    for (i, name) in (1u8..).zip(names) {
        let records: Vec<Record> = (0..3).map(|j| rr::a(name, [192, 0, i, j])).collect();
        let slow = Behaviour::Delay(
            Duration::from_millis(50 * u64::from(i)),
            Answer::records(records),
        );
        builder = builder.on(name, RecordType::A, slow);
    }
    let upstream = builder.start().await;
    let meshdns = cached(&upstream, &[]).await;
    let asked = [names[0], names[1], names[0]];
    let mut stream = tokio::net::TcpStream::connect(meshdns.addr).await.unwrap();
    let mut frames = Vec::new();
    for name in asked {
        let mut msg = query(name, RecordType::A);
        msg.metadata.id = 7;
        frames.extend(support::frame_of(&msg.to_vec().unwrap()));
    }
    stream.write_all(&frames).await.unwrap();
    let mut answered = Vec::new();
    for _ in asked {
        let bytes = tokio::time::timeout(support::CLIENT_TIMEOUT, support::read_frame(&mut stream))
            .await
            .expect("a reply in time")
            .expect("a whole frame");
        let reply = Message::from_vec(&bytes).unwrap();
        assert_eq!(reply.id, 7);
        let name = reply.queries[0].name().to_ascii();
        assert_eq!(reply.answers.len(), 3, "{name}: the whole set");
        assert!(
            reply.answers.iter().all(|r| r.name.to_ascii() == name),
            "{name}"
        );
        answered.push(name);
    }
    answered.sort();
    assert_eq!(answered, [names[0], names[0], names[1]]);
}

/// A kube-dns stand-in on UDP that answers every query with `records` A records of the
/// question's name, one record hickory cannot parse (a CAA with an empty tag, RFC 8659 §4.1;
/// meshdns's own walk takes it) and an OPT record: what meshdns must fit without hickory.
async fn raw_udp_upstream(records: u8) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_535];
        loop {
            let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let query = &buf[..len];
            let Some(question) = meshdns::testing::wire::first_question(query) else {
                continue;
            };
            let mut reply = query[..12].to_vec();
            reply[2] |= 0x80;
            reply[3] = 0x80;
            reply[4..12].copy_from_slice(&[0, 1, 0, records + 1, 0, 0, 0, 1]);
            reply.extend_from_slice(question);
            for i in 0..records {
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0, 2, i]);
            }
            reply.extend_from_slice(&[0xc0, 12, 1, 1, 0, 1, 0, 0, 0, 30, 0, 2, 0, 0]);
            reply.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0, 0, 0]);
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    (addr, task)
}

/// A cached answer too big for a client's UDP size is cut for it; when the cut cannot re-encode
/// the answer (a record hickory rejects), the reply still carries an OPT record, because the
/// client sent one (RFC 6891 §7: a responder "MUST include an OPT record" in its response to
/// a query with one). A stub that gets
/// none concludes the server lacks EDNS (systemd-resolved then downgrades the server's feature
/// level, and DO with it).
#[tokio::test]
async fn a_cut_that_cannot_reencode_keeps_the_clients_opt_record() {
    let (upstream, task) = raw_udp_upstream(90).await;
    let upstreams = upstream.to_string();
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", upstreams.as_str()),
        ("MESHDNS_CACHE_SIZE", "10000"),
    ])
    .await;
    let first = with_edns(query(NAME, RecordType::A), 4096)
        .to_vec()
        .unwrap();
    let whole = support::udp_raw(meshdns.addr, &first)
        .await
        .expect("a reply");
    assert!(whole.len() > 1232 && !meshdns::testing::wire::is_truncated(&whole));
    let asked = with_edns(query(NAME, RecordType::A), 1232);
    let bytes = support::udp_raw(meshdns.addr, &asked.to_vec().unwrap())
        .await
        .expect("a reply");
    assert!(bytes.len() <= 1232);
    assert!(
        meshdns::testing::wire::is_truncated(&bytes),
        "TC: the answer does not fit"
    );
    assert_eq!(meshdns::testing::wire::id(&bytes), Some(asked.id));
    assert!(
        meshdns::testing::wire::opt(&bytes).flatten().is_some(),
        "the client sent EDNS and got no OPT record back"
    );
    task.abort();
}

/// An answer with TTL 0 is relayed with TTL 0 (RFC 1035 §3.2.1) and never cached: each query
/// asks the upstream again.
#[tokio::test(start_paused = true)]
async fn a_ttl_0_answer_is_relayed_as_it_is_and_never_cached() {
    let upstream = answering_192_0_2_1(0).await;
    let meshdns = cached(&upstream, &[]).await;
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
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([rr::with_ttl(rr::a(NAME, [192, 0, 2, 7]), 1)]),
                Answer::nxdomain("example.com."),
            ]),
        )
        .start()
        .await;
    let meshdns = cached(&upstream, &[]).await;
    ask(&meshdns, NAME, RecordType::A).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let removed = ask(&meshdns, NAME, RecordType::A).await;
    assert_eq!(removed.msg.response_code, ResponseCode::NXDomain);
    let _down = FakeDns::builder()
        .otherwise(Behaviour::Drop)
        .replace(upstream)
        .await;
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

/// The EDNS options of a reply: codes.
fn option_codes(reply: &Reply) -> Vec<u16> {
    let Some(edns) = reply.msg.edns.as_ref() else {
        return Vec::new();
    };
    (edns.options().as_ref().iter())
        .map(|(code, _)| u16::from(*code))
        .collect()
}

/// An EDNS option meshdns does not know, sent by the client, is not echoed back (RFC 6891
/// §6.1.2: options are not echoed unless their own specification says so): not by
/// pass-through (on a miss or a hit), not in a reply meshdns writes itself (a distributed
/// zone's NODATA, BADVERS).
#[tokio::test]
async fn an_unknown_edns_option_of_the_client_is_never_echoed() {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    let upstream = FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [192, 0, 2, 1])]),
        )
        .start()
        .await;
    let peer = FakeDns::builder().otherwise(Behaviour::Drop).start().await;
    let clusters = format!("a=; b={}", peer.addr);
    let meshdns = cached(
        &upstream,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ],
    )
    .await;
    let asking = |name: &str, rtype: RecordType, version: u8| {
        let mut msg = with_edns(query(name, rtype), 1232);
        let edns = msg.edns.as_mut().unwrap();
        edns.set_version(version);
        edns.options_mut()
            .insert(EdnsOption::Unknown(65001, b"private".to_vec()));
        msg
    };
    let distributed = "mongo.db.svc.distributed.local.";
    for (what, msg) in [
        ("miss", asking(NAME, RecordType::A, 0)),
        ("hit", asking(NAME, RecordType::A, 0)),
        ("distributed NODATA", asking(distributed, RecordType::MX, 0)),
        ("BADVERS", asking(NAME, RecordType::A, 1)),
    ] {
        let reply = udp(meshdns.addr, &msg).await;
        assert!(reply.msg.edns.is_some(), "{what}: an OPT record");
        assert!(!option_codes(&reply).contains(&65001), "{what}: echoed");
    }
}

// --- Reloads and the cache's TTL policy ----------------------------------------------------

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
    let meshdns = cached(&upstream, &[("MESHDNS_CONFIG_DIR", &path)]).await;
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

/// The same for one leg of a gathered answer: cluster b had service `mongo` (its SRV answer
/// cached for b's leg), then deleted it — b answers NXDOMAIN without an SOA, which the leg
/// cache does not keep. When b then fails, its failed leg must not be filled with
/// the SRV set it had before it said the service is gone (docs/design.md, "Distributed
/// zones": a member removed from its cluster must not come back; the stale fill is for a
/// cluster whose last word was an answer).
#[tokio::test(start_paused = true)]
async fn a_service_a_cluster_just_said_is_gone_never_fills_its_failed_leg() {
    let srv = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let host = "mongo-0.mongo.db.svc.cluster.local.";
    let set = |ip: [u8; 4]| {
        Answer::records([rr::with_ttl(rr::srv(srv, 27017, host), 1)])
            .additional(rr::with_ttl(rr::a(host, ip), 1))
    };
    let a = FakeDns::builder()
        .answer(srv, RecordType::SRV, set([10, 1, 0, 1]))
        .start()
        .await;
    let gone = Answer {
        authoritative: true,
        ..Answer::rcode(ResponseCode::NXDomain)
    };
    let b = FakeDns::builder()
        .on(
            srv,
            RecordType::SRV,
            Behaviour::Sequence(vec![set([10, 2, 0, 1]), gone]),
        )
        .start()
        .await;
    let clusters = format!("a=; b={}", b.addr);
    let meshdns = cached(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ],
    )
    .await;
    let asked = "_mongodb._tcp.mongo.db.svc.distributed.local.";
    let targets = |reply: &Reply| -> Vec<String> {
        (reply.msg.answers.iter())
            .filter_map(|r| match &r.data {
                RData::SRV(srv) => Some(srv.target.to_ascii()),
                _ => None,
            })
            .collect()
    };
    let both = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(targets(&both).len(), 2, "{:?}", both.answer_lines());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let only_a = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(
        targets(&only_a),
        ["a-mongo-0.mongo.db.svc.distributed.local."],
        "b said the service is gone"
    );

    // b goes away (its port closed: each leg fails at once, before the client timer).
    drop(b);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(
        targets(&later),
        ["a-mongo-0.mongo.db.svc.distributed.local."],
        "b's removed service came back from its stale leg"
    );
}

/// A reply cut for a small UDP size (re-encoded record by record) still matches the client's
/// query: its ID, its question as spelled (letter case included), RD and CD as sent, and the
/// AA bit as the upstream gave it; whole RRsets with TC — on a miss and on a hit.
#[tokio::test]
async fn a_cut_reply_keeps_the_clients_id_question_spelling_and_flags() {
    let records: Vec<Record> = (0..60u8).map(|i| rr::a(NAME, [192, 0, 2, i])).collect();
    let answer = Answer {
        authoritative: true,
        ..Answer::records(records)
    };
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = cached(&upstream, &[]).await;
    for round in ["miss", "hit"] {
        let mut asked = query("WWW.Example.COM.", RecordType::A);
        asked.metadata.recursion_desired = false;
        asked.metadata.checking_disabled = true;
        let reply = udp(meshdns.addr, &asked).await;
        assert!(reply.bytes.len() <= 512, "{round}");
        assert!(reply.msg.truncation, "{round}: TC");
        assert!(
            reply.msg.answers.is_empty(),
            "{round}: all of the set or none"
        );
        assert_eq!(reply.msg.queries, asked.queries, "{round}");
        assert_eq!(
            reply.msg.queries[0].name().to_ascii(),
            "WWW.Example.COM.",
            "{round}"
        );
        assert!(!reply.msg.recursion_desired, "{round}: RD");
        assert!(reply.msg.checking_disabled, "{round}: CD");
        assert!(reply.msg.authoritative, "{round}: AA");
        assert!(
            reply.msg.edns.is_none(),
            "{round}: no OPT for a client without"
        );
    }
}

/// A reload in the middle of a pipelined batch on one TCP connection (RFC 7766 §6.2.1.1):
/// every query gets its own complete reply; those read before the reload are answered on the
/// configuration they started on (the old kube-dns, docs/design.md "Live configuration":
/// "applied without dropping a query"), those read after on the new one — never a mix, never
/// a drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_in_the_middle_of_a_pipelined_batch_drops_and_mixes_nothing() {
    use support::configmap::ConfigMapDir;
    use tokio::io::AsyncWriteExt;
    let name = |i: usize| format!("q{i}.example.com.");
    let serving = |octet: u8, delay: u64| {
        let mut builder = FakeDns::builder();
        for i in 0..10 {
            let records: Vec<Record> = (0..3).map(|j| rr::a(&name(i), [10, octet, 0, j])).collect();
            let slow = Behaviour::Delay(Duration::from_millis(delay), Answer::records(records));
            builder = builder.on(&name(i), RecordType::A, slow);
        }
        builder
    };
    let old = serving(1, 300).start().await;
    let new = serving(2, 0).start().await;
    let (old_addr, new_addr) = (old.addr.to_string(), new.addr.to_string());
    let mut dir = ConfigMapDir::new("pipelined", &[("MESHDNS_UPSTREAMS", old_addr.as_str())]);
    let path = dir.path.display().to_string();
    let meshdns = cached(&old, &[("MESHDNS_CONFIG_DIR", &path)]).await;
    let mut stream = tokio::net::TcpStream::connect(meshdns.addr).await.unwrap();
    let send = |range: std::ops::Range<usize>| {
        let mut frames = Vec::new();
        for i in range {
            let mut msg = query(&name(i), RecordType::A);
            msg.metadata.id = u16::try_from(i).unwrap();
            frames.extend(support::frame_of(&msg.to_vec().unwrap()));
        }
        frames
    };
    stream.write_all(&send(0..5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    dir.update(&[("MESHDNS_UPSTREAMS", new_addr.as_str())]);
    assert!(
        support::eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    stream.write_all(&send(5..10)).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..10 {
        let bytes = tokio::time::timeout(support::CLIENT_TIMEOUT, support::read_frame(&mut stream))
            .await
            .expect("a reply in time")
            .expect("a whole frame");
        let reply = Message::from_vec(&bytes).unwrap();
        let i = usize::from(reply.id);
        assert_eq!(
            reply.queries[0].name().to_ascii(),
            name(i),
            "reply {i} matched"
        );
        assert_eq!(reply.answers.len(), 3, "{i}: the whole set");
        let octets: Vec<u8> = (reply.answers.iter())
            .map(|r| match &r.data {
                RData::A(a) => a.0.octets()[1],
                other => panic!("{other:?}"),
            })
            .collect();
        let expected = if i < 5 { 1 } else { 2 };
        assert_eq!(
            octets, [expected; 3],
            "{i}: answered by one kube-dns, the right one"
        );
        seen.push(i);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

/// RFC 2181 §8: a TTL with its most significant bit set is to be treated as 0 — the record is
/// used for this answer only. meshdns must not cache it for `MESHDNS_CACHE_MAX_TTL` nor hand
/// it to its client as a TTL of an hour.
#[tokio::test(start_paused = true)]
async fn a_ttl_with_the_top_bit_set_is_taken_as_0() {
    let upstream = answering_192_0_2_1(0x8000_0000).await;
    let meshdns = cached(&upstream, &[]).await;
    for _ in 0..2 {
        let reply = ask(&meshdns, NAME, RecordType::A).await;
        let ttl = reply.msg.answers[0].ttl;
        assert!(ttl == 0 || ttl == 0x8000_0000, "TTL {ttl}");
    }
    assert_eq!(upstream.exchanges().len(), 2, "not cached");
}
