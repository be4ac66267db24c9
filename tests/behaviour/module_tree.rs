//! The top-level modules form a tree, not a circle (docs/design.md's layering: lower layers own
//! their types, upper layers import them). This test reads every file under `src/`, finds
//! which top-level module each one belongs to (`src/X.rs` and `src/X/**` are module `X`), and
//! draws an edge X → Y for every `crate::Y` path in X's code (comments and string literals
//! left out; `use crate::{Y, …}` groups included; `super::` stays inside X). Any cycle fails
//! the test and is printed, e.g. `metrics → cache → metrics`.
//!
//! The graph is the one of the code that ships: items under `#[cfg(test)]` (unit tests, and
//! the files of `#[cfg(test)] mod x;`) are left out of it, and their extra edges printed
//! apart. The crate root (`lib.rs`, which declares every module and whose `run` wires them
//! together) and the binary (`main.rs`) are not modules of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to; `None` for the crate root and the binary.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

/// The code of a Rust file with comments, string literals and character literals blanked
/// out, so that a `crate::x` in a doc comment or a message is not taken for a dependency.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (at(i + 1) == '"' || (at(i + 1) == '#' && !at(i.wrapping_sub(1)).is_alphanumeric()))
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c == '"' {
            i = after_quoted(&chars, i);
            out.push_str("\"\"");
        } else if c == '\'' && (at(i + 2) == '\'' || (at(i + 1) == '\\')) {
            // A character literal ('x', '\n', '\u{…}'); a lifetime ('a) has no closing quote.
            i = after_quoted(&chars, i);
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The index after the literal that opens with the quote at `start` (escapes skipped).
fn after_quoted(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment after each `crate::` in `code`: `crate::wire::x` gives `wire`,
/// `crate::{cache::Cache, wire}` gives `cache` and `wire`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut from = 0;
    while let Some(offset) = code[from..].find("crate") {
        let start = from + offset;
        from = start + "crate".len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == '$') {
            continue;
        }
        let rest = code[from..].trim_start();
        let Some(rest) = rest.strip_prefix("::") else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // The first segment of each path at the group's top level.
            let mut depth = 0;
            let mut expect_segment = true;
            let mut segment = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_segment = true,
                    _ if expect_segment && is_ident(c) => segment.push(c),
                    _ if expect_segment && !segment.is_empty() => {
                        found.insert(std::mem::take(&mut segment));
                        expect_segment = false;
                    }
                    _ => {}
                }
            }
            if !segment.is_empty() {
                found.insert(segment);
            }
        } else {
            let segment: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !segment.is_empty() {
                found.insert(segment);
            }
        }
    }
    found
}

/// The end of the item that starts at `from` in `code`: after its `;`, or after the `}`
/// matching its first `{`, whichever comes first.
fn item_end(code: &str, from: usize) -> usize {
    let mut depth = 0usize;
    for (offset, c) in code[from..].char_indices() {
        match c {
            ';' if depth == 0 => return from + offset + 1,
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return from + offset + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` split into what is compiled always and what only under `#[cfg(test)]`, and the
/// names of the `#[cfg(test)] mod x;` declared in it (their files are test code too).
fn split_test_code(code: &str) -> (String, String, Vec<String>) {
    const GATE: &str = "#[cfg(test)]";
    let (mut shipped, mut test, mut test_files) = (String::new(), String::new(), Vec::new());
    let mut from = 0;
    while let Some(offset) = code[from..].find(GATE) {
        let start = from + offset;
        shipped.push_str(&code[from..start]);
        let end = item_end(code, start + GATE.len());
        let item = &code[start + GATE.len()..end];
        if let Some(declared) = item.trim().strip_prefix("mod ")
            && let Some(name) = declared.trim().strip_suffix(';')
        {
            test_files.push(name.trim().to_string());
        }
        test.push_str(item);
        from = end;
    }
    shipped.push_str(&code[from..]);
    (shipped, test, test_files)
}

/// The files a `mod name;` in `file` refers to (`name.rs` or `name/`), as path prefixes.
fn declared_module_paths(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = match file.file_name().and_then(|f| f.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().map(Path::to_path_buf),
        _ => file.with_extension("").into(),
    }
    .unwrap_or_default();
    [dir.join(format!("{name}.rs")), dir.join(name)]
}

/// The module graphs of `src/`: for each top-level module, the other modules it refers to,
/// from the code that ships, and from its `#[cfg(test)]` code.
struct Graphs {
    shipped: BTreeMap<String, BTreeSet<String>>,
    test_only: BTreeMap<String, BTreeSet<String>>,
}

fn module_graphs() -> Graphs {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let empty: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let mut graphs = Graphs {
        shipped: empty.clone(),
        test_only: empty,
    };
    let mut parts = Vec::new();
    let mut test_paths: Vec<PathBuf> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let (shipped, test, test_files) = split_test_code(&code_only(&text));
        for name in test_files {
            test_paths.extend(declared_module_paths(file, &name));
        }
        parts.push((file, shipped, test));
    }
    for (file, shipped, test) in parts {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let (shipped, test) = if test_paths.iter().any(|p| file.starts_with(p)) {
            (String::new(), shipped + &test)
        } else {
            (shipped, test)
        };
        for (code, graph) in [
            (shipped, &mut graphs.shipped),
            (test, &mut graphs.test_only),
        ] {
            for target in crate_paths(&code) {
                // Items of the crate root (`crate::run`) are not modules; `super::` never
                // leaves a module's own files, so it adds no edge.
                if target != module && modules.contains(&target) {
                    graph.get_mut(&module).expect("every module").insert(target);
                }
            }
        }
    }
    for (module, targets) in &mut graphs.test_only {
        targets.retain(|t| !graphs.shipped[module].contains(t));
    }
    graphs
}

/// A cycle of `graph`, as the list of modules around it (first repeated at the end).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_string(), Mark::OnPath);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::OnPath => {
                    let start = path.iter().position(|m| m == next).expect("on the path");
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, graph, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

fn edges(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .filter(|(_, to)| !to.is_empty())
        .map(|(from, to)| {
            let to: Vec<&str> = to.iter().map(String::as_str).collect();
            format!("  {from} → {}", to.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_top_level_modules_form_no_cycle() {
    let Graphs { shipped, test_only } = module_graphs();
    println!("module graph:\n{}", edges(&shipped));
    println!("edges added by #[cfg(test)] code:\n{}", edges(&test_only));
    if let Some(cycle) = find_cycle(&shipped) {
        panic!(
            "module cycle: {}\nwhole graph:\n{}",
            cycle.join(" → "),
            edges(&shipped)
        );
    }
}

#[test]
fn the_reader_sees_paths_in_code_not_in_comments_or_strings() {
    let code = code_only(
        "use crate::{cache::Cache, wire};\n\
         // crate::metrics in a comment\n\
         /// [`crate::route`] in a doc link\n\
         let s = \"crate::query\"; let r = r#\"crate::gather\"#; let c = '\"';\n\
         pub(crate) fn f<'a>(x: &'a str) { crate::reply::servfail(x); $crate::snapshot }",
    );
    let found: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(found, ["cache", "reply", "wire"]);
}

#[test]
fn test_only_code_is_told_apart() {
    let (shipped, test, files) = split_test_code(
        "use crate::wire;\n#[cfg(test)]\nmod tests;\nfn f() {}\n\
         #[cfg(test)]\nmod inline { use crate::metrics; fn g() { if x { crate::cache::y() } } }\n\
         use crate::reply;",
    );
    assert_eq!(files, ["tests"]);
    let shipped: Vec<String> = crate_paths(&shipped).into_iter().collect();
    let test: Vec<String> = crate_paths(&test).into_iter().collect();
    assert_eq!(shipped, ["reply", "wire"]);
    assert_eq!(test, ["cache", "metrics"]);
    let declared = declared_module_paths(Path::new("/s/src/cache/mod.rs"), "tests");
    assert_eq!(declared[0], Path::new("/s/src/cache/tests.rs"));
    let declared = declared_module_paths(Path::new("/s/src/reply.rs"), "tests");
    assert_eq!(declared[0], Path::new("/s/src/reply/tests.rs"));
}

#[test]
fn a_cycle_is_found_and_named() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(from, to)| {
        (
            from.to_string(),
            to.into_iter().map(str::to_string).collect(),
        )
    })
    .collect();
    assert_eq!(
        find_cycle(&graph).map(|c| c.join(" → ")),
        Some("a → b → c → a".to_string())
    );
    let mut tree = graph.clone();
    tree.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&tree), None);
}
