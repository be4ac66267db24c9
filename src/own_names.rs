//! The pod's own names, answered by meshdns itself (docs/design.md, "The pod's own names").
//!
//! A database member checks its own name at startup, before it is ready, and a headless
//! Service publishes only ready pods: kube-dns says NXDOMAIN for the pod's name until the pod
//! is ready, which it cannot become without resolving itself. meshdns knows the pod (its
//! [`PodIdentity`]), so it answers the exact names of
//! [`Config::own_names`] from its first query on, without asking anyone: A and AAAA from the
//! pod's addresses, PTR of each address to the pod's name, NODATA (with the SOA of the name's
//! zone) for every other type and for a family the pod has no address of. Every record and
//! the SOA carry [`OWN_TTL`]. The router checks these names before any zone, so they win over
//! the route of the zone they lie in; any other name (a sibling's) is routed as before.
//!
//! It owns those answers and asks no server; which names and addresses are the pod's is the
//! configuration's ([`PodIdentity`], [`Config::own_names`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};

use crate::config::{Config, OwnData, OwnName, PodIdentity};
use crate::reply;
use crate::wire;

/// The TTL of every own answer, positive or negative: what kube-dns (CoreDNS's `kubernetes`
/// plugin) gives its own records by default.
pub(crate) const OWN_TTL: Duration = Duration::from_secs(5);

/// The own names of one configuration, each with its lowercase wire form for matching.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OwnNames {
    names: Vec<(Vec<u8>, Arc<OwnName>)>,
}

impl OwnNames {
    /// The own names of `config` (none when the pod's identity is off).
    pub(crate) fn new(config: &Config) -> Self {
        let names = config
            .own_names()
            .into_iter()
            .map(|own| (wire::lowercase_name(own.name.iter()), Arc::new(own)))
            .collect();
        Self { names }
    }

    /// Every own name, in the order of the configuration.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<OwnName>> {
        self.names.iter().map(|(_, own)| own)
    }

    /// The own name `name` (uncompressed wire form, any letter case), if it is one. Without an
    /// identity the table is empty and this costs nothing.
    pub(crate) fn find(&self, name: &[u8]) -> Option<&Arc<OwnName>> {
        (self.names.iter())
            .find(|(own, _)| own.len() == name.len() && own.eq_ignore_ascii_case(name))
            .map(|(_, own)| own)
    }
}

/// The complete reply to `request`, whose question `query` is the own name `own`: the records
/// of the asked type owned by the question as the client spelled it, or NODATA with the SOA of
/// the name's zone.
pub(crate) fn answer(own: &OwnName, query: &Query, request: &Message) -> Vec<u8> {
    let ttl = u32::try_from(OWN_TTL.as_secs()).unwrap_or(u32::MAX);
    let owner = query.name();
    let wanted = |rtype: RecordType| {
        query.query_class() == DNSClass::IN
            && (query.query_type() == rtype || query.query_type() == RecordType::ANY)
    };
    let records: Vec<Record> = match &own.data {
        OwnData::Addresses(ips) => ips
            .iter()
            .filter_map(|ip| match ip {
                IpAddr::V4(v4) if wanted(RecordType::A) => Some(RData::A(A::from(*v4))),
                IpAddr::V6(v6) if wanted(RecordType::AAAA) => Some(RData::AAAA(AAAA::from(*v6))),
                _ => None,
            })
            .map(|data| Record::from_rdata(owner.clone(), ttl, data))
            .collect(),
        OwnData::Pointer(target) if wanted(RecordType::PTR) => vec![Record::from_rdata(
            owner.clone(),
            ttl,
            RData::PTR(PTR(target.clone())),
        )],
        OwnData::Pointer(_) => Vec::new(),
    };
    let reply = if records.is_empty() {
        reply::negative(request, ResponseCode::NoError, &own.zone, OWN_TTL)
    } else {
        let mut reply = reply::synthesized(request, ResponseCode::NoError);
        reply.metadata.authoritative = true;
        reply.answers = records;
        reply
    };
    reply::encode_fitted(&reply, wire::MAX_MESSAGE)
}

/// Says once, at startup, whether the pod's own names are answered locally, and which.
pub(crate) fn log_startup(config: &Config) {
    match &config.pod {
        PodIdentity::On(_) => {
            let names: Vec<String> = config
                .own_names()
                .iter()
                .map(|own| own.name.to_ascii())
                .collect();
            tracing::info!(names = %names.join(" "), "answering the pod's own names locally");
        }
        PodIdentity::Off { why, .. } => {
            tracing::info!("the pod's own names are not answered locally: {why}");
        }
    }
}
