//! Name mapping between the names clients use and the names a cluster's DNS knows, over whole
//! messages, in both directions — and the [`Peer`], the target of every route to one cluster
//! ([`Peer::ask`]).
//!
//! `mongo-1.mongo.db.cluster.b` goes to cluster b as `mongo-1.mongo.db.svc.cluster.local`; in
//! the reply every name under `svc.cluster.local` — owners and the names inside SRV, CNAME,
//! PTR, MX and NS records — comes back under `cluster.b`, the question exactly as the client
//! spelled it. Matching is on label boundaries and ignores case (CoreDNS's `rewrite name
//! substring` does neither, and leaves answer owners unmapped).
//!
//! It owns the mapping and the [`Peer`]; the peer's exchange is its upstream group's, and its
//! answers are cached by the cache under the peer's identity, not here.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsCode;
use hickory_proto::rr::rdata::{CNAME, MX, NS, PTR, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use tokio::time::Instant;

use crate::cache::TargetId;
use crate::config::Cluster;
use crate::reply::{self, ExtendedError};
use crate::request::Request;
use crate::upstream::Upstream;
use crate::wire;

/// A pair of zones that correspond: the client's (`cluster.b.`) and the upstream's
/// (`svc.cluster.local.`).
#[derive(Debug, Clone)]
pub(crate) struct ZoneMap {
    pub client: Name,
    pub upstream: Name,
    /// The zones in wire form, the client's lowercased: a question's name is mapped on the
    /// client's bytes.
    client_wire: Vec<u8>,
    upstream_wire: Vec<u8>,
    /// The pod's own cluster's `svc.<domain>` when it is not `upstream` (a peer with a domain
    /// of its own): a name there in the peer's reply cannot be mapped back, and left as it is
    /// it would resolve in the pod's own cluster (see [`ZoneMap::reply_to_client`]).
    local: Option<Name>,
}

impl ZoneMap {
    pub(crate) fn new(client: Name, upstream: Name) -> Self {
        Self {
            client_wire: wire::lowercase_name(client.iter()),
            upstream_wire: upstream.to_bytes().unwrap_or_default(),
            client,
            upstream,
            local: None,
        }
    }

    /// The map, knowing the pod's own cluster's `svc.<domain>` (`local`).
    pub(crate) fn beside(mut self, local: Name) -> Self {
        self.local = (local != self.upstream).then_some(local);
        self
    }

    /// Whether `name`, which the map does not take back, would be resolved in the pod's own
    /// cluster as it is: under the upstream zone (too long to map) or the local `svc.<domain>`.
    fn mistakable(&self, name: &Name) -> bool {
        self.upstream.zone_of(name) || self.local.as_ref().is_some_and(|l| l.zone_of(name))
    }

    /// `name` (wire form, plain labels) with the client zone's suffix replaced by the
    /// upstream zone's, matched on label boundaries ignoring case; `None` when `name` is not
    /// under the client zone or the result would be too long for DNS.
    pub(crate) fn to_upstream(&self, name: &[u8]) -> Option<Vec<u8>> {
        let keep = wire::find_suffix(name, |suffix| {
            suffix
                .eq_ignore_ascii_case(&self.client_wire)
                .then(|| name.len() - suffix.len())
        })?;
        let mapped = [name.get(..keep)?, &self.upstream_wire].concat();
        (mapped.len() <= wire::MAX_NAME).then_some(mapped)
    }

    /// `name` with the upstream zone's suffix replaced by the client zone's; `None` when `name`
    /// is not under the upstream zone or the result would be too long for DNS.
    pub(crate) fn to_client(&self, name: &Name) -> Option<Name> {
        if !self.upstream.zone_of(name) {
            return None;
        }
        // `Name::num_labels` leaves out a leading `*` (DNSSEC's label count); count them all.
        let keep = name.iter().count() - self.upstream.iter().count();
        Name::from_labels(name.iter().take(keep).chain(self.client.iter())).ok()
    }

    /// The upstream's reply as the client must see it (docs/design.md, "Cluster zones"): question
    /// echoed as asked, names mapped back, the negative-answer SOA moved to the client zone's
    /// apex, the peer's NS records and their glue dropped. `None` when a name cannot be mapped
    /// back and left as it is the client would resolve it in its own cluster: one under the
    /// upstream zone too long to map, or one a peer with its own domain names under the pod's
    /// cluster's `svc.<domain>`.
    pub(crate) fn reply_to_client(&self, mut reply: Message, asked: &Query) -> Option<Message> {
        let asked_name = asked.name();
        let too_long = Cell::new(false);
        // A mapped name that is the question's is spelled as the client asked it.
        let as_asked = |mapped: Name| {
            if mapped.eq_ignore_root(asked_name) {
                asked_name.clone()
            } else {
                mapped
            }
        };
        let spell = |name: &Name| -> Name {
            match self.to_client(name) {
                Some(mapped) => as_asked(mapped),
                None => {
                    too_long.set(too_long.get() || self.mistakable(name));
                    name.clone()
                }
            }
        };
        reply.queries = vec![asked.clone()];
        // To its client meshdns is the recursive resolver, whatever the peer said; its OPT
        // advertises meshdns's own UDP size, as the reply is encoded by meshdns.
        reply.metadata.recursion_available = true;
        if let Some(edns) = reply.edns.as_mut() {
            edns.set_max_payload(crate::reply::ADVERTISED_UDP_SIZE);
            // The peer's options (its NSID, cookie, padding) are for meshdns, not the client;
            // an Extended DNS Error (a loop's, RFC 8914) says why, and goes on as pass-through's.
            (edns.options_mut().as_mut())
                .retain(|(code, _)| *code == EdnsCode::Unknown(reply::EDE_OPTION));
        }
        // A negative answer (NXDOMAIN, or NODATA, also after a CNAME chain: answers need not be
        // empty) carries the SOA of the peer's own zone (`cluster.local.`, above the mapped
        // `svc.cluster.local.`), which no mapping reaches: it moves to the cluster zone's apex.
        // An SOA of an unrelated zone (a CNAME leading out of the cluster domain) is kept.
        let negative = matches!(
            reply.response_code,
            ResponseCode::NoError | ResponseCode::NXDomain
        );
        let peer_soa = |r: &Record| {
            r.record_type() == RecordType::SOA
                && (r.name.zone_of(&self.upstream) || self.upstream.zone_of(&r.name))
        };
        let ns_targets: Vec<Name> = reply
            .authorities
            .iter()
            .filter_map(|r| match &r.data {
                RData::NS(NS(target)) => Some(target.clone()),
                _ => None,
            })
            .collect();
        reply
            .authorities
            .retain(|r| r.record_type() != RecordType::NS);
        // Of the additional records, the NS records' glue goes, and so does any record of a
        // name outside the zone answered (RFC 2181 §5.4.1): a peer's glue for
        // `www.example.org` must not reach the client, or the cache, as if it were data for
        // that name. Only an owner that maps is kept, so none can make the reply fail; it is
        // mapped here, once.
        reply.additionals.retain_mut(|r| {
            if ns_targets.iter().any(|t| t == &r.name) {
                return false;
            }
            let Some(owner) = self.to_client(&r.name) else {
                return false;
            };
            r.name = as_asked(owner);
            map_data(r, &spell);
            true
        });
        for record in reply.answers.iter_mut() {
            map_record(record, &spell);
        }
        for record in reply.authorities.iter_mut() {
            if negative && peer_soa(record) {
                record.name = self.client.clone();
            } else {
                map_record(record, &spell);
            }
        }
        if asked.query_type() == RecordType::SOA && asked_name == &self.client {
            self.answer_apex_soa(&mut reply, asked_name);
        }
        (!too_long.get()).then_some(reply)
    }

    /// `SOA cluster.b` (docs/design.md, "Zone apexes"): the zone's apex is the peer's
    /// `svc.<domain>`, which is no zone of its own there, so the peer answers NODATA with its
    /// domain's SOA — the SOA of cluster b, its serial the peer's. It is the answer, owned by
    /// the question as spelled. (Below the apex the NODATA shape stays, as in Kubernetes DNS.)
    fn answer_apex_soa(&self, reply: &mut Message, asked_name: &Name) {
        let answered = (reply.answers.iter()).any(|r| r.record_type() == RecordType::SOA);
        if answered || reply.response_code != ResponseCode::NoError {
            return;
        }
        let apex = |r: &Record| r.record_type() == RecordType::SOA && r.name == self.client;
        if let Some(at) = reply.authorities.iter().position(apex) {
            let mut soa = reply.authorities.remove(at);
            soa.name = asked_name.clone();
            reply.answers.push(soa);
        }
    }
}

/// One configured cluster as every route to it sees it: its identity, how its names map, and
/// whom to ask. The routes to it hold it (`Arc<Peer>`), so no route looks a cluster up.
#[derive(Debug)]
pub struct Peer {
    /// Its configuration: name, endpoints, domain, zone, prefix.
    pub(crate) cluster: Cluster,
    /// Its identity as a target: the answers of the routes to it, and its gathered legs, are
    /// cached under it.
    pub(crate) target: TargetId,
    pub(crate) map: ZoneMap,
    pub(crate) upstream: Arc<Upstream>,
}

impl AsRef<Cluster> for Arc<Peer> {
    fn as_ref(&self) -> &Cluster {
        &self.cluster
    }
}

impl Peer {
    /// Asks the cluster with the question rewritten into its domain and maps the reply back
    /// (the complete reply, not yet cut to the client's size).
    pub(crate) async fn ask(
        &self,
        request: &Request,
        deadline: Instant,
        negative_ttl: Duration,
    ) -> Vec<u8> {
        let upstream_bytes = self
            .map
            .to_upstream(request.name())
            .and_then(|name| request.for_peer(&name));
        let Some(upstream_bytes) = upstream_bytes else {
            // The name cannot exist in the cluster's domain (too long once rewritten).
            let reply = reply::negative(
                request.message(),
                ResponseCode::NXDomain,
                &self.map.client,
                negative_ttl,
            );
            return reply::encode_fitted(&reply, wire::MAX_MESSAGE);
        };
        self.exchange(request, &upstream_bytes, deadline).await
    }

    /// Asks the cluster the question as the client asked it, and maps the reply's names back all
    /// the same: the reverse route (a PTR target `mongo-4.mongo.db.svc.cluster.local` comes back
    /// as `mongo-4.mongo.db.cluster.b`, the name that resolves forward to the address).
    pub(crate) async fn ask_verbatim(&self, request: &Request, deadline: Instant) -> Vec<u8> {
        let Some(upstream_bytes) = request.for_peer(request.name()) else {
            let reply = reply::synthesized(request.message(), ResponseCode::FormErr);
            return reply::encode_fitted(&reply, wire::MAX_MESSAGE);
        };
        self.exchange(request, &upstream_bytes, deadline).await
    }

    /// Sends `upstream_bytes` (the client's `request` as the cluster must see it) and maps the
    /// reply back for the client.
    async fn exchange(
        &self,
        request: &Request,
        upstream_bytes: &[u8],
        deadline: Instant,
    ) -> Vec<u8> {
        let answered = match self.upstream.exchange(upstream_bytes, deadline).await {
            Ok(answered) => answered,
            Err(error) => {
                tracing::debug!(cluster = self.upstream.name(), %error, "cluster query failed");
                return reply::servfail_bytes(
                    request.message(),
                    ExtendedError::NoReachableAuthority,
                    &error.client_reason("cluster DNS"),
                );
            }
        };
        let Ok(upstream_reply) = Message::from_vec(&answered.bytes) else {
            return reply::servfail_bytes(
                request.message(),
                ExtendedError::NetworkError,
                "cluster DNS reply unreadable",
            );
        };
        if matches!(
            upstream_reply.response_code,
            ResponseCode::Refused | ResponseCode::FormErr | ResponseCode::NotImp
        ) {
            // These describe meshdns's query to the peer, not the client's question: as a
            // resolver would, the client gets SERVFAIL, and the reason in an Extended DNS Error.
            let why = format!("cluster DNS answered {}", upstream_reply.response_code);
            return reply::servfail_bytes(request.message(), ExtendedError::NetworkError, &why);
        }
        let upstream_reply = Owners::keep_in(upstream_reply);
        let Some(mut client_reply) = self.map.reply_to_client(upstream_reply, request.query())
        else {
            let why = "a name in the cluster DNS's answer has no name in the cluster zone";
            return reply::servfail_bytes(request.message(), ExtendedError::Other, why);
        };
        client_reply.metadata.id = request.id();
        reply::encode_fitted(&client_reply, wire::MAX_MESSAGE)
    }
}

/// The longest CNAME chain whose records a reply may keep (RFC 1034 §4.3.2 gives no limit;
/// resolvers stop near this, and a chain that never ends must not make the walk quadratic).
const MAX_CNAME_CHAIN: usize = 16;

/// The names whose records answer a reply's question (RFC 1034 §4.3.2): the question's name
/// and the names of the CNAME chain that starts there. A record of any other owner in a
/// peer's answer section answers nothing the client asked — a resolver would not take it, and
/// a merge that re-owns records by type would present it as the question's — so the cluster
/// route ([`Owners::keep_in`]) and the gathered merge ([`Owners::own`]) drop it before any
/// name is mapped. One definition for both routes.
#[derive(Debug)]
pub(crate) struct Owners(Vec<Name>);

impl Owners {
    /// The owners in `reply`'s answer section, from its question (none without one). A chain
    /// is followed from the question's name through each CNAME record found there, unless the
    /// question asks for the CNAME itself; a loop ends it, and so do 16 links.
    pub(crate) fn of(reply: &Message) -> Self {
        let Some(question) = reply.queries.first() else {
            return Self(Vec::new());
        };
        let mut owners = vec![question.name().clone()];
        let follow = question.query_type() != RecordType::CNAME;
        while follow && owners.len() <= MAX_CNAME_CHAIN {
            let Some(last) = owners.last() else { break };
            let next = reply.answers.iter().find_map(|r| match &r.data {
                RData::CNAME(CNAME(target)) if r.name == *last => Some(target),
                _ => None,
            });
            match next {
                Some(target) if !owners.contains(target) => owners.push(target.clone()),
                _ => break,
            }
        }
        Self(owners)
    }

    /// Whether `record` is owned by the question's name or a name of its chain (ASCII case
    /// ignored, as names compare).
    pub(crate) fn own(&self, record: &Record) -> bool {
        self.0.contains(&record.name)
    }

    /// `reply` without the answer records that do not answer its question.
    pub(crate) fn keep_in(mut reply: Message) -> Message {
        let owners = Self::of(&reply);
        reply.answers.retain(|record| owners.own(record));
        reply
    }
}

/// Maps a record's owner and the names inside its data.
fn map_record(record: &mut Record, spell: &impl Fn(&Name) -> Name) {
    record.name = spell(&record.name);
    map_data(record, spell);
}

/// Maps the names inside a record's data.
fn map_data(record: &mut Record, spell: &impl Fn(&Name) -> Name) {
    record.data = match std::mem::replace(&mut record.data, RData::Update0(RecordType::A)) {
        RData::SRV(srv) => RData::SRV(SRV::new(
            srv.priority,
            srv.weight,
            srv.port,
            spell(&srv.target),
        )),
        RData::CNAME(CNAME(target)) => RData::CNAME(CNAME(spell(&target))),
        RData::PTR(PTR(target)) => RData::PTR(PTR(spell(&target))),
        RData::NS(NS(target)) => RData::NS(NS(spell(&target))),
        RData::MX(mx) => RData::MX(MX::new(mx.preference, spell(&mx.exchange))),
        RData::SOA(soa) => RData::SOA(SOA::new(
            spell(&soa.mname),
            spell(&soa.rname),
            soa.serial,
            soa.refresh,
            soa.retry,
            soa.expire,
            soa.minimum,
        )),
        other => other,
    };
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::rdata::A;
    use hickory_proto::serialize::binary::BinDecodable;
    use proptest::prelude::*;

    use super::*;
    use crate::config::tests::{name, property};

    fn map() -> ZoneMap {
        ZoneMap::new(name("cluster.b."), name("svc.cluster.local."))
    }

    /// `text` mapped by `map` into the upstream's domain, on its wire form.
    fn up(map: &ZoneMap, text: &str) -> Option<Name> {
        let mapped = map.to_upstream(&name(text).to_bytes().unwrap())?;
        Some(Name::from_bytes(&mapped).unwrap())
    }

    #[test]
    fn names_map_there_and_back_on_label_boundaries() {
        let there = up(&map(), "Mongo-1.mongo.db.Cluster.B.").unwrap();
        assert_eq!(there.to_ascii(), "Mongo-1.mongo.db.svc.cluster.local.");
        assert_eq!(
            map().to_client(&there).unwrap().to_ascii(),
            "Mongo-1.mongo.db.cluster.b."
        );
        assert!(up(&map(), "x.notcluster.b.").is_none());
        assert!(map().to_client(&name("x.notsvc.cluster.local.")).is_none());
    }

    #[test]
    fn a_wildcard_label_is_kept_like_any_other() {
        let there = up(&map(), "*.mongo.db.cluster.b.").unwrap();
        assert_eq!(there.to_ascii(), "*.mongo.db.svc.cluster.local.");
        assert_eq!(
            map().to_client(&there).unwrap().to_ascii(),
            "*.mongo.db.cluster.b."
        );
    }

    #[test]
    fn a_mapping_that_would_be_too_long_is_refused() {
        let long = format!(
            "{}.cluster.b.",
            ["a".repeat(63), "b".repeat(63), "c".repeat(63)].join(".")
        );
        let to_long = ZoneMap::new(
            name("cluster.b."),
            name(&format!("{}.local.", "d".repeat(60))),
        );
        assert!(up(&to_long, &long).is_none());
    }

    #[test]
    fn replies_are_mapped_back_with_the_client_spelling() {
        let asked = Query::query(name("MONGO-1.Mongo.db.cluster.b."), RecordType::SRV);
        let mut reply = Message::response(1, hickory_proto::op::OpCode::Query);
        let member = name("mongo-1.mongo.db.svc.cluster.local.");
        reply.add_query(Query::query(member.clone(), RecordType::SRV));
        let srv = RData::SRV(SRV::new(0, 0, 27017, member.clone()));
        reply.add_answer(Record::from_rdata(member.clone(), 30, srv));
        let glue = RData::A(A::new(10, 2, 0, 1));
        reply.add_additional(Record::from_rdata(member, 30, glue));
        let mapped = map().reply_to_client(reply, &asked).unwrap();
        assert!(mapped.queries[0].name().eq_case(asked.name()));
        assert!(mapped.answers[0].name.eq_case(asked.name()));
        let srv = mapped.answers[0].try_borrow::<SRV>().unwrap();
        assert_eq!(srv.data().target.to_ascii(), "MONGO-1.Mongo.db.cluster.b.");
        assert_eq!(
            mapped.additionals[0].name.to_ascii(),
            "MONGO-1.Mongo.db.cluster.b."
        );
    }

    /// A reply to `question` A whose answer section holds `answers`.
    fn reply_with(question: &str, answers: Vec<Record>) -> Message {
        let mut reply = Message::response(1, hickory_proto::op::OpCode::Query);
        reply.add_query(Query::query(name(question), RecordType::A));
        reply.answers = answers;
        reply
    }

    fn a(owner: &str, last: u8) -> Record {
        Record::from_rdata(name(owner), 30, RData::A(A::new(10, 2, 0, last)))
    }

    fn cname(owner: &str, target: &str) -> Record {
        Record::from_rdata(name(owner), 30, RData::CNAME(CNAME(name(target))))
    }

    fn owners(reply: &Message) -> Vec<String> {
        let kept = Owners::keep_in(reply.clone());
        kept.answers.iter().map(|r| r.name.to_ascii()).collect()
    }

    #[test]
    fn only_the_question_and_its_cname_chain_own_answers() {
        let (q, x, y) = ("Web.db.svc.cluster.local.", "x.example.", "y.example.");
        let unrelated = reply_with(q, vec![a("web.db.svc.cluster.local.", 1), a(y, 2)]);
        assert_eq!(owners(&unrelated), ["web.db.svc.cluster.local."]);
        let chain = reply_with(q, vec![cname(q, x), a(x, 1), a(y, 2)]);
        assert_eq!(owners(&chain), [q, x]);
        let broken = reply_with(q, vec![cname(q, x), a(y, 2)]);
        assert_eq!(owners(&broken), [q]);
        let looped = reply_with(q, vec![cname(q, x), cname(x, q), a(y, 2)]);
        assert_eq!(owners(&looped), [q, x]);
        let mut no_question = reply_with(q, vec![a(q, 1)]);
        no_question.queries.clear();
        assert!(owners(&no_question).is_empty());
    }

    #[test]
    fn a_cname_chain_is_followed_only_so_far() {
        let hop = |i: usize| format!("h{i}.example.");
        let chain: Vec<Record> = (0..40).map(|i| cname(&hop(i), &hop(i + 1))).collect();
        let kept = owners(&reply_with(&hop(0), chain));
        assert_eq!(kept.len(), MAX_CNAME_CHAIN + 1);
    }

    #[test]
    fn a_peer_with_its_own_domain_naming_a_local_service_has_no_reply() {
        let map = ZoneMap::new(name("cluster.d."), name("svc.d.example."))
            .beside(name("svc.cluster.local."));
        let asked = Query::query(name("_x._tcp.web.db.cluster.d."), RecordType::SRV);
        let owner = "_x._tcp.web.db.svc.d.example.";
        let answer = |target: &str| {
            let mut reply = reply_with(owner, vec![]);
            let srv = RData::SRV(SRV::new(0, 0, 80, name(target)));
            reply.add_answer(Record::from_rdata(name(owner), 30, srv));
            reply
        };
        assert!(
            map.reply_to_client(answer("web.db.svc.cluster.local."), &asked)
                .is_none()
        );
        let own = map
            .reply_to_client(answer("web.db.svc.d.example."), &asked)
            .unwrap();
        let srv = own.answers[0].try_borrow::<SRV>().unwrap();
        assert_eq!(srv.data().target.to_ascii(), "web.db.cluster.d.");
        let external = map
            .reply_to_client(answer("db.example.org."), &asked)
            .unwrap();
        let srv = external.answers[0].try_borrow::<SRV>().unwrap();
        assert_eq!(srv.data().target.to_ascii(), "db.example.org.");
    }

    /// A DNS label: letters of either case, digits, hyphens (what Kubernetes names use), or any
    /// byte at all (DNS allows it; the mapping must not care).
    fn label() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::string::string_regex("[a-zA-Z0-9][a-zA-Z0-9-]{0,20}")
                .unwrap()
                .prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 1..=63),
        ]
    }

    fn name_under(zone: &Name, labels: &[Vec<u8>]) -> Option<Name> {
        Name::from_labels(labels.iter().map(Vec::as_slice).chain(zone.iter())).ok()
    }

    proptest! {
        #![proptest_config(property(256))]

        #[test]
        fn a_name_rewritten_into_a_cluster_domain_and_back_is_itself(
            labels in proptest::collection::vec(label(), 0..6),
            domain in prop_oneof![Just("svc.cluster.local."), Just("svc.west.example."), Just("svc.c.")],
            client in prop_oneof![Just("cluster.b."), Just("Cluster.West."), Just("b.mesh.internal.")],
        ) {
            let map = ZoneMap::new(name(client), name(domain));
            let Some(client_name) = name_under(&map.client, &labels) else {
                return Ok(()); // longer than DNS allows: not a name a client can send
            };
            // Mapped as a query's question is: on its wire form.
            let there = map.to_upstream(&client_name.to_bytes().unwrap());
            match there.map(|wire| Name::from_bytes(&wire).unwrap()) {
                Some(there) => {
                    prop_assert!(map.upstream.zone_of(&there));
                    let back = map.to_client(&there).expect("a rewritten name maps back");
                    prop_assert!(back.eq_case(&client_name), "{} → {} → {}", client_name, there, back);
                }
                // Only a name that would be too long in the cluster's domain has no mapping.
                None => prop_assert!(
                    name_under(&map.upstream, &labels).is_none(),
                    "{} has no mapping though it fits", client_name
                ),
            }
        }
    }
}
