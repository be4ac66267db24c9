//! What operators read matches the code: the README's configuration table is the variable
//! table the parser and `--help` use, its metrics table lists exactly the registered families
//! with their types and labels, and every metric the Grafana dashboard queries exists
//! (histograms through `_bucket`, `_sum` or `_count`).

use std::collections::BTreeSet;

use meshdns::testing::config::VARIABLES;
use meshdns::testing::metrics::{FAMILIES, Kind};

const README: &str = include_str!("../../README.md");
const DASHBOARD: &str = include_str!("../../k8s/grafana/meshdns.json");

/// The rows (`| ` lines after the header) of the first table under `## <title>`.
fn table_rows(title: &str) -> Vec<Vec<String>> {
    let section = README
        .split(&format!("\n## {title}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("README has a `## {title}` section"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_readme_configuration_table_is_the_variable_table() {
    let documented = table_rows("Configuration");
    let expected: Vec<Vec<String>> = VARIABLES
        .iter()
        .map(|v| {
            v.readme_row()
                .trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect();
    assert_eq!(documented, expected);
}

/// `(name, type, labels)` of every row of the table under `## Metrics`.
fn readme_rows() -> Vec<(String, String, Vec<String>)> {
    let section = README
        .split("\n## Metrics\n")
        .nth(1)
        .expect("README has a `## Metrics` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert!(cells.len() >= 3, "a short row: {line}");
            let unquote = |s: &str| s.trim().trim_matches('`').to_string();
            let labels = cells[2]
                .split(',')
                .map(unquote)
                .filter(|l| !l.is_empty())
                .collect();
            (unquote(cells[0]), cells[1].to_string(), labels)
        })
        .collect()
}

#[test]
fn the_readme_metrics_table_lists_every_family_with_its_type_and_labels() {
    let documented = readme_rows();
    let registered: Vec<(String, String, Vec<String>)> = FAMILIES
        .iter()
        .map(|f| {
            (
                f.name.to_string(),
                f.kind.as_str().to_string(),
                f.labels.iter().map(|l| l.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(documented, registered);
}

#[test]
fn every_metric_the_dashboard_queries_exists() {
    let mut known: BTreeSet<String> = BTreeSet::new();
    for family in FAMILIES {
        known.insert(family.name.to_string());
        if family.kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                known.insert(format!("{}{suffix}", family.name));
            }
        }
    }
    let queried: BTreeSet<String> = DASHBOARD
        .match_indices("meshdns_")
        .map(|(at, _)| {
            DASHBOARD[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect();
    assert!(!queried.is_empty(), "the dashboard queries meshdns metrics");
    let unknown: Vec<&String> = queried.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries unknown metrics: {unknown:?}"
    );
}
