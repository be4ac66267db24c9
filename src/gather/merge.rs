//! The merge of gathered legs into one reply (docs/design.md, "Distributed zones"): the union
//! of all legs' records, de-duplicated, in cluster order (local first, then configuration
//! order), every answer owned by the question, hosts renamed by the zone's naming scheme, one
//! TTL per RRset (the smallest, RFC 2181 §5.2), and the outcome table:
//!
//! | legs                                          | reply                               |
//! |-----------------------------------------------|-------------------------------------|
//! | records from any leg                          | NOERROR with the union              |
//! | no records, some leg NOERROR                  | NODATA (NOERROR + SOA of the zone)  |
//! | every leg NXDOMAIN                            | NXDOMAIN + SOA of the zone          |
//! | no leg answered                               | SERVFAIL (+ Extended DNS Error)     |
//! | no records, others NXDOMAIN, some leg failed  | SERVFAIL: the failed leg could hold the name |
//!
//! A reply built while some leg failed is *partial*: its TTLs are capped at [`PARTIAL_TTL`] so
//! clients ask again soon.
//!
//! It owns that table and the shape of the merged reply, and is pure: it asks no cluster and
//! reads no cache (a failed leg arrives already filled with its last good answer, by the
//! gatherer), and the host names it writes are spelled by the zone's [`Naming`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::OnceLock;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::SRV;
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::naming::{ClientHost, Naming};
use crate::config::Cluster;
use crate::reply::{self, ExtendedError};
use crate::rewrite::Owners;
use crate::upstream::log_limit::LogLimit;

/// TTL cap of a partial answer: short, so the missing cluster is asked again soon.
pub const PARTIAL_TTL: u32 = 5;

/// What one leg brought.
#[derive(Debug, Clone)]
pub(crate) enum Leg {
    /// NOERROR or NXDOMAIN, complete (not truncated).
    Answered(Message),
    /// The leg failed, and this is its last good answer from the cache (NOERROR: records or
    /// NODATA, never a remembered NXDOMAIN): used like an answer, but the merged reply is
    /// partial.
    Stale(Message),
    /// Timeout, network error, SERVFAIL, REFUSED, or any other rcode: left out.
    Failed,
}

/// The merged reply, before the client's ID and size are applied.
#[derive(Debug)]
pub(crate) struct Merged {
    pub reply: Message,
    /// Some leg failed or was cut short, yet the reply is an answer (NOERROR/NODATA).
    pub(crate) partial: bool,
    /// The clusters answered different TXT records, of which one was kept (the local
    /// cluster's, else the first configured cluster's).
    pub(crate) txt_disagreed: bool,
}

impl Merged {
    /// A reply that is all there is to say: nothing left out, no disagreement.
    pub(crate) fn whole(reply: Message) -> Self {
        Self {
            reply,
            partial: false,
            txt_disagreed: false,
        }
    }
}

/// Merges legs given in cluster order, each with the cluster it asked.
pub(crate) fn merge<P: AsRef<Cluster>>(
    request: &Message,
    naming: &Naming,
    legs: &[(P, Leg)],
    negative_ttl: Duration,
) -> Merged {
    let Some(asked) = request.queries.first() else {
        return Merged::whole(reply::synthesized(request, ResponseCode::FormErr));
    };
    if asked.query_type() == RecordType::SOA && asked.name() == &naming.zone {
        return apex_soa(request, naming, legs, negative_ttl);
    }
    let Union {
        mut records,
        noerror,
        nxdomain,
        failed,
        stale,
        unshown,
    } = Union::of(asked, naming, legs);
    let txt_disagreed = asked.query_type() == RecordType::TXT && one_txt(asked, &mut records);
    let partial = failed > 0 || stale;
    one_ttl_per_rrset(&mut records.answers);
    one_ttl_per_rrset(&mut records.additionals);
    let negative = |rcode| {
        let serial = zone_serial(legs);
        reply::negative_with_serial(request, rcode, &naming.zone, negative_ttl, serial)
    };
    let mut merged = if !records.answers.is_empty() {
        let mut reply = reply::synthesized(request, ResponseCode::NoError);
        reply.answers = records.answers;
        reply.additionals = records.additionals;
        reply
    } else if noerror {
        negative(ResponseCode::NoError)
    } else if failed == 0 {
        // Every leg said NXDOMAIN (or there are no clusters at all).
        return Merged::whole(negative(ResponseCode::NXDomain));
    } else if nxdomain > 0 {
        let why = "a cluster that did not answer could hold the name the others do not have";
        let reply = reply::servfail(request, ExtendedError::NoReachableAuthority, why);
        return Merged::whole(reply);
    } else if let Some(why) = unshown {
        return Merged::whole(reply::servfail(request, ExtendedError::Other, why));
    } else {
        return no_cluster_answered(request);
    };
    if partial {
        for record in merged
            .answers
            .iter_mut()
            .chain(&mut merged.authorities)
            .chain(&mut merged.additionals)
        {
            record.ttl = record.ttl.min(PARTIAL_TTL);
        }
    }
    Merged {
        reply: merged,
        partial,
        txt_disagreed,
    }
}

/// What the legs brought together: the union of their records, and how they ended.
struct Union {
    records: Records,
    /// Some leg answered NOERROR.
    noerror: bool,
    /// Legs that answered NXDOMAIN.
    nxdomain: usize,
    /// Legs that failed, or whose records were left out (`unshown`).
    failed: usize,
    /// Some leg was filled from its last good answer.
    stale: bool,
    /// Why a leg's records were left out, when one's were: a target that has no name in the
    /// zone.
    unshown: Option<&'static str>,
}

impl Union {
    fn of<P: AsRef<Cluster>>(asked: &Query, naming: &Naming, legs: &[(P, Leg)]) -> Self {
        let size = (legs.iter())
            .map(|(_, leg)| match leg {
                Leg::Answered(reply) | Leg::Stale(reply) => {
                    reply.answers.len() + reply.additionals.len()
                }
                Leg::Failed => 0,
            })
            .sum();
        // Where a target written as it came would name something else than what its cluster
        // meant: under a cluster domain (the pod's own, through kube-dns; another's) or in
        // the gathered zone itself (whose names meshdns routes by prefix).
        let mistakable: Vec<&Name> = (legs.iter().map(|(peer, _)| &peer.as_ref().domain))
            .chain([&naming.zone])
            .collect();
        let mut union = Self {
            records: Records::with_capacity(size),
            noerror: false,
            nxdomain: 0,
            failed: 0,
            stale: false,
            unshown: None,
        };
        for (peer, leg) in legs {
            let cluster = peer.as_ref();
            let (Leg::Answered(reply) | Leg::Stale(reply)) = leg else {
                union.failed += 1;
                continue;
            };
            let added = (union.records).add_leg(asked, reply, naming, cluster, &mistakable);
            if let Err(Unshown { target, why }) = added {
                if let Some(held_back) = unshown_log().check() {
                    tracing::warn!(cluster = %cluster.name, %target, why, held_back, "a target with no name in the zone: the cluster's records are left out");
                }
                (union.failed, union.unshown) = (union.failed + 1, Some(why));
                continue;
            }
            union.stale |= matches!(leg, Leg::Stale(_));
            match reply.response_code {
                ResponseCode::NXDomain => union.nxdomain += 1,
                _ => union.noerror = true,
            }
        }
        union
    }
}

/// A target a leg named that cannot be shown in the zone, and why.
struct Unshown {
    target: Name,
    why: &'static str,
}

/// Exactly one TXT record (docs/design.md, "Distributed zones"): `mongodb+srv` refuses a seed
/// list with two. Identical records have collapsed already; of records that differ, the first
/// is kept — the local cluster's, else the first cluster's in configuration order, each leg's
/// own in canonical order — so the answer does not depend on arrival, cache misses or
/// restarts. Returns whether any was dropped, and logs it once per interval.
fn one_txt(asked: &Query, records: &mut Records) -> bool {
    if records.answers.len() < 2 {
        return false;
    }
    let dropped = records.answers.len() - 1;
    records.answers.truncate(1);
    if let Some(held_back) = txt_log().check() {
        tracing::warn!(name = %asked.name(), dropped, held_back, "clusters answered different TXT records: the local cluster's, else the first configured one's, is kept");
    }
    true
}

/// The warnings about targets with no name in the zone: one line per
/// [`LOG_INTERVAL`](crate::upstream::log_limit::LOG_INTERVAL) for the
/// process (its log is one), however many answers carry such a target. The partial answers
/// they make are counted in `meshdns_gather_partial_total`.
fn unshown_log() -> &'static LogLimit {
    static LOG: OnceLock<LogLimit> = OnceLock::new();
    LOG.get_or_init(LogLimit::default)
}

/// The warnings about clusters whose TXT records differ: one line per interval for the
/// process, as [`unshown_log`]; each such answer is counted in
/// `meshdns_gather_txt_disagreements_total`.
fn txt_log() -> &'static LogLimit {
    static LOG: OnceLock<LogLimit> = OnceLock::new();
    LOG.get_or_init(LogLimit::default)
}

fn no_cluster_answered(request: &Message) -> Merged {
    Merged::whole(reply::servfail(
        request,
        ExtendedError::NoReachableAuthority,
        "no cluster answered",
    ))
}

/// The zone's own SOA, asked at its apex (docs/design.md, "Zone apexes"): one record,
/// synthesized, owned by the question as spelled, its serial made of the clusters'
/// ([`zone_serial`]); SERVFAIL when no cluster answered.
fn apex_soa<P>(
    request: &Message,
    naming: &Naming,
    legs: &[(P, Leg)],
    negative_ttl: Duration,
) -> Merged {
    let partial = (legs.iter()).any(|(_, leg)| !matches!(leg, Leg::Answered(_)));
    if legs.iter().all(|(_, leg)| matches!(leg, Leg::Failed)) {
        return no_cluster_answered(request);
    }
    let mut reply = reply::synthesized(request, ResponseCode::NoError);
    reply.metadata.authoritative = true;
    let mut soa = reply::zone_soa(&naming.zone, negative_ttl, zone_serial(legs));
    if let Some(asked) = request.queries.first() {
        soa.name = asked.name().clone();
    }
    if partial {
        soa.ttl = soa.ttl.min(PARTIAL_TTL);
    }
    reply.add_answer(soa);
    Merged {
        reply,
        partial,
        txt_disagreed: false,
    }
}

/// The serial of a gathered zone's SOA: the sum, modulo 2^32, of the serials of the SOAs the
/// legs brought (each leg's first, from its answer or authority section: its cluster domain's
/// SOA, asked at the apex or carried by a negative answer); [`reply::SYNTHESIZED_SERIAL`] when
/// no leg brought one.
///
/// A sum rather than a hash: a change of any one cluster's serial changes it, and while the
/// clusters' serials only grow (CoreDNS's is the time of the last change it saw), so does the
/// sum in serial number arithmetic (RFC 1982) as long as the increments together stay below
/// 2^31 — a tool that compares serials sees an increase. A cluster that does not answer takes
/// its serial out of the sum; such an answer is partial, and cached only a few seconds.
fn zone_serial<P>(legs: &[(P, Leg)]) -> u32 {
    let serials = legs.iter().filter_map(|(_, leg)| match leg {
        Leg::Answered(reply) | Leg::Stale(reply) => (reply.answers.iter())
            .chain(&reply.authorities)
            .find_map(|record| match &record.data {
                RData::SOA(soa) => Some(soa.serial),
                _ => None,
            }),
        Leg::Failed => None,
    });
    serials
        .reduce(u32::wrapping_add)
        .unwrap_or(reply::SYNTHESIZED_SERIAL)
}

/// Gives every record of an RRset (same owner ignoring case, type and class) the set's smallest
/// TTL: legs from different clusters carry different TTLs for what is now one set. One pass to
/// find each set's smallest TTL, one to apply it: a gathered set of hundreds of hosts is
/// hundreds of sets, which comparing record by record made quadratic.
fn one_ttl_per_rrset(records: &mut [Record]) {
    let (sets, count) = reply::rrset_ids(records);
    let mut smallest = vec![u32::MAX; count];
    for (record, &set) in records.iter().zip(&sets) {
        smallest[set] = smallest[set].min(record.ttl);
    }
    for (record, &set) in records.iter_mut().zip(&sets) {
        record.ttl = smallest[set];
    }
}

/// A name as a key that compares like [`Name`] does (ASCII case ignored, a fully qualified name
/// never equal to a relative one) but hashes as one byte string: its labels lowercased, each
/// after its length. `Name`'s own `Hash` feeds the hasher a byte at a time.
fn name_key(name: &Name) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 1);
    key.push(u8::from(name.is_fqdn()));
    for label in name.iter() {
        // A label is at most 63 bytes: its length fits in the byte, and lowercasing (below,
        // of ASCII letters, 65 and up) leaves it alone.
        key.push(label.len() as u8);
        key.extend_from_slice(label);
    }
    key.make_ascii_lowercase();
    key
}

/// The key a leg's records are put in canonical order by: the data as text, lowercased. An SRV
/// record whose target is plain (letters, digits, `-` inside a label, `_`, a leading `*`; no
/// `xn--` label) is written here as `Display` would write it, without its per-character
/// escaping and IDNA checks; anything else goes through `Display`.
fn order_key(data: &RData) -> String {
    let mut key = match data {
        RData::SRV(srv) if srv.target.iter().all(plain_label) => {
            let mut key = String::with_capacity(18 + srv.target.len());
            for number in [srv.priority, srv.weight, srv.port] {
                push_decimal(&mut key, number);
                key.push(' ');
            }
            for (i, label) in srv.target.iter().enumerate() {
                if i > 0 {
                    key.push('.');
                }
                // Plain labels are ASCII.
                key.extend(label.iter().map(|&b| char::from(b)));
            }
            if srv.target.is_root() || srv.target.is_fqdn() {
                key.push('.');
            }
            key
        }
        other => other.to_string(),
    };
    key.make_ascii_lowercase();
    key
}

/// Appends `number` as `Display` writes it, without the formatting machinery (which cost a
/// gathered answer of 180 targets about 5 % of its instructions).
fn push_decimal(key: &mut String, mut number: u16) {
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    key.extend(digits[at..].iter().map(|&digit| char::from(digit)));
}

/// Whether `Display` writes the label as its bytes (see [`order_key`]).
fn plain_label(label: &[u8]) -> bool {
    !label
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"xn--"))
        && label.iter().enumerate().all(|(i, &b)| {
            b.is_ascii_alphanumeric() || b == b'_' || (b == b'-' && i > 0) || (b == b'*' && i == 0)
        })
}

/// The merge's maps' hasher: foldhash, several times faster than SipHash on these short keys
/// (as the cache's index; a gathered answer of 180 targets hashes about 1,800 keys), and
/// seeded at random per map, so records chosen to collide cannot be precomputed.
type Hasher = foldhash::fast::RandomState;

/// The union being built, with the keys that make it a set.
#[derive(Default)]
struct Records {
    answers: Vec<Record>,
    additionals: Vec<Record>,
    /// Every record kept: its section (answers or not) and its position there.
    seen: HashMap<RecordKey, (bool, usize), Hasher>,
}

impl Records {
    /// Room for `size` records in all, so the set is not rebuilt as it grows.
    fn with_capacity(size: usize) -> Self {
        Self {
            seen: HashMap::with_capacity_and_hasher(size, Hasher::default()),
            ..Self::default()
        }
    }

    /// Adds the records of one leg, or none of them when a target cannot be shown in the zone
    /// (given back): too long for it ([`ClientHost::TooLong`]), or outside its cluster's
    /// domain yet under a domain in `mistakable` (a peer with `domain=d.example` naming a
    /// host under the local `cluster.local`). The leg then counts as failed, and the set is
    /// partial rather than holding a name that resolves elsewhere. A target outside every
    /// domain meshdns knows (an ExternalName's) is written as it came.
    fn add_leg(
        &mut self,
        asked: &Query,
        reply: &Message,
        naming: &Naming,
        cluster: &Cluster,
        mistakable: &[&Name],
    ) -> Result<(), Unshown> {
        let qtype = asked.query_type();
        // The SRV targets by key, each with its name as the client sees it: their glue is what
        // the additional section keeps.
        let mut targets: HashMap<Vec<u8>, (&Name, Name), Hasher> =
            HashMap::with_capacity_and_hasher(
                (reply.answers.iter())
                    .filter(|r| r.record_type() == RecordType::SRV)
                    .count(),
                Hasher::default(),
            );
        // Within a leg, records go in a canonical order: a cluster DNS that shuffles its
        // answers must not make the merged answer change from one query to the next.
        // An empty record (hickory's `Update0`, legal only in UPDATE messages) would make the
        // merged reply unparseable: a leg's malformed record is left out, not passed on.
        // Only what the leg's question owns (itself, or its CNAME chain) answers it.
        let owners = Owners::of(reply);
        let mut answers: Vec<&Record> = reply
            .answers
            .iter()
            .filter(|r| r.record_type() == qtype && !matches!(r.data, RData::Update0(_)))
            .filter(|r| owners.own(r))
            .collect();
        answers.sort_by_cached_key(|r| order_key(&r.data));
        let mut shown = Vec::with_capacity(answers.len());
        for record in answers {
            let data = match &record.data {
                RData::SRV(srv) => {
                    let target = match naming.client_host(&srv.target, cluster) {
                        ClientHost::InZone(name) => name,
                        ClientHost::Elsewhere
                            if mistakable.iter().any(|domain| domain.zone_of(&srv.target)) =>
                        {
                            return Err(Unshown {
                                target: srv.target.clone(),
                                why: "a target outside its cluster's domain names another cluster's host",
                            });
                        }
                        ClientHost::Elsewhere => srv.target.clone(),
                        ClientHost::TooLong => {
                            return Err(Unshown {
                                target: srv.target.clone(),
                                why: "a target is too long to carry its cluster in the zone's name",
                            });
                        }
                    };
                    targets.insert(name_key(&srv.target), (&srv.target, target.clone()));
                    RData::SRV(SRV::new(srv.priority, srv.weight, srv.port, target))
                }
                other => other.clone(),
            };
            shown.push(Record::from_rdata(asked.name().clone(), record.ttl, data));
        }
        for record in shown {
            self.push(true, record);
        }
        let glue = reply.additionals.iter().filter(|r| {
            matches!(r.record_type(), RecordType::A | RecordType::AAAA)
                && !matches!(r.data, RData::Update0(_))
        });
        for record in glue {
            let Some((target, shown)) = targets.get(&name_key(&record.name)) else {
                continue;
            };
            // Spelled as the target (the usual case), it is shown as the target is.
            let owner = if target.eq_case(&record.name) {
                shown.clone()
            } else {
                match naming.client_host(&record.name, cluster) {
                    ClientHost::InZone(name) => name,
                    // The target's name but for case: never too long where the target is not.
                    ClientHost::Elsewhere | ClientHost::TooLong => record.name.clone(),
                }
            };
            self.push(
                false,
                Record::from_rdata(owner, record.ttl, record.data.clone()),
            );
        }
        Ok(())
    }

    /// Adds a record unless an equal one (owner ignoring case, same data) is there; a
    /// duplicate lowers the kept record's TTL to the smaller of the two. (A record equal to one
    /// of the other section is left out.)
    fn push(&mut self, answer: bool, record: Record) {
        let section = if answer {
            &mut self.answers
        } else {
            &mut self.additionals
        };
        match self.seen.entry(RecordKey::of(&record)) {
            Entry::Vacant(vacant) => {
                vacant.insert((answer, section.len()));
                section.push(record);
            }
            Entry::Occupied(kept) => {
                let (kept_answer, position) = *kept.get();
                if let Some(kept) = section.get_mut(position).filter(|_| kept_answer == answer) {
                    kept.ttl = kept.ttl.min(record.ttl);
                }
            }
        }
    }
}

/// What makes two records one in the union: the owner ignoring case and the data, an SRV
/// target ignoring case too (as `Name` and `RData` compare), hashed as byte strings.
#[derive(PartialEq, Eq, Hash)]
struct RecordKey {
    owner: Vec<u8>,
    data: DataKey,
}

#[derive(PartialEq, Eq, Hash)]
enum DataKey {
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: Vec<u8>,
    },
    /// A, AAAA, TXT: no name inside, so their own hash is cheap.
    Other(RData),
}

impl RecordKey {
    fn of(record: &Record) -> Self {
        let data = match &record.data {
            RData::SRV(srv) => DataKey::Srv {
                priority: srv.priority,
                weight: srv.weight,
                port: srv.port,
                target: name_key(&srv.target),
            },
            other => DataKey::Other(other.clone()),
        };
        Self {
            owner: name_key(&record.name),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, OpCode};
    use hickory_proto::rr::rdata::opt::EdnsCode;
    use hickory_proto::rr::rdata::{A, SOA, TXT};

    use proptest::prelude::*;

    use super::*;
    use crate::config::tests::{name, property, with_local_a};
    use crate::gather::naming::Scheme;

    fn clusters() -> Vec<Cluster> {
        with_local_a("b=10.9.0.1; c=10.9.0.2", &[])
            .unwrap()
            .clusters
    }

    fn naming() -> Naming {
        Naming {
            zone: name("distributed.local."),
            scheme: Scheme::Prefix,
        }
    }

    fn request(qname: &str, qtype: RecordType) -> Message {
        let mut msg = Message::query();
        msg.add_query(Query::query(name(qname), qtype));
        msg.set_edns(Edns::new());
        msg
    }

    fn leg(rcode: ResponseCode, answers: Vec<Record>, additionals: Vec<Record>) -> Leg {
        let mut reply = Message::response(1, OpCode::Query);
        reply.metadata.response_code = rcode;
        // The leg's question: the first answer's owner and type.
        if let Some(first) = answers.first() {
            reply.add_query(Query::query(first.name.clone(), first.record_type()));
        }
        reply.answers = answers;
        reply.additionals = additionals;
        if rcode != ResponseCode::NoError || reply.answers.is_empty() {
            let mname = name("ns.dns.cluster.local.");
            let rname = name("hostmaster.cluster.local.");
            let soa = RData::SOA(SOA::new(mname, rname, 1, 1, 1, 1, 30));
            reply.authorities = vec![Record::from_rdata(name("cluster.local."), 30, soa)];
        }
        Leg::Answered(reply)
    }

    fn nxdomain() -> Leg {
        leg(ResponseCode::NXDomain, vec![], vec![])
    }

    /// A leg answering one SRV record per host, with its address as glue.
    fn srv_leg(hosts: &[&str]) -> Leg {
        let owner = name("_mongodb._tcp.mongo.db.svc.cluster.local.");
        let host = |h: &str| name(&format!("{h}.mongo.db.svc.cluster.local."));
        let srv = |h: &str| RData::SRV(SRV::new(0, 0, 27017, host(h)));
        let answers = hosts
            .iter()
            .map(|h| Record::from_rdata(owner.clone(), 30, srv(h)))
            .collect();
        let additionals = (0..)
            .zip(hosts)
            .map(|(i, h)| Record::from_rdata(host(h), 30, RData::A(A::new(10, 0, 0, i))))
            .collect();
        leg(ResponseCode::NoError, answers, additionals)
    }

    /// A leg answering the headless service's one address, `10.octet.0.1`.
    fn a_leg(octet: u8) -> Leg {
        let owner = name("mongo.db.svc.cluster.local.");
        let record = Record::from_rdata(owner, 30, RData::A(A::new(10, octet, 0, 1)));
        leg(ResponseCode::NoError, vec![record], vec![])
    }

    /// The reply of an answered leg, to change before it is merged.
    fn reply_of(leg: Leg) -> Message {
        let Leg::Answered(reply) = leg else {
            unreachable!("the legs built here answer")
        };
        reply
    }

    /// The merge of `legs`, one per cluster a, b, c in turn, for a question of `qtype` about
    /// `qname`.
    fn run(qname: &str, qtype: RecordType, legs: Vec<Leg>) -> Merged {
        let legs: Vec<(Cluster, Leg)> = clusters().into_iter().zip(legs).collect();
        let request = request(qname, qtype);
        merge(&request, &naming(), &legs, Duration::from_secs(5))
    }

    const SRV_NAME: &str = "_mongodb._tcp.mongo.db.svc.distributed.local.";

    /// The headless service in the distributed zone.
    const MONGO: &str = "mongo.db.svc.distributed.local.";

    #[test]
    fn srv_targets_get_their_cluster_prefix_in_cluster_order_owned_by_the_question() {
        let legs = vec![
            srv_leg(&["mongo-0"]),
            srv_leg(&["mongo-0", "mongo-1"]),
            srv_leg(&["mongo-0"]),
        ];
        let merged = run(SRV_NAME, RecordType::SRV, legs);
        let targets: Vec<String> = merged
            .reply
            .answers
            .iter()
            .map(|r| r.try_borrow::<SRV>().unwrap().data().target.to_ascii())
            .collect();
        assert_eq!(
            targets,
            [
                "a-mongo-0.mongo.db.svc.distributed.local.",
                "b-mongo-0.mongo.db.svc.distributed.local.",
                "b-mongo-1.mongo.db.svc.distributed.local.",
                "c-mongo-0.mongo.db.svc.distributed.local."
            ]
        );
        assert!(
            merged
                .reply
                .answers
                .iter()
                .all(|r| r.name == name(SRV_NAME))
        );
        assert_eq!(
            merged.reply.additionals[1].name.to_ascii(),
            "b-mongo-0.mongo.db.svc.distributed.local."
        );
        assert!(!merged.partial);
    }

    #[test]
    fn every_srv_target_shares_the_parent_domain_of_the_service() {
        let legs = ["mongo-0", "mongo-1", "mongo-2"].map(|host| srv_leg(&[host]));
        let merged = run(SRV_NAME, RecordType::SRV, legs.into());
        let parent = name("db.svc.distributed.local.");
        assert_eq!(merged.reply.answers.len(), 3, "one target per cluster");
        for record in &merged.reply.answers {
            assert!(parent.zone_of(&record.try_borrow::<SRV>().unwrap().data().target));
        }
    }

    #[test]
    fn headless_service_addresses_are_a_union_owned_by_the_question() {
        let asked = "Mongo.db.svc.distributed.local.";
        let merged = run(asked, RecordType::A, vec![a_leg(1), a_leg(2), a_leg(1)]);
        assert_eq!(merged.reply.answers.len(), 2);
        assert!(
            merged
                .reply
                .answers
                .iter()
                .all(|r| r.name.eq_case(&name(asked)))
        );
    }

    #[test]
    fn identical_txt_records_from_several_clusters_collapse_to_one() {
        let txt = || {
            let owner = name("mongo.db.svc.cluster.local.");
            let data = RData::TXT(TXT::new(vec!["replicaSet=rs0&authSource=admin".into()]));
            let record = Record::from_rdata(owner, 30, data);
            leg(ResponseCode::NoError, vec![record], vec![])
        };
        let merged = run(MONGO, RecordType::TXT, vec![txt(), txt(), txt()]);
        assert_eq!(merged.reply.answers.len(), 1);
    }

    #[test]
    fn records_from_any_leg_make_noerror() {
        let merged = run(MONGO, RecordType::A, vec![nxdomain(), a_leg(2), nxdomain()]);
        assert_eq!(merged.reply.response_code, ResponseCode::NoError);
        assert_eq!(merged.reply.answers.len(), 1);
    }

    #[test]
    fn no_records_and_some_leg_noerror_is_nodata_with_soa() {
        let nodata = leg(ResponseCode::NoError, vec![], vec![]);
        let legs = vec![nodata, nxdomain(), Leg::Failed];
        let merged = run(MONGO, RecordType::AAAA, legs);
        assert_eq!(merged.reply.response_code, ResponseCode::NoError);
        assert!(merged.reply.answers.is_empty());
        assert_eq!(merged.reply.authorities[0].name, name("distributed.local."));
    }

    #[test]
    fn nxdomain_from_every_cluster_is_nxdomain_with_soa() {
        let legs = vec![nxdomain(), nxdomain(), nxdomain()];
        let merged = run("nope.db.svc.distributed.local.", RecordType::A, legs);
        assert_eq!(merged.reply.response_code, ResponseCode::NXDomain);
        assert_eq!(merged.reply.authorities[0].record_type(), RecordType::SOA);
        assert_eq!(merged.reply.authorities[0].name, name("distributed.local."));
    }

    #[test]
    fn the_apex_soa_is_servfail_when_no_cluster_answered() {
        let failed = vec![Leg::Failed, Leg::Failed, Leg::Failed];
        let merged = run("distributed.local.", RecordType::SOA, failed);
        assert_eq!(merged.reply.response_code, ResponseCode::ServFail);
        assert!(merged.reply.answers.is_empty());
    }

    #[test]
    fn no_leg_answering_is_servfail_with_an_extended_error() {
        let failed = vec![Leg::Failed, Leg::Failed, Leg::Failed];
        let merged = run("x.distributed.local.", RecordType::A, failed);
        assert_eq!(merged.reply.response_code, ResponseCode::ServFail);
        let edns = merged.reply.edns.unwrap();
        assert!(
            edns.option(EdnsCode::Unknown(15)).is_some(),
            "extended error"
        );
    }

    #[test]
    fn a_failed_leg_never_lets_nxdomain_through() {
        let legs = vec![nxdomain(), Leg::Failed, nxdomain()];
        let merged = run("x.distributed.local.", RecordType::A, legs);
        assert_eq!(merged.reply.response_code, ResponseCode::ServFail);
    }

    #[test]
    fn a_merged_rrset_has_one_ttl_the_smallest() {
        let with_ttl = |octet: u8, ttl: u32| {
            let mut reply = reply_of(a_leg(octet));
            reply.answers[0].ttl = ttl;
            Leg::Answered(reply)
        };
        let legs = vec![with_ttl(1, 30), with_ttl(2, 5), with_ttl(3, 300)];
        let merged = run(MONGO, RecordType::A, legs);
        let ttls: Vec<u32> = merged.reply.answers.iter().map(|r| r.ttl).collect();
        assert_eq!(ttls, [5, 5, 5]);
    }

    #[test]
    fn a_partial_answer_has_short_ttls() {
        let merged = run(MONGO, RecordType::A, vec![a_leg(1), Leg::Failed, a_leg(3)]);
        assert!(merged.partial);
        assert!(merged.reply.answers.iter().all(|r| r.ttl <= PARTIAL_TTL));
        assert_eq!(merged.reply.answers.len(), 2);
    }

    #[test]
    fn name_keys_compare_like_names() {
        let key = |text: &str| name_key(&name(text));
        assert_eq!(key("Big-0.DB.svc.local."), key("big-0.db.svc.local."));
        assert_ne!(key("ab.c."), key("a.bc."));
        assert_ne!(key("a.b."), key("a.b"));
        assert_ne!(key("a.b."), key("a.b.c."));
        for (a, b) in [("X.y.", "x.Y."), ("x.y.", "x.z."), ("*.y.", "_.y.")] {
            assert_eq!(name(a) == name(b), key(a) == key(b), "{a} {b}");
        }
    }

    #[test]
    fn the_order_key_is_the_data_as_display_writes_it_lowercased() {
        let srv = |target: Name| RData::SRV(SRV::new(10, 5, 27017, target));
        let mut targets: Vec<Name> = [
            "Mongo-0.mongo.DB.svc.cluster.local.",
            "_x._tcp.a.",
            "*.a.b.",
            "mongo-0.relative",
            "xn--bcher-kva.example.",
            "XN--bcher-kva.example.",
            "a-.b.",
        ]
        .iter()
        .map(|t| name(t))
        .collect();
        targets.push(Name::root());
        targets.push(Name::from_labels([&b"-lead"[..], b"a b", b"semi;colon", b"\\xff"]).unwrap());
        targets.push(Name::from_labels([&b"caf\xc3\xa9"[..], b"x"]).unwrap());
        for target in targets {
            for data in [
                srv(target.clone()),
                RData::SRV(SRV::new(0, 65535, 7, target)),
            ] {
                assert_eq!(order_key(&data), data.to_string().to_ascii_lowercase());
            }
        }
        let a = RData::A(A::new(10, 1, 2, 3));
        assert_eq!(order_key(&a), "10.1.2.3");
    }

    #[test]
    fn a_plain_label_is_one_display_writes_as_it_is() {
        assert!(plain_label(b"mongo-0"));
        assert!(plain_label(b"_tcp"));
        assert!(plain_label(b"*"));
        assert!(!plain_label(b"-lead"));
        assert!(!plain_label(b"a*"));
        assert!(!plain_label(b"a b"));
        assert!(!plain_label(b"xn--bcher-kva"));
        assert!(!plain_label(b"Xn--x"));
    }

    #[test]
    fn glue_spelled_unlike_its_target_is_renamed_by_its_own_spelling() {
        let mut reply = reply_of(srv_leg(&["mongo-0"]));
        reply.additionals[0].name = name("MONGO-0.mongo.db.svc.cluster.local.");
        let merged = run(SRV_NAME, RecordType::SRV, vec![Leg::Answered(reply)]);
        assert_eq!(
            merged.reply.additionals[0].name.to_ascii(),
            "a-MONGO-0.mongo.db.svc.distributed.local."
        );
    }

    #[test]
    fn a_duplicate_keeps_the_first_spelling_and_the_smaller_ttl() {
        let with = |host: &str, ttl: u32| {
            let mut reply = reply_of(srv_leg(&[host]));
            reply.answers[0].ttl = ttl;
            reply.additionals[0].ttl = ttl;
            Leg::Answered(reply)
        };
        let a = || clusters().swap_remove(0);
        let legs = vec![(a(), with("mongo-0", 30)), (a(), with("MONGO-0", 7))];
        let request = request(SRV_NAME, RecordType::SRV);
        let merged = merge(&request, &naming(), &legs, Duration::from_secs(5));
        assert_eq!(merged.reply.answers.len(), 1);
        assert_eq!(merged.reply.answers[0].ttl, 7);
        let srv = merged.reply.answers[0].try_borrow::<SRV>().unwrap();
        let target = &srv.data().target;
        assert_eq!(
            target.to_ascii(),
            "a-mongo-0.mongo.db.svc.distributed.local."
        );
        assert_eq!(merged.reply.additionals.len(), 1);
        assert_eq!(merged.reply.additionals[0].ttl, 7);
    }

    /// The headless service's name as cluster a knows it.
    const MONGO_UPSTREAM: &str = "mongo.db.svc.cluster.local.";

    /// A leg asked `MONGO_UPSTREAM` A that answers `answers`.
    fn a_leg_answering(answers: Vec<Record>) -> Leg {
        let mut reply = reply_of(leg(ResponseCode::NoError, answers, vec![]));
        reply.queries = vec![Query::query(name(MONGO_UPSTREAM), RecordType::A)];
        Leg::Answered(reply)
    }

    fn a(owner: &str, octet: u8) -> Record {
        Record::from_rdata(name(owner), 30, RData::A(A::new(10, octet, 0, 1)))
    }

    fn cname(owner: &str, target: &str) -> Record {
        let data = RData::CNAME(hickory_proto::rr::rdata::CNAME(name(target)));
        Record::from_rdata(name(owner), 30, data)
    }

    fn answer_lines(merged: &Merged) -> Vec<String> {
        (merged.reply.answers.iter())
            .map(|r| format!("{} {}", r.name, r.data))
            .collect()
    }

    #[test]
    fn records_the_question_does_not_own_are_dropped_before_the_merge() {
        let other = "other.db.svc.cluster.local.";
        let unrelated = a_leg_answering(vec![a(MONGO_UPSTREAM, 1), a(other, 9)]);
        let merged = run(MONGO, RecordType::A, vec![unrelated]);
        assert_eq!(answer_lines(&merged), [format!("{MONGO} 10.1.0.1")]);
        // A CNAME chain that leads nowhere the answer has: another owner's address is not the
        // end of it.
        let x = "x.db.svc.cluster.local.";
        let broken = a_leg_answering(vec![cname(MONGO_UPSTREAM, x), a(other, 9)]);
        let merged = run(MONGO, RecordType::A, vec![broken]);
        assert_eq!(merged.reply.response_code, ResponseCode::NoError);
        assert!(
            merged.reply.answers.is_empty(),
            "{:?}",
            answer_lines(&merged)
        );
        // The chain's own end is the answer.
        let chain = a_leg_answering(vec![cname(MONGO_UPSTREAM, x), a(x, 2), a(other, 9)]);
        let merged = run(MONGO, RecordType::A, vec![chain]);
        assert_eq!(answer_lines(&merged), [format!("{MONGO} 10.2.0.1")]);
    }

    #[test]
    fn a_target_under_another_clusters_domain_is_dropped_and_the_answer_partial() {
        let config = with_local_a("b=10.9.0.1 domain=d.example", &[]).unwrap();
        // b (domain d.example) names a host under a's `cluster.local`.
        let b = srv_leg(&["mongo-0"]);
        let legs: Vec<(Cluster, Leg)> = config
            .clusters
            .into_iter()
            .zip([srv_leg(&["mongo-1"]), b])
            .collect();
        let request = request(SRV_NAME, RecordType::SRV);
        let merged = merge(&request, &naming(), &legs, Duration::from_secs(5));
        let targets: Vec<String> = (merged.reply.answers.iter())
            .map(|r| r.try_borrow::<SRV>().unwrap().data().target.to_ascii())
            .collect();
        assert_eq!(targets, ["a-mongo-1.mongo.db.svc.distributed.local."]);
        assert!(merged.partial, "b's leg counted as failed");
    }

    #[test]
    fn an_external_target_outside_every_cluster_domain_is_written_as_it_came() {
        let owner = name("_mongodb._tcp.mongo.db.svc.cluster.local.");
        let srv = RData::SRV(SRV::new(0, 0, 27017, name("db.example.org.")));
        let external = leg(
            ResponseCode::NoError,
            vec![Record::from_rdata(owner, 30, srv)],
            vec![],
        );
        let merged = run(SRV_NAME, RecordType::SRV, vec![external]);
        let srv = merged.reply.answers[0].try_borrow::<SRV>().unwrap();
        assert_eq!(srv.data().target.to_ascii(), "db.example.org.");
        assert!(!merged.partial);
    }

    #[test]
    fn clusters_disagreeing_on_txt_give_exactly_one_the_first_clusters() {
        let txt = |text: &str| {
            let owner = name(MONGO_UPSTREAM);
            let record = Record::from_rdata(owner, 30, RData::TXT(TXT::new(vec![text.into()])));
            leg(ResponseCode::NoError, vec![record], vec![])
        };
        let legs = vec![
            txt("replicaSet=a"),
            txt("replicaSet=b"),
            txt("replicaSet=a"),
        ];
        let merged = run(MONGO, RecordType::TXT, legs);
        assert_eq!(answer_lines(&merged), [format!("{MONGO} replicaSet=a")]);
        assert!(merged.txt_disagreed);
        // a failed: b's, the first in configuration order.
        let legs = vec![Leg::Failed, txt("replicaSet=b"), txt("replicaSet=c")];
        let merged = run(MONGO, RecordType::TXT, legs);
        assert_eq!(answer_lines(&merged), [format!("{MONGO} replicaSet=b")]);
        let agreed = run(MONGO, RecordType::TXT, vec![txt("x"), txt("x"), txt("x")]);
        assert!(!agreed.txt_disagreed);
    }

    /// What one cluster's leg does in the merge property: fail, NXDOMAIN, or answer with `n`
    /// records (each address says which cluster it came from: 10.<cluster>.…).
    #[derive(Debug, Clone, Copy)]
    enum Outcome {
        Failed,
        NxDomain,
        Records(u8),
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            Just(Outcome::Failed),
            Just(Outcome::NxDomain),
            (0u8..6).prop_map(Outcome::Records),
        ]
    }

    /// Cluster number `cluster`'s leg doing `outcome` for a question of type `qtype`.
    fn outcome_leg(cluster: u8, outcome: Outcome, qtype: RecordType) -> Leg {
        let upstream = name("_mongodb._tcp.mongo.db.svc.cluster.local.");
        let mut reply = Message::response(1, OpCode::Query);
        reply.add_query(Query::query(upstream.clone(), qtype));
        match outcome {
            Outcome::Failed => return Leg::Failed,
            Outcome::NxDomain => reply.metadata.response_code = ResponseCode::NXDomain,
            Outcome::Records(n) => {
                for i in 0..n {
                    let host = name(&format!("mongo-{i}.mongo.db.svc.cluster.local."));
                    let ip = A::new(10, cluster, 0, i);
                    match qtype {
                        RecordType::SRV => {
                            let srv = SRV::new(0, 50, 27017, host.clone());
                            reply.add_answer(Record::from_rdata(
                                upstream.clone(),
                                30,
                                RData::SRV(srv),
                            ));
                            reply.add_additional(Record::from_rdata(host, 30, RData::A(ip)));
                        }
                        _ => {
                            reply.add_answer(Record::from_rdata(
                                upstream.clone(),
                                30,
                                RData::A(ip),
                            ));
                        }
                    }
                }
            }
        }
        Leg::Answered(reply)
    }

    proptest! {
        #![proptest_config(property(256))]

        #[test]
        fn a_merged_answer_holds_no_record_of_a_cluster_that_did_not_answer(
            outcomes in proptest::array::uniform3(outcome()),
            srv in any::<bool>(),
        ) {
            // The local a, b, and c with its own prefix.
            let config = with_local_a("b=127.0.0.1:9; c=127.0.0.1:9 prefix=west-", &[]).unwrap();
            let qtype = if srv { RecordType::SRV } else { RecordType::A };
            let question = name("_mongodb._tcp.mongo.db.svc.distributed.local.");
            let mut request = Message::query();
            request.add_query(Query::query(question.clone(), qtype));
            let legs: Vec<(&Cluster, Leg)> = (config.clusters.iter().zip(&outcomes))
                .enumerate()
                .map(|(i, (cluster, o))| (cluster, outcome_leg(i as u8 + 1, *o, qtype)))
                .collect();
            let naming = Naming { zone: name("distributed.local."), scheme: Scheme::Prefix };
            let merged = merge(&request, &naming, &legs, Duration::from_secs(5));
            let answered = |cluster: u8| {
                matches!(outcomes[usize::from(cluster) - 1], Outcome::Records(n) if n > 0)
            };
            let prefixes = ["a-", "b-", "west-"];
            for record in merged.reply.answers.iter().chain(&merged.reply.additionals) {
                match &record.data {
                    RData::A(a) => {
                        let cluster = a.0.octets()[1];
                        prop_assert!(answered(cluster), "{} from cluster {} that did not answer", record, cluster);
                    }
                    RData::SRV(srv) => {
                        let first = String::from_utf8_lossy(srv.target.iter().next().unwrap_or_default()).to_string();
                        let from = prefixes.iter().position(|p| first.starts_with(p)).expect("a prefixed target");
                        prop_assert!(answered(from as u8 + 1), "{} from a cluster that did not answer", record);
                    }
                    _ => {}
                }
            }
            // And every record of every cluster that answered is there.
            let expected: usize = outcomes.iter().map(|o| match o { Outcome::Records(n) => usize::from(*n), _ => 0 }).sum();
            prop_assert_eq!(merged.reply.answers.len(), expected);
        }
    }
}
