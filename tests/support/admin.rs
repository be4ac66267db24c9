//! The admin server as a test sees it: a tiny HTTP/1.1 client and a parser of Prometheus'
//! text format.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct HttpResponse {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

pub async fn request(addr: SocketAddr, method: &str, path: &str) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: meshdns\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .expect("the admin server answers in time")
        .unwrap();
    let raw = String::from_utf8(raw).expect("UTF-8");
    let (headers, body) = raw.split_once("\r\n\r\n").expect("a complete response");
    let status = headers
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    HttpResponse {
        status,
        headers: headers.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> HttpResponse {
    request(addr, "GET", path).await
}

/// The samples of a scrape, keyed `name{label="value",…}` with the labels sorted.
pub struct Scrape {
    pub samples: HashMap<String, f64>,
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut samples = HashMap::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            let key = match series.split_once('{') {
                None => series.to_string(),
                Some((name, labels)) => {
                    let labels = labels.trim_end_matches('}');
                    let mut pairs: Vec<(&str, &str)> = labels
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(|p| p.split_once('=').unwrap())
                        .collect();
                    pairs.sort_unstable();
                    series_key(name, &pairs)
                }
            };
            samples.insert(key, value.parse().unwrap());
        }
        Scrape { samples, types }
    }

    /// The value of a series (0 when absent, as Prometheus' `rate()` would treat a new one).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut quoted: Vec<(&str, String)> = labels
            .iter()
            .map(|(k, v)| (*k, format!("\"{v}\"")))
            .collect();
        quoted.sort_unstable();
        let pairs: Vec<(&str, &str)> = quoted.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let key = if labels.is_empty() {
            name.to_string()
        } else {
            series_key(name, &pairs)
        };
        self.samples.get(&key).copied().unwrap_or(0.0)
    }

    /// Every value label `label` takes in the series of `name`.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let prefix = format!("{name}{{");
        let needle = format!("{label}=\"");
        let mut values: Vec<String> = self
            .samples
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .filter_map(|k| {
                let start = k.find(&needle)? + needle.len();
                let len = k[start..].find('"')?;
                Some(k[start..start + len].to_string())
            })
            .collect();
        values.sort_unstable();
        values.dedup();
        values
    }
}

fn series_key(name: &str, pairs: &[(&str, &str)]) -> String {
    let labels: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// Each series' change between two scrapes, the unchanged left out.
pub fn changes(before: &Scrape, after: &Scrape) -> BTreeMap<String, f64> {
    after
        .samples
        .iter()
        .filter(|(key, _)| !key.contains("_bucket{") && !key.contains("_sum"))
        .filter_map(|(key, value)| {
            let delta = value - before.samples.get(key).copied().unwrap_or(0.0);
            (delta != 0.0).then(|| (key.clone(), delta))
        })
        .collect()
}
