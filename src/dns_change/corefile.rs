//! A CoreDNS Corefile, read only as far as meshdns's change to it needs: the server blocks at
//! the top level (the zones of their keys, the line each opens on), the top-level `import`s,
//! and the region that `meshdns dns-change` wrote before, between [`BEGIN`] and [`END`].
//!
//! [`merge`] replaces that region as a whole (so a second run gives the same file as the
//! first) and refuses, naming the line, a block outside it that serves one of meshdns's zones
//! or a zone overlapping one. It never rewrites a line outside the region: every stock line is
//! kept byte for byte. It touches no file and no process; text in, text out.

use super::ChangeError;

/// The first line of the region meshdns owns in a Corefile.
pub(crate) const BEGIN: &str =
    "# meshdns: begin (written by `meshdns dns-change`; replaced as a whole on the next run)";
/// The last line of that region.
pub(crate) const END: &str = "# meshdns: end";

/// One server block (or snippet) at the top level of a Corefile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    /// 1-based line of its first key.
    pub(crate) line: usize,
    /// That line as written, trimmed: what an error names.
    pub(crate) text: String,
    /// The zones of its keys, lowercase, without the trailing dot; `.` for the root. A
    /// snippet's `(name)` stays as written.
    pub(crate) zones: Vec<String>,
    /// Inside meshdns's region: written by an earlier run, replaced by this one.
    pub(crate) in_region: bool,
}

/// What [`parse`] finds.
#[derive(Debug, Default)]
pub(crate) struct Corefile {
    pub(crate) blocks: Vec<Block>,
    /// The arguments of the top-level `import` lines (`/etc/coredns/custom/*.server`).
    pub(crate) imports: Vec<String>,
    /// 0-based first and last line of meshdns's region, when there is one.
    pub(crate) region: Option<(usize, usize)>,
}

/// The words of one line outside its comment; a `#` inside double quotes is no comment.
fn words(line: &str) -> Vec<&str> {
    let mut quoted = false;
    let end = line
        .char_indices()
        .find(|&(_, c)| {
            quoted ^= c == '"';
            c == '#' && !quoted
        })
        .map_or(line.len(), |(at, _)| at);
    line[..end].split_whitespace().collect()
}

/// A key's zone: `dns://Cluster.A.:53` → `cluster.a`; the root `.` (or an empty zone) → `.`.
pub(crate) fn zone_of_key(key: &str) -> String {
    let key = key.trim_end_matches(',');
    let rest = key.split_once("://").map_or(key, |(_, rest)| rest);
    let host = match rest.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => rest,
    };
    match host.trim_end_matches('.') {
        "" => ".".to_string(),
        zone => zone.to_ascii_lowercase(),
    }
}

/// Whether a word opens a block: `{`, or a key written against it (`zone:53{`); a `{$VAR}`
/// placeholder opens none.
fn opens(word: &str) -> bool {
    word.ends_with('{') && !word.starts_with("{$")
}

/// Parse the parts of `text` that a merge needs. `Err` names the line of a brace that does not
/// match or of a region marker out of place.
pub(crate) fn parse(text: &str) -> Result<Corefile, ChangeError> {
    let mut found = Corefile::default();
    let (mut depth, mut keys, mut first) = (0usize, Vec::new(), (0, String::new()));
    let mut region_start = None;
    let syntax = |line: usize, reason: &str| ChangeError::Syntax {
        line: line + 1,
        reason: reason.to_string(),
    };
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed == BEGIN || trimmed == END {
            if depth > 0
                || (trimmed == BEGIN) == region_start.is_some()
                || (trimmed == BEGIN && found.region.is_some())
            {
                return Err(syntax(n, "a meshdns region marker out of place"));
            }
            match region_start.take() {
                None => region_start = Some(n),
                Some(start) => found.region = Some((start, n)),
            }
            continue;
        }
        let words = words(line);
        if depth == 0 && keys.is_empty() && words.first() == Some(&"import") {
            found
                .imports
                .extend(words[1..].iter().map(|w| w.to_string()));
            continue;
        }
        for word in words {
            if opens(word) {
                if depth == 0 {
                    keys.extend(Some(word.trim_end_matches('{')).filter(|k| !k.is_empty()));
                    if keys.is_empty() {
                        return Err(syntax(n, "a block opens without a zone"));
                    }
                    found.blocks.push(Block {
                        line: first.0 + 1,
                        text: std::mem::take(&mut first.1),
                        zones: keys.drain(..).map(zone_of_key).collect(),
                        in_region: region_start.is_some(),
                    });
                }
                depth += 1;
            } else if word == "}" {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| syntax(n, "a '}' closes nothing"))?;
            } else if depth == 0 {
                if keys.is_empty() {
                    first = (n, trimmed.to_string());
                }
                keys.push(word);
            }
        }
    }
    if depth > 0 || !keys.is_empty() {
        let last = text.lines().count().saturating_sub(1);
        return Err(syntax(
            last,
            "a block is not closed, or a word stands outside any block",
        ));
    }
    if let Some(start) = region_start {
        return Err(syntax(start, "the meshdns region has no end marker"));
    }
    Ok(found)
}

/// Whether `zone` lies strictly under `parent` (label-wise).
fn is_under(zone: &str, parent: &str) -> bool {
    zone.strip_suffix(parent)
        .is_some_and(|head| head.ends_with('.'))
}

/// Whether two zones overlap: equal, or one inside the other. The root overlaps nothing here:
/// every Corefile has it, and a more specific block beside it is how CoreDNS is meant to be
/// extended.
fn overlaps(a: &str, b: &str) -> bool {
    a != "." && b != "." && (a == b || is_under(a, b) || is_under(b, a))
}

/// The first block outside meshdns's region that serves a zone overlapping one of `owned`.
pub(crate) fn check_conflicts(corefile: &Corefile, owned: &[String]) -> Result<(), ChangeError> {
    for block in corefile.blocks.iter().filter(|b| !b.in_region) {
        let place = || format!("line {}: {:?}", block.line, block.text);
        check_zones(place, &block.zones, owned)?;
    }
    Ok(())
}

/// The first of `zones` (served at `place`, in a Corefile or a platform's JSON setting) that
/// overlaps one of `owned`, as a conflict.
pub(crate) fn check_zones(
    place: impl FnOnce() -> String,
    zones: &[String],
    owned: &[String],
) -> Result<(), ChangeError> {
    for zone in zones {
        if let Some(mine) = owned.iter().find(|m| overlaps(zone, m)) {
            return Err(ChangeError::Conflict {
                place: place(),
                zone: zone.clone(),
                owned: mine.clone(),
            });
        }
    }
    Ok(())
}

/// `current` with meshdns's region replaced by `region` (appended at the end), after checking
/// that nothing outside the region serves one of `owned`.
pub(crate) fn merge(current: &str, region: &str, owned: &[String]) -> Result<String, ChangeError> {
    let corefile = parse(current)?;
    check_conflicts(&corefile, owned)?;
    let (start, end) = corefile.region.unwrap_or((usize::MAX, usize::MAX));
    let mut merged: String = current
        .split_inclusive('\n')
        .enumerate()
        .filter(|(n, _)| !(start..=end).contains(n))
        .map(|(_, line)| line)
        .collect();
    if !merged.is_empty() && !merged.ends_with('\n') {
        merged.push('\n');
    }
    merged.push_str(region);
    Ok(merged)
}

/// The region: one server block per zone, each forwarding to `resolver` (an IP, or `IP:port`).
pub(crate) fn region(owned: &[String], resolver: &str) -> String {
    let mut text = format!(
        "{BEGIN}\n# The zones meshdns owns, forwarded to its cluster-level resolver ({resolver}).\n"
    );
    for zone in owned {
        text.push_str(&format!(
            "{zone}:53 {{\n    errors\n    cache 30\n    forward . {resolver}\n}}\n"
        ));
    }
    text.push_str(END);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM: &str = include_str!("../../tests/platforms/kubeadm/Corefile");

    fn owned() -> Vec<String> {
        ["cluster.a", "cluster.b", "distributed.local"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn keys_become_zones_without_scheme_port_or_trailing_dot() {
        assert_eq!(zone_of_key("dns://Cluster.A.:53"), "cluster.a");
        assert_eq!(zone_of_key(".:53"), ".");
        assert_eq!(zone_of_key("example.org,"), "example.org");
        assert_eq!(zone_of_key("tls://."), ".");
    }

    #[test]
    fn stock_blocks_imports_and_nested_blocks_are_read() {
        let text = ".:53 {\n  health {\n    lameduck 5s\n  }\n  forward . {$UP}\n}\nimport custom/*.server # extra\n";
        let parsed = parse(text).unwrap();
        assert_eq!(parsed.blocks.len(), 1);
        assert_eq!(parsed.blocks[0].zones, ["."]);
        assert_eq!(parsed.imports, ["custom/*.server"]);
    }

    #[test]
    fn several_keys_and_a_brace_against_the_key_are_one_block() {
        let parsed = parse("a.example, b.example:53{\n  whoami\n}\n").unwrap();
        assert_eq!(parsed.blocks[0].zones, ["a.example", "b.example"]);
    }

    #[test]
    fn unbalanced_braces_and_stray_markers_are_refused_with_the_line() {
        assert!(matches!(
            parse("a {\n"),
            Err(ChangeError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            parse(".:53 {\n}\n}\n"),
            Err(ChangeError::Syntax { line: 3, .. })
        ));
        assert!(matches!(
            parse(END),
            Err(ChangeError::Syntax { line: 1, .. })
        ));
        assert!(parse(&format!("{BEGIN}\n")).is_err());
    }

    #[test]
    fn a_merge_keeps_every_stock_line_and_adds_one_block_per_zone() {
        let merged = merge(KUBEADM, &region(&owned(), "10.96.0.53"), &owned()).unwrap();
        assert!(merged.starts_with(KUBEADM));
        let blocks = parse(&merged).unwrap().blocks;
        assert_eq!(blocks.iter().filter(|b| b.in_region).count(), 3);
        assert!(
            merged
                .contains("cluster.b:53 {\n    errors\n    cache 30\n    forward . 10.96.0.53\n}")
        );
    }

    #[test]
    fn merging_twice_gives_the_file_of_merging_once() {
        let once = merge(KUBEADM, &region(&owned(), "10.96.0.53"), &owned()).unwrap();
        let twice = merge(&once, &region(&owned(), "10.96.0.53"), &owned()).unwrap();
        assert_eq!(once, twice);
    }

    #[test]
    fn a_new_run_replaces_the_region_it_wrote_before() {
        let old = merge(KUBEADM, &region(&owned(), "10.96.0.53"), &owned()).unwrap();
        let fewer = vec!["cluster.a".to_string()];
        let new = merge(&old, &region(&fewer, "10.96.0.54"), &fewer).unwrap();
        assert_eq!(new, format!("{KUBEADM}{}", region(&fewer, "10.96.0.54")));
    }

    #[test]
    fn an_operators_block_for_an_owned_zone_is_refused_naming_its_line() {
        let text = format!("{KUBEADM}cluster.b:53 {{\n    forward . 10.9.0.1\n}}\n");
        let line = KUBEADM.lines().count() + 1;
        match merge(&text, &region(&owned(), "10.96.0.53"), &owned()) {
            Err(ChangeError::Conflict { place, zone, .. }) => {
                assert_eq!(place, format!("line {line}: \"cluster.b:53 {{\""));
                assert_eq!(zone, "cluster.b");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_block_inside_or_around_an_owned_zone_is_refused_and_the_root_is_not() {
        assert!(overlaps("db.cluster.a", "cluster.a"));
        assert!(overlaps("local", "distributed.local"));
        assert!(!overlaps(".", "cluster.a"));
        assert!(!overlaps("xcluster.a", "cluster.a"));
        let text = "svc.distributed.local {\n  whoami\n}\n";
        assert!(matches!(
            merge(text, "", &owned()),
            Err(ChangeError::Conflict { .. })
        ));
    }

    #[test]
    fn a_file_without_a_final_newline_keeps_its_last_line_whole() {
        let merged = merge(".:53 {\n whoami\n}", "R\n", &owned()).unwrap();
        assert_eq!(merged, ".:53 {\n whoami\n}\nR\n");
    }
}
