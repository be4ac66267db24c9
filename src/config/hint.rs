//! Hints for the common slips an operator makes (docs/design.md, "A configuration that cannot
//! be meant is refused"): the name meant when a typo is a few letters off, the cluster name a
//! misspelt `MESHDNS_LOCAL_CLUSTER` stands for, quotes copied from a shell into an env file or
//! a ConfigMap, and items separated by spaces where a list takes commas.
//!
//! Each hint is a sentence the caller appends to its reason, so the message still names the
//! variable and the token first. It owns the wording of the hints and decides nothing: whether
//! a value is refused is the caller's (the kinds, the clusters grammar, the cross-checks).

/// The candidate `word` most likely stands for: the closest by edit distance, at most a third
/// of the word's length off; or a candidate that `word` ends or starts with on a `-` boundary
/// (`cluster-a` for `a`, `a-prod` for `a`). `None` when nothing is close (a word of one or two
/// letters is close to nothing but its affixes: every short name is a letter away from it).
pub(super) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let bound = word.len() / 3;
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let affix =
            word.ends_with(&format!("-{candidate}")) || word.starts_with(&format!("{candidate}-"));
        let distance = if affix {
            0
        } else {
            edit_distance(word, candidate)
        };
        if distance <= bound && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance over bytes.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Why a value that starts or ends with a quote is refused: no variable takes one, so the
/// quotes were copied from a shell line (`MESHDNS_CLUSTERS="a=…"`) into a file that takes the
/// value as it is (an env file, a ConfigMap). `None` for a value without quotes at its ends.
pub(super) fn copied_quotes(value: &str) -> Option<String> {
    let value = value.trim();
    let quoted = |c: char| value.starts_with(c) || value.ends_with(c);
    ['"', '\''].into_iter().find(|c| quoted(*c)).map(|quote| {
        let unquoted = value.trim_matches(quote);
        format!(
            "is in quotes: the quotes were copied into the value (an env file or a ConfigMap takes everything after '=' as it is, quotes included); write {unquoted} without them"
        )
    })
}

/// Why a list item with spaces inside is refused: the items of a comma list were separated by
/// spaces. `None` for an item without inner whitespace.
pub(super) fn spaces_in_list(item: &str) -> Option<String> {
    let words: Vec<&str> = item.split_whitespace().collect();
    (words.len() > 1).then(|| {
        format!(
            "has spaces between items: separate them with ',' ({})",
            words.join(",")
        )
    })
}

/// Why an address that ends in `:` is refused: the port after it is missing.
pub(super) fn missing_port(token: &str) -> Option<String> {
    token.strip_suffix(':').map(|host| {
        format!("ends with ':' but names no port: write {host}:PORT, or leave the ':' out for the default port")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_name_is_a_typo_or_an_affix_away() {
        let names = ["a", "b", "east", "west-2"];
        assert_eq!(closest("cluster-a", names), Some("a"));
        assert_eq!(closest("a-prod", names), Some("a"));
        assert_eq!(closest("eas", names), Some("east"));
        assert_eq!(closest("west-3", names), Some("west-2"));
        assert_eq!(
            closest("c", names),
            None,
            "every short name is a letter away"
        );
        assert_eq!(closest("europe", names), None);
        assert_eq!(closest("x", Vec::<&str>::new()), None);
    }

    #[test]
    fn quotes_at_either_end_are_copied_quotes() {
        assert!(
            copied_quotes("\"a=10.8.0.1\"")
                .unwrap()
                .contains("write a=10.8.0.1 ")
        );
        assert!(copied_quotes("'2s'").is_some());
        assert!(copied_quotes("a=10.8.0.1\"").is_some());
        assert_eq!(copied_quotes("a=10.8.0.1"), None);
    }

    #[test]
    fn spaces_inside_an_item_suggest_commas() {
        assert!(
            spaces_in_list("10.0.0.0/8 192.168.0.0/16")
                .unwrap()
                .contains("(10.0.0.0/8,192.168.0.0/16)")
        );
        assert_eq!(spaces_in_list("10.0.0.0/8"), None);
    }
}
