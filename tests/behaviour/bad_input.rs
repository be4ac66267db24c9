//! Bad input (docs/design.md, "Limits and bad input"): malformed packets get FORMERR when the
//! header can be read and are dropped otherwise (a question the router cannot read, two OPT
//! records, an OPT record out of place — and none of them answered from the cache), other
//! opcodes NOTIMP, QDCOUNT ≠ 1 FORMERR, zone transfers REFUSED, clients outside
//! `MESHDNS_ALLOW_FROM` REFUSED — and nothing a client sends stops the server.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::RecordType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{
    Answer, Behaviour, FakeDns, Meshdns, frame_of, query, query_with_edns_options, rcode_of, rr,
    tcp, tcp_raw, udp, udp_raw, with_edns,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

const NAME: &str = "www.example.com.";

async fn upstream() -> FakeDns {
    FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [192, 0, 2, 1])]),
        )
        .start()
        .await
}

/// meshdns before an upstream that knows [`NAME`].
async fn serving() -> (FakeDns, Meshdns) {
    let upstream = upstream().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    (upstream, meshdns)
}

/// [`serving`] with the cache on.
async fn serving_cached() -> (FakeDns, Meshdns) {
    let upstream = upstream().await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    (upstream, meshdns)
}

/// meshdns that serves 127.0.0.2 only.
async fn serving_127_0_0_2() -> (FakeDns, Meshdns) {
    let upstream = upstream().await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_ALLOW_FROM", "127.0.0.2/32")]).await;
    (upstream, meshdns)
}

async fn assert_still_answers(meshdns: &Meshdns) {
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(
        reply.answer_lines().len(),
        1,
        "a normal query is still answered"
    );
    let reply = tcp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.answer_lines().len(), 1, "and over TCP too");
}

/// A valid query with some bytes flipped, or cut short, or random bytes altogether.
fn mangled(rng: &mut StdRng, valid: &[u8]) -> Vec<u8> {
    match rng.random_range(0..3) {
        0 => {
            let len = rng.random_range(0..600);
            (0..len).map(|_| rng.random()).collect()
        }
        1 => {
            let mut bytes = valid.to_vec();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= rng.random_range(1..=255u8);
            }
            bytes
        }
        _ => valid[..rng.random_range(0..valid.len())].to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_random_and_mangled_datagrams_do_not_stop_the_server() {
    let (_upstream, meshdns) = serving().await;
    let valid = support::with_edns(query(NAME, RecordType::A), 1232)
        .to_vec()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(0x6d65_7368);
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let replies = tokio::spawn(unparseable_replies(Arc::clone(&socket)));
    for sent in 0..10_000 {
        let datagram = mangled(&mut rng, &valid);
        let _ = socket.send_to(&datagram, meshdns.addr).await;
        // Let the server keep up now and then, so most datagrams are read, not dropped by the
        // kernel: the point is what meshdns does with them.
        if sent % 200 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let (answered, unparseable) = replies.await.unwrap();
    assert!(answered > 0, "meshdns answered some of them");
    assert!(
        unparseable.is_empty(),
        "replies that do not parse: {unparseable:02x?}"
    );
    assert_still_answers(&meshdns).await;
}

/// Reads replies until none comes for a while: how many, and those that do not parse.
async fn unparseable_replies(socket: Arc<UdpSocket>) -> (usize, Vec<Vec<u8>>) {
    let (mut answered, mut unparseable) = (0, Vec::new());
    let mut buf = vec![0u8; 65_535];
    while let Ok(Ok(len)) =
        tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await
    {
        answered += 1;
        if Message::from_vec(&buf[..len]).is_err() {
            unparseable.push(buf[..len].to_vec());
        }
    }
    (answered, unparseable)
}

#[tokio::test]
async fn tcp_garbage_does_not_stop_the_server() {
    let (_upstream, meshdns) = serving().await;
    let valid = query(NAME, RecordType::A).to_vec().unwrap();
    let mut rng = StdRng::seed_from_u64(0x0074_6370);
    let random: Vec<u8> = (0..4096).map(|_| rng.random()).collect();
    let half_frame = frame_of(&valid)[..valid.len() / 2].to_vec();
    let mut empty_then_short = vec![0, 0];
    empty_then_short.extend(frame_of(&valid[..5]));
    let sends: Vec<Vec<u8>> = vec![
        random,
        half_frame,
        vec![0xff, 0xff, 1, 2, 3],
        empty_then_short,
        vec![0],
    ];
    for bytes in sends {
        let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
        let _ = stream.write_all(&bytes).await;
        let _ = stream.shutdown().await;
    }
    assert_still_answers(&meshdns).await;
}

#[tokio::test]
async fn a_bad_frame_does_not_end_the_tcp_connection() {
    let (_upstream, meshdns) = serving().await;
    let asked = query(NAME, RecordType::A);
    let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
    let mut bytes = frame_of(b"short");
    bytes.extend(frame_of(&asked.to_vec().unwrap()));
    stream.write_all(&bytes).await.unwrap();
    let reply = tokio::time::timeout(support::CLIENT_TIMEOUT, support::read_frame(&mut stream))
        .await
        .expect("a reply in time")
        .expect("a frame");
    let reply = Message::from_vec(&reply).unwrap();
    assert_eq!(reply.id, asked.id);
    assert_eq!(reply.answers.len(), 1);
}

#[tokio::test]
async fn garbage_after_a_parseable_header_gets_formerr() {
    let (_upstream, meshdns) = serving().await;
    let mut bytes = query(NAME, RecordType::A).to_vec().unwrap();
    bytes.truncate(14);
    bytes.extend_from_slice(b"\xc0\xff garbage");
    let reply = udp_raw(meshdns.addr, &bytes).await.expect("a reply");
    assert_eq!(rcode_of(&reply), ResponseCode::FormErr);
    assert_eq!(reply[..2], bytes[..2], "the ID is echoed");
}

#[tokio::test]
async fn a_header_alone_gets_formerr_and_less_than_a_header_is_dropped() {
    let (_upstream, meshdns) = serving().await;
    let bytes = query(NAME, RecordType::A).to_vec().unwrap();
    let reply = udp_raw(meshdns.addr, &bytes[..12]).await.expect("a reply");
    assert_eq!(rcode_of(&reply), ResponseCode::FormErr);
    let nothing =
        support::udp_raw_within(meshdns.addr, &bytes[..11], Duration::from_millis(300)).await;
    assert_eq!(nothing, None);
}

#[tokio::test]
async fn a_question_that_cannot_be_parsed_is_not_echoed_in_formerr() {
    let (_upstream, meshdns) = serving().await;
    let mut bytes = query(NAME, RecordType::A).to_vec().unwrap();
    bytes.truncate(12);
    // A compression pointer to itself where the question's name should be.
    bytes.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
    let reply = udp_raw(meshdns.addr, &bytes).await.expect("a reply");
    assert_eq!(rcode_of(&reply), ResponseCode::FormErr);
}

/// What meshdns sends back, within 300 ms, to a message that is a response (QR set) for
/// [`NAME`] A: `None` when nothing comes.
async fn reply_to_a_response(addr: std::net::SocketAddr) -> Option<Vec<u8>> {
    let mut response = query(NAME, RecordType::A);
    response.metadata.message_type = MessageType::Response;
    let bytes = response.to_vec().unwrap();
    support::udp_raw_within(addr, &bytes, Duration::from_millis(300)).await
}

#[tokio::test]
async fn responses_sent_to_meshdns_are_dropped() {
    let (upstream, meshdns) = serving().await;
    assert_eq!(reply_to_a_response(meshdns.addr).await, None);
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn a_response_from_outside_allow_from_is_dropped_not_refused() {
    let (_upstream, meshdns) = serving_127_0_0_2().await;
    // A REFUSED reply to a response could start a packet loop with another server.
    assert_eq!(reply_to_a_response(meshdns.addr).await, None);
}

#[tokio::test]
async fn notify_and_update_get_notimp() {
    let (upstream, meshdns) = serving().await;
    for opcode in [OpCode::Notify, OpCode::Update] {
        let mut msg = query(NAME, RecordType::SOA);
        msg.metadata.op_code = opcode;
        let reply = udp(meshdns.addr, &msg).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NotImp, "{opcode:?}");
        assert_eq!(reply.msg.op_code, opcode);
    }
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn an_unknown_edns_version_gets_badvers_with_an_opt_record() {
    let (upstream, meshdns) = serving().await;
    let mut msg = support::with_edns(query(NAME, RecordType::A), 1232);
    if let Some(edns) = msg.edns.as_mut() {
        edns.set_version(1);
    }
    let reply = udp(meshdns.addr, &msg).await;
    // RCODE 16 lives partly in the OPT record (RFC 6891 §6.1.3), which must be there.
    let edns = reply.msg.edns.as_ref().expect("an OPT record");
    assert_eq!(edns.version(), 0);
    assert_eq!(u16::from(reply.msg.response_code), 16);
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn question_counts_of_zero_or_two_get_formerr() {
    let (upstream, meshdns) = serving().await;
    let mut none = query(NAME, RecordType::A);
    none.queries.clear();
    let mut two = query(NAME, RecordType::A);
    two.add_query(Query::query(rr::name("other.example.com."), RecordType::A));
    for msg in [none, two] {
        let reply = udp(meshdns.addr, &msg).await;
        assert_eq!(reply.msg.response_code, ResponseCode::FormErr);
    }
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn a_source_outside_allow_from_is_refused() {
    let (upstream, meshdns) = serving_127_0_0_2().await;
    // The test client asks from 127.0.0.1.
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::Refused);
    let reply = tcp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::Refused);
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn a_source_inside_allow_from_is_served() {
    let (_upstream, meshdns) = serving_127_0_0_2().await;
    let socket = UdpSocket::bind("127.0.0.2:0").await.unwrap();
    let asked = query(NAME, RecordType::A);
    socket
        .send_to(&asked.to_vec().unwrap(), meshdns.addr)
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let (len, _) = tokio::time::timeout(support::CLIENT_TIMEOUT, socket.recv_from(&mut buf))
        .await
        .expect("a reply")
        .unwrap();
    let reply = Message::from_vec(&buf[..len]).unwrap();
    assert_eq!(reply.response_code, ResponseCode::NoError);
    assert_eq!(reply.answers.len(), 1);
}

/// RFC 6891 §6.1.1: the OPT pseudo-record lives in the additional section. A query that carries
/// it in the answer or authority section is malformed (docs/design.md, "Limits and bad input":
/// FORMERR when the header can be read; "Cache": only well-formed queries take the cache-hit
/// path, anything else its proper error), and nothing of it is relayed.
#[tokio::test]
async fn an_opt_record_in_the_answer_or_authority_section_gets_formerr_and_is_not_relayed() {
    let kube = FakeDns::builder().nxdomain_otherwise().start().await;
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let asked = with_edns(query("www.example.com.", RecordType::A), 1232);
    let good = asked.to_vec().unwrap();
    // Cached first, so a hit would show: the malformed query must not be answered from it.
    assert_eq!(
        support::rcode_of(&support::udp_raw(meshdns.addr, &good).await.unwrap()),
        ResponseCode::NXDomain
    );
    // The one OPT record moved from ARCOUNT to ANCOUNT, then to NSCOUNT.
    for (what, count_at) in [("answer", 6), ("authority", 8)] {
        let mut bytes = good.clone();
        bytes[10..12].copy_from_slice(&[0, 0]);
        bytes[count_at..count_at + 2].copy_from_slice(&[0, 1]);
        let over_udp = support::udp_raw(meshdns.addr, &bytes).await;
        let over_tcp = support::tcp_raw(meshdns.addr, &bytes).await;
        for reply in [over_udp.expect("a reply over UDP"), over_tcp] {
            assert_eq!(support::rcode_of(&reply), ResponseCode::FormErr, "{what}");
            assert_eq!(reply[..2], bytes[..2], "{what}: the ID is echoed");
        }
    }
    assert_eq!(
        kube.seen().len(),
        1,
        "only the well-formed query was relayed"
    );
}

/// `msg` encoded with a second OPT record after the first (ARCOUNT 2).
fn with_two_opt_records(msg: &Message) -> Vec<u8> {
    let mut bytes = msg.to_vec().unwrap();
    let opt = bytes[bytes.len() - 11..].to_vec();
    assert_eq!(opt[..3], [0, 0, 41], "an empty OPT record ends the message");
    bytes.extend_from_slice(&opt);
    bytes[11] = 2;
    bytes
}

#[tokio::test]
async fn two_opt_records_get_formerr_even_when_the_name_is_cached() {
    let (upstream, meshdns) = serving_cached().await;
    let edns_query = with_edns(query(NAME, RecordType::A), 1232);
    udp(meshdns.addr, &edns_query).await;
    assert_eq!(udp(meshdns.addr, &edns_query).await.answer_lines().len(), 1);
    assert_eq!(meshdns.cache_hits().await, 1.0, "the name is cached");
    let two = with_two_opt_records(&edns_query);
    let over_udp = support::udp_raw(meshdns.addr, &two).await.expect("a reply");
    let over_tcp = tcp_raw(meshdns.addr, &two).await;
    for reply in [over_udp, over_tcp] {
        assert_eq!(rcode_of(&reply), ResponseCode::FormErr, "RFC 6891 §6.1.1");
        assert_eq!(reply[..2], two[..2], "the ID is echoed");
    }
    assert_eq!(
        meshdns.cache_hits().await,
        1.0,
        "no hit for a malformed query"
    );
    assert_eq!(upstream.exchanges().len(), 1, "nor was it forwarded");
}

#[tokio::test]
async fn only_well_formed_queries_take_the_cache_hit_path() {
    let (upstream, meshdns) = serving_cached().await;
    udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    let mut with_answer = with_edns(query(NAME, RecordType::A), 1232);
    with_answer.add_answer(rr::a(NAME, [192, 0, 2, 9]));
    let mut with_authority = with_edns(query(NAME, RecordType::A), 1232);
    with_authority.add_authority(rr::soa("example.com."));
    // An A record after the OPT record: the OPT is not last.
    let mut opt_not_last = with_edns(query(NAME, RecordType::A), 1232)
        .to_vec()
        .unwrap();
    opt_not_last.extend_from_slice(&[0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 192, 0, 2, 9]);
    opt_not_last[11] = 2;
    let odd = [
        with_answer.to_vec().unwrap(),
        with_authority.to_vec().unwrap(),
        opt_not_last,
    ];
    for bytes in &odd {
        support::udp_raw(meshdns.addr, bytes)
            .await
            .expect("a reply");
    }
    assert_eq!(
        meshdns.cache_hits().await,
        0.0,
        "none was answered from the cache"
    );
    assert_eq!(
        upstream.exchanges().len(),
        1 + odd.len(),
        "each took the full path"
    );
    udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert_eq!(
        meshdns.cache_hits().await,
        1.0,
        "a well-formed one still does"
    );
}

#[tokio::test]
async fn axfr_and_ixfr_are_refused_over_udp_and_tcp_and_never_cached() {
    // An upstream that would answer anything: it must never be asked.
    let upstream = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::records([rr::soa(
            "example.com.",
        )])))
        .start()
        .await;
    let clusters = format!("a=; b={}", upstream.addr);
    let meshdns = Meshdns::cached(
        &upstream,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await;
    for zone in ["example.com.", "db.cluster.b."] {
        let axfr = query(zone, RecordType::AXFR);
        // An IXFR query carries the client's SOA (its serial) in the authority section.
        let mut ixfr = query(zone, RecordType::IXFR);
        ixfr.add_authority(rr::soa(zone));
        for msg in [&axfr, &ixfr, &axfr, &ixfr] {
            for reply in [udp(meshdns.addr, msg).await, tcp(meshdns.addr, msg).await] {
                assert_eq!(reply.msg.response_code, ResponseCode::Refused, "{zone}");
                assert_eq!(reply.msg.queries, msg.queries, "the question echoed");
                assert!(reply.msg.answers.is_empty());
            }
        }
    }
    assert!(upstream.seen().is_empty(), "never relayed");
    assert_eq!(meshdns.metric("meshdns_cache_entries", &[]).await, 0.0);
    assert_eq!(meshdns.cache_hits().await, 0.0);
}

#[tokio::test]
async fn a_question_the_router_cannot_read_gets_formerr() {
    let (upstream, meshdns) = serving().await;
    let good = with_edns(query(NAME, RecordType::A), 1232)
        .to_vec()
        .unwrap();
    // One question, nothing else.
    let plain = query(NAME, RecordType::A).to_vec().unwrap();
    let header = &plain[..12];
    let question_end = good.len() - 11;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // A question name that points into the header: hickory follows it, the router cannot.
    cases.push((
        "pointer into the header",
        [header, &[0xc0, 0x02, 0, 1, 0, 1]].concat(),
    ));
    cases.push(("a question cut short", good[..question_end - 3].to_vec()));
    cases.push(("an OPT record cut short", good[..good.len() - 4].to_vec()));
    // An option whose length runs past the end of the OPT record.
    let mut overrun = query_with_edns_options(NAME, RecordType::A, &[(65001, b"ab")])
        .to_vec()
        .unwrap();
    let at = overrun.len() - 3;
    overrun[at] = 9;
    cases.push(("an option longer than its record", overrun));
    let mut label_too_long = header.to_vec();
    label_too_long.extend_from_slice(&[64]);
    label_too_long.extend_from_slice(&[b'x'; 64]);
    label_too_long.extend_from_slice(&[0, 0, 1, 0, 1]);
    cases.push(("a label of 64 bytes", label_too_long));
    for (what, bytes) in cases {
        let over_udp = support::udp_raw_within(meshdns.addr, &bytes, Duration::from_secs(2)).await;
        let over_udp = over_udp.unwrap_or_else(|| panic!("{what}: dropped over UDP"));
        let over_tcp = tcp_raw(meshdns.addr, &bytes).await;
        for reply in [over_udp, over_tcp] {
            assert_eq!(rcode_of(&reply), ResponseCode::FormErr, "{what}");
            assert_eq!(reply[..2], bytes[..2], "{what}: the ID is echoed");
            let unread = [
                "pointer into the header",
                "a question cut short",
                "a label of 64 bytes",
            ];
            if unread.contains(&what) {
                assert_eq!(
                    support::raw::header(&reply).counts.queries,
                    0,
                    "{what}: no question the client did not send"
                );
            }
        }
    }
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}
