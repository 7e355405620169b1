//! Inside each crate, modules import each other in no circle larger than two files and in none
//! across folders (issue 37): a helper several modules share lives in a room of its own below
//! them, not in one of its users. The crate graph itself is the compiler's to check
//! (docs/design.md §2, "The crates"); this reads the modules' `use` lines and paths. And no
//! function outside tests runs over 150 lines: a long one is split by concern.
//!
//! An import is any path a file names that resolves to another module file of its crate:
//! `use crate::a::b`, `use super::{a, b}`, `super::a::f()`, `child::f()`. A module naming the
//! modules below it (a `mod.rs` or `lib.rs` declaring, re-exporting or calling them) is their
//! front, not a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src`, by module path (`a/mod.rs` and `a.rs` are both `a`).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// The text with comments, string and character literals blanked (so that words in them are
/// not read as paths).
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + find(rest, b"*/").map_or(rest.len(), |p| p + 2)
        } else if rest[0] == b'r'
            && (i == 0 || !is_word(b[i - 1]))
            && rest[1..]
                .iter()
                .position(|&c| c != b'#')
                .map(|p| rest[1 + p])
                == Some(b'"')
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let open = 2 + hashes;
            i + open + find(&rest[open..], &close).map_or(rest.len() - open, |p| p + close.len())
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else if rest[0] == b'\'' && rest.len() > 2 && (rest[2] == b'\'' || rest[1] == b'\\') {
            // A character literal ('a', '\n', '\u{..}'), not a lifetime.
            i + 1
                + rest[1..]
                    .iter()
                    .skip(1)
                    .position(|&c| c == b'\'')
                    .map_or(1, |p| p + 2)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &b[i..end]);
        i = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    fn walk(prefix: &str, s: &str, out: &mut Vec<String>) {
        let (mut depth, mut start) = (0, 0);
        let mut parts = Vec::new();
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            match (part.find('{'), part.rfind('}')) {
                (Some(open), Some(close)) => walk(
                    &format!("{prefix}{}", &part[..open]),
                    &part[open + 1..close],
                    out,
                ),
                _ => out.push(format!("{prefix}{part}")),
            }
        }
    }
    walk("", &tree, &mut out);
    out
}

/// Every path in `code` that may name a module of the crate: those of `use` items, and those
/// written in place starting with `crate`, `super`, `self` or a word (a child's name).
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(end) = rest.find(';') {
            out.extend(expand(&rest[..end]));
        }
    }
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if is_word(b[i]) && (i == 0 || !(is_word(b[i - 1]) || b[i - 1] == b':')) {
            let mut j = i;
            while j < b.len() && (is_word(b[j]) || (b[j] == b':' && b.get(j + 1) == Some(&b':'))) {
                j += if b[j] == b':' { 2 } else { 1 };
            }
            let path = &code[i..j];
            if path.contains("::") {
                out.push(path.to_owned());
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The module file `path`, written in `from`, names (its longest prefix that is one).
fn resolve(from: &Module, path: &str, files: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let path = path.split(" as ").next().unwrap_or(path);
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (mut at, rest): (Module, &[&str]) = match segs.first().copied()? {
        "crate" => (Vec::new(), &segs[1..]),
        "super" | "self" => {
            let mut at = from.clone();
            let mut k = 0;
            while let Some(&s) = segs.get(k).filter(|s| **s == "super" || **s == "self") {
                if s == "super" {
                    at.pop();
                }
                k += 1;
            }
            (at, &segs[k..])
        }
        first => {
            let mut child = from.clone();
            child.push(first.to_owned());
            if !files.contains_key(&child) {
                return None;
            }
            (from.clone(), &segs[..])
        }
    };
    for s in rest {
        at.push((*s).to_owned());
        if !files.contains_key(&at) {
            at.pop();
            break;
        }
    }
    Some(at)
}

fn graph(
    src: &Path,
) -> (
    BTreeMap<Module, PathBuf>,
    BTreeMap<Module, BTreeSet<Module>>,
) {
    let files = modules(src);
    let mut edges = BTreeMap::new();
    for (module, file) in &files {
        let text = code(&std::fs::read_to_string(file).expect("source"));
        // A `#[cfg(test)] mod NAME { … }` in the file is a module below it: its `super` is
        // the file's module, not the one above.
        let mut outside = text.clone().into_bytes();
        let mut written = Vec::new();
        for (at, name, end) in test_modules(&text) {
            let inner: Module = module.iter().cloned().chain([name]).collect();
            written.extend(
                paths(&text[at..=end])
                    .into_iter()
                    .map(|p| (inner.clone(), p)),
            );
            outside[at..=end].fill(b' ');
        }
        let outside = String::from_utf8(outside).expect("blanked with spaces");
        written.extend(paths(&outside).into_iter().map(|p| (module.clone(), p)));
        let mut to = BTreeSet::new();
        for (from, path) in written {
            if let Some(target) = resolve(&from, &path, &files)
                && target != *module
                && files.contains_key(&target)
                // A module naming those below it is their front, not an import circle.
                && !target.starts_with(module)
            {
                to.insert(target);
            }
        }
        edges.insert(module.clone(), to);
    }
    (files, edges)
}

/// The strongly connected components of `edges` (Tarjan).
fn components(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in &s.edges[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The circles of `src` larger than two files or across folders, in words.
fn circles(src: &str) -> Vec<String> {
    let (files, edges) = graph(&root().join(src));
    let mut out = Vec::new();
    for component in components(&edges) {
        let folders: BTreeSet<_> = component.iter().map(|m| files[m].parent()).collect();
        if component.len() > 2 || (component.len() == 2 && folders.len() > 1) {
            let members: Vec<String> = component
                .iter()
                .map(|m| {
                    let names: Vec<String> = edges[m]
                        .iter()
                        .filter(|t| component.contains(t))
                        .map(|t| t.join("/"))
                        .collect();
                    format!("{} -> {}", m.join("/"), names.join(", "))
                })
                .collect();
            out.push(format!("{src}: {}", members.join("; ")));
        }
    }
    out
}

#[test]
fn no_import_circle_larger_than_two_files_or_across_folders() {
    let found: Vec<String> = [
        "crates/core/src",
        "crates/sim/src",
        "crates/fleet/src",
        "crates/node/src",
        "crates/demo/src",
        "src",
    ]
    .into_iter()
    .flat_map(circles)
    .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_reader_sees_a_circle() {
    // The check itself: three files importing in a ring, one by `use`, one by a path in
    // place, one through braces, are one circle; strings and comments are not read.
    let dir = tempfile::tempdir().expect("temp dir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write("a.rs", "use crate::b::f;\n// use crate::c;\n");
    write(
        "b.rs",
        "pub fn f() { super::c::g(); let _ = \"crate::a::x\"; }\n",
    );
    write("c.rs", "use super::{a::{self}, b};\npub fn g() {}\n");
    let (_, edges) = graph(dir.path());
    let ring: Vec<_> = components(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    assert_eq!(ring.len(), 1, "{edges:?}");
    assert_eq!(ring[0].len(), 3, "{edges:?}");
    let a = vec!["a".to_owned()];
    let c = vec!["c".to_owned()];
    assert!(!edges[&a].contains(&c), "a comment is not an import");

    // A file's own test module: its `super` is the file, not the module above the file.
    write("lib.rs", "mod a;\nmod d;\n");
    write("d.rs", "mod e;\n");
    std::fs::create_dir_all(dir.path().join("d")).unwrap();
    write(
        "d/e.rs",
        "pub fn h() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::g;\n}\n",
    );
    write("a.rs", "use crate::d::e::h;\n");
    // `#[cfg(test)] mod t;` declares a file: the function after it is the file's own code.
    write(
        "d.rs",
        "mod e;\n#[cfg(test)]\nmod t;\npub fn k() { super::a::x(); }\n",
    );
    write("d/t.rs", "");
    let (_, edges) = graph(dir.path());
    let e = vec!["d".to_owned(), "e".to_owned()];
    let d = vec!["d".to_owned()];
    assert!(
        edges[&d].contains(&a),
        "code after a cfg(test) file module is read as the file's: {edges:?}"
    );
    assert_eq!(
        edges[&e].iter().collect::<Vec<_>>(),
        vec![&d],
        "only `super::super` of the test module names d"
    );
}

/// The longest a function outside tests may be, signature to closing brace.
const MAX_LINES: usize = 150;

/// The index of the brace closing the one at `open`.
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The `#[cfg(test)] mod NAME { … }` blocks of `text` (already through [`code`]): where each
/// starts, its name, and where its closing brace is.
fn test_modules(text: &str) -> Vec<(usize, String, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let rest = &text[at..];
        // `#[cfg(test)] mod NAME {`: a `;` first is a file module (`mod tests;`) or another
        // item, and what follows it is not a test module.
        if let Some(open) = rest
            .find(['{', ';'])
            .filter(|&i| rest.as_bytes()[i] == b'{')
            && let Some(m) = rest[..open].find("mod ")
        {
            let name = rest[m + 4..open].trim().to_owned();
            out.push((at, name, closing(b, at + open)));
        }
        from = at + 1;
    }
    out
}

/// Every function of `src` over [`MAX_LINES`] outside `#[cfg(test)]` modules and `tests.rs`
/// files, as `FILE:LINE NAME (N lines)`.
fn long_functions(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for file in modules(&root().join(src)).into_values() {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = code(&std::fs::read_to_string(&file).expect("source"));
        let b = text.as_bytes();
        let tests: Vec<(usize, usize)> = test_modules(&text)
            .into_iter()
            .map(|(a, _, z)| (a, z))
            .collect();
        let mut from = 0;
        while let Some(at) = text[from..].find("fn ") {
            let at = from + at;
            from = at + 3;
            if at > 0 && is_word(b[at - 1]) || tests.iter().any(|&(a, z)| a <= at && at <= z) {
                continue;
            }
            // The body: the first `{` after the signature outside parentheses and brackets,
            // unless a `;` ends a declaration first.
            let mut depth = 0_i32;
            let mut body = None;
            for (i, &c) in b.iter().enumerate().skip(at) {
                match c {
                    b'(' | b'[' => depth += 1,
                    b')' | b']' => depth -= 1,
                    b'{' if depth == 0 => {
                        body = Some(i);
                        break;
                    }
                    b';' if depth == 0 => break,
                    _ => {}
                }
            }
            let Some(open) = body else { continue };
            let end = closing(b, open);
            let lines = text[at..=end.min(b.len() - 1)].lines().count();
            if lines > MAX_LINES {
                let line = text[..at].lines().count() + 1;
                let name: String = text[at + 3..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(format!(
                    "{}:{line} {name} ({lines} lines)",
                    file.strip_prefix(root()).unwrap_or(&file).display()
                ));
            }
        }
    }
    out
}

#[test]
fn no_function_over_150_lines_outside_tests() {
    let found: Vec<String> = [
        "crates/core/src",
        "crates/sim/src",
        "crates/fleet/src",
        "crates/node/src",
        "crates/demo/src",
        "src",
        "sim",
    ]
    .into_iter()
    .flat_map(long_functions)
    .collect();
    assert!(
        found.is_empty(),
        "functions over {MAX_LINES} lines (split them by concern):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_measure_finds_a_long_function() {
    // 160 lines between the signature and the closing brace, and a shorter one in a test
    // module that does not count.
    let dir = tempfile::tempdir().expect("temp dir");
    let body = "    let _x = 1;\n".repeat(158);
    let text = format!(
        "fn long() {{\n{body}}}\n\nfn short() -> &'static str {{ \"}}\" }}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n"
    );
    std::fs::write(dir.path().join("lib.rs"), text).expect("write");
    // An absolute path: `root().join` keeps it as it is.
    let found = long_functions(&dir.path().display().to_string());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("long (160 lines)"), "{found:?}");
}
