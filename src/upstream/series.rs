//! The metric series of upstream groups and their endpoints, and their lifetime: a series
//! exists while something holds it and is removed from the registry when the last holder goes,
//! so an alert on a removed endpoint or cluster clears by itself.
//!
//! Series are keyed by label values, not by the object that made them: a reload that keeps a
//! group keeps its series untouched, and a new group with the same cluster name (its endpoints
//! or transport changed) takes the same series before the old group is dropped — the old
//! group's drop then removes nothing the new one uses. Holders are counted under one lock, so
//! a series is never removed while a holder still writes to it.
//!
//! `meshdns_upstream_healthy{peer,endpoint}` says what the newest holder of the endpoint
//! knows: an old group still finishing its queries after a reload does not overwrite the
//! health that the new group's endpoint has set.
//!
//! It owns the series' lifetimes; the families are made once by the metrics module, and what
//! is recorded into a series, and when, is the group's and its endpoints'.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::AttemptResult;
use super::names::ResolutionCounters;

/// The families every upstream group records into (`meshdns_upstream_*`,
/// `meshdns_endpoint_resolutions_total`), built by the metrics module; each group takes its
/// own series by its cluster name, through `UpstreamMetrics::group`.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamMetrics {
    pub(crate) requests: IntCounterVec,
    pub(crate) duration: HistogramVec,
    pub(crate) healthy: IntGaugeVec,
    pub(crate) resolutions: IntCounterVec,
    pub(crate) tls_handshakes: IntCounterVec,
    pub(crate) connections: IntCounterVec,
    pub(crate) retransmits: IntCounterVec,
    /// `meshdns_peer_certificate_expiry_timestamp_seconds{peer}`, set by a TLS group's
    /// handshakes.
    pub(crate) peer_certificate_expiry: IntGaugeVec,
    /// Who holds which series.
    pub(crate) held: Arc<Held>,
}

/// The holders of each series, by label values.
#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<Holders>);

#[derive(Debug, Default)]
struct Holders {
    /// Groups holding each cluster's series.
    clusters: HashMap<String, usize>,
    /// Endpoints holding each `(cluster, endpoint)` health series.
    endpoints: HashMap<(String, SocketAddr), EndpointHolders>,
    /// The number given to the last endpoint holder.
    last_number: u64,
}

#[derive(Debug, Default)]
struct EndpointHolders {
    count: usize,
    /// The newest holder: the only one whose health is shown.
    newest: u64,
}

impl Held {
    fn lock(&self) -> MutexGuard<'_, Holders> {
        // Nothing under the lock panics; a poisoned table is still the table.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `transport` labels of `upstream_connections_total`.
const STREAM_TRANSPORTS: [&str; 2] = ["tcp", "tls"];

/// The result labels of `endpoint_resolutions_total`: ok, failed.
const RESOLUTION_RESULTS: [&str; 2] = ["ok", "failed"];

impl UpstreamMetrics {
    /// The series of the group of cluster `name`, whose stream connections are over
    /// `transport` (`tcp` or `tls`), held until the returned value is dropped.
    pub(super) fn group(&self, name: &str, transport: &str) -> GroupSeries {
        let mut holders = self.held.lock();
        *holders.clusters.entry(name.to_string()).or_default() += 1;
        let [ok, failed] =
            RESOLUTION_RESULTS.map(|result| self.resolutions.with_label_values(&[name, result]));
        GroupSeries {
            results: AttemptResult::ALL
                .iter()
                .map(|result| self.requests.with_label_values(&[name, result.label()]))
                .collect(),
            duration: self.duration.with_label_values(&[name]),
            resolutions: ResolutionCounters { ok, failed },
            tls_handshakes: self.tls_handshakes.with_label_values(&[name]),
            connections: self.connections.with_label_values(&[name, transport]),
            retransmits: self.retransmits.with_label_values(&[name]),
            peer_certificate: PeerCertificateSeries {
                family: self.peer_certificate_expiry.clone(),
                peer: name.into(),
            },
            name: name.to_string(),
            metrics: self.clone(),
        }
    }

    /// The health series of `endpoint` in cluster `cluster`, held (and written) by the caller
    /// until the returned value is dropped; it starts at 1 (up).
    pub(super) fn endpoint(&self, cluster: &str, endpoint: SocketAddr) -> HealthSeries {
        let mut holders = self.held.lock();
        holders.last_number += 1;
        let number = holders.last_number;
        let key = (cluster.to_string(), endpoint);
        let entry = holders.endpoints.entry(key.clone()).or_default();
        entry.count += 1;
        entry.newest = number;
        let gauge = self
            .healthy
            .with_label_values(&[cluster, &endpoint.to_string()]);
        gauge.set(1);
        HealthSeries {
            gauge,
            key,
            number,
            metrics: self.clone(),
        }
    }
}

/// One group's series, resolved once so that recording an attempt is two atomic updates;
/// removed when the last group of its cluster name is dropped.
#[derive(Debug)]
pub(super) struct GroupSeries {
    /// Indexed like [`AttemptResult::ALL`].
    results: Vec<IntCounter>,
    duration: Histogram,
    pub(crate) resolutions: ResolutionCounters,
    /// Counts the group's TLS handshakes; stays at 0 unless the group speaks TLS.
    pub(crate) tls_handshakes: IntCounter,
    /// Counts the stream connections (TCP or TLS) the group's endpoints open.
    pub(crate) connections: IntCounter,
    /// Counts the group's retransmissions: UDP queries sent again, to the same endpoint or
    /// (a hedge) to the next.
    pub(crate) retransmits: IntCounter,
    /// When the certificate the peer presented expires, from each handshake.
    pub(crate) peer_certificate: PeerCertificateSeries,
    name: String,
    metrics: UpstreamMetrics,
}

/// `meshdns_peer_certificate_expiry_timestamp_seconds` of one peer. Made at its first handshake,
/// not before (a series at 0 would read as a certificate long expired), and removed with the
/// group's other series.
#[derive(Debug, Clone)]
pub struct PeerCertificateSeries {
    family: IntGaugeVec,
    peer: Arc<str>,
}

impl PeerCertificateSeries {
    /// The peer presented a certificate that expires at `not_after` (seconds since the epoch).
    pub(crate) fn presented(&self, not_after: i64) {
        self.family.with_label_values(&[&*self.peer]).set(not_after);
    }
}

impl GroupSeries {
    pub(super) fn record(&self, result: AttemptResult, elapsed: Duration) {
        if let Some(counter) = self.results.get(result as usize) {
            counter.inc();
        }
        self.duration.observe(elapsed.as_secs_f64());
    }
}

impl Drop for GroupSeries {
    fn drop(&mut self) {
        let metrics = &self.metrics;
        let mut holders = metrics.held.lock();
        let Some(count) = holders.clusters.get_mut(&self.name) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        holders.clusters.remove(&self.name);
        let name = self.name.as_str();
        // The series exist (made in `group`); a failed removal leaves one series, no harm.
        for result in AttemptResult::ALL {
            let _ = metrics
                .requests
                .remove_label_values(&[name, result.label()]);
        }
        for result in RESOLUTION_RESULTS {
            let _ = metrics.resolutions.remove_label_values(&[name, result]);
        }
        let _ = metrics.duration.remove_label_values(&[name]);
        let _ = metrics.tls_handshakes.remove_label_values(&[name]);
        let _ = metrics.retransmits.remove_label_values(&[name]);
        let _ = metrics.peer_certificate_expiry.remove_label_values(&[name]);
        // Both transports: a reload may have changed the cluster's.
        for transport in STREAM_TRANSPORTS {
            let _ = metrics.connections.remove_label_values(&[name, transport]);
        }
    }
}

/// `meshdns_upstream_healthy` of one endpoint; removed when its last holder is dropped.
#[derive(Debug)]
pub(super) struct HealthSeries {
    gauge: IntGauge,
    key: (String, SocketAddr),
    number: u64,
    metrics: UpstreamMetrics,
}

impl HealthSeries {
    /// Shows the endpoint up or down, unless a newer holder (the endpoint in the group of a
    /// newer configuration) speaks for it.
    pub(super) fn set(&self, up: bool) {
        let holders = self.metrics.held.lock();
        if holders
            .endpoints
            .get(&self.key)
            .is_some_and(|h| h.newest == self.number)
        {
            self.gauge.set(i64::from(up));
        }
    }

    /// What the series shows now.
    #[cfg(test)]
    pub(crate) fn get(&self) -> i64 {
        self.gauge.get()
    }
}

impl Drop for HealthSeries {
    fn drop(&mut self) {
        let mut holders = self.metrics.held.lock();
        let Some(entry) = holders.endpoints.get_mut(&self.key) else {
            return;
        };
        entry.count -= 1;
        if entry.count > 0 {
            return;
        }
        holders.endpoints.remove(&self.key);
        let (cluster, endpoint) = &self.key;
        let _ = self
            .metrics
            .healthy
            .remove_label_values(&[cluster, &endpoint.to_string()]);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use prometheus::{HistogramOpts, Opts};

    use super::*;

    /// Families registered nowhere, for unit tests.
    pub(crate) fn metrics() -> UpstreamMetrics {
        let counters = |name: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, "test"), labels).unwrap()
        };
        UpstreamMetrics {
            requests: counters("requests", &["peer", "result"]),
            duration: HistogramVec::new(HistogramOpts::new("duration", "test"), &["peer"]).unwrap(),
            healthy: IntGaugeVec::new(Opts::new("healthy", "test"), &["peer", "endpoint"]).unwrap(),
            resolutions: counters("resolutions", &["peer", "result"]),
            tls_handshakes: counters("handshakes", &["peer"]),
            connections: counters("connections", &["peer", "transport"]),
            retransmits: counters("retransmits", &["peer"]),
            peer_certificate_expiry: IntGaugeVec::new(Opts::new("expiry", "test"), &["peer"])
                .unwrap(),
            held: Arc::default(),
        }
    }

    /// The health series of `endpoint` in `cluster` as a scrape would show it, if present.
    fn healthy(metrics: &UpstreamMetrics, cluster: &str, endpoint: SocketAddr) -> Option<i64> {
        let endpoint = endpoint.to_string();
        prometheus::core::Collector::collect(&metrics.healthy)
            .iter()
            .flat_map(|family| family.get_metric())
            .find(|metric| {
                let label = |name: &str| {
                    metric
                        .get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_string())
                };
                label("peer").as_deref() == Some(cluster)
                    && label("endpoint").as_deref() == Some(endpoint.as_str())
            })
            .map(|metric| metric.get_gauge().get_value() as i64)
    }

    #[test]
    fn an_endpoints_health_series_goes_with_its_last_holder() {
        let metrics = metrics();
        let addr: SocketAddr = "127.0.0.1:53".parse().unwrap();
        let old = metrics.endpoint("b", addr);
        old.set(false);
        assert_eq!(healthy(&metrics, "b", addr), Some(0));
        // A reload makes a new group with the same endpoint before the old group goes.
        let new = metrics.endpoint("b", addr);
        assert_eq!(healthy(&metrics, "b", addr), Some(1));
        old.set(false);
        assert_eq!(
            healthy(&metrics, "b", addr),
            Some(1),
            "the old holder no longer speaks for the endpoint"
        );
        drop(old);
        assert_eq!(
            healthy(&metrics, "b", addr),
            Some(1),
            "kept for the new holder"
        );
        new.set(false);
        assert_eq!(healthy(&metrics, "b", addr), Some(0));
        drop(new);
        assert_eq!(
            healthy(&metrics, "b", addr),
            None,
            "gone with the last holder"
        );
    }

    #[test]
    fn a_clusters_series_go_with_its_last_group_not_with_a_replaced_one() {
        let metrics = metrics();
        let count = || {
            prometheus::core::Collector::collect(&metrics.requests)
                .iter()
                .map(|f| f.get_metric().len())
                .sum::<usize>()
        };
        let old = metrics.group("b", "tcp");
        old.record(AttemptResult::Ok, Duration::from_millis(1));
        let new = metrics.group("b", "tcp");
        drop(old);
        assert_eq!(
            count(),
            AttemptResult::ALL.len(),
            "the new group keeps them"
        );
        assert_eq!(
            metrics.requests.with_label_values(&["b", "ok"]).get(),
            1,
            "with their counts"
        );
        drop(new);
        assert_eq!(count(), 0);
        assert!(
            prometheus::core::Collector::collect(&metrics.resolutions)
                .iter()
                .all(|f| f.get_metric().is_empty())
        );
    }
}
