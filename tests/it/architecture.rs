//! The invariants of ARCHITECTURE.md that a machine can check: which room may
//! name which, that prost types stay in the cluster room, and that every module
//! says in its first line what it owns.

use std::path::{Path, PathBuf};

/// One rule: files under `room` must not name any of `forbidden`.
struct Rule {
    room: &'static str,
    forbidden: &'static [&'static str],
    why: &'static str,
}

/// What a pure room (the model, the pages) may not name: no other room, no
/// I/O, no threads, no async.
const PURE: &[&str] = &[
    "crate::engine",
    "crate::storage",
    "crate::cluster",
    "crate::solve",
    "cli::",
    "tokio",
    "tonic",
    "prost",
    "rayon",
    "std::fs",
    "std::net",
    "std::thread",
];

const RULES: &[Rule] = &[
    Rule {
        room: "src/model/",
        forbidden: PURE,
        why: "the model and rules are pure: no other room, no I/O, no threads, no async",
    },
    Rule {
        room: "src/engine/",
        forbidden: &["crate::storage", "crate::cluster", "crate::solve", "cli::", "tokio", "tonic", "prost"],
        why: "the engine defines its seams and names no room that implements them, nor async",
    },
    Rule {
        room: "src/page/",
        forbidden: PURE,
        why: "the pages are strings built from the model's types: no I/O, no other room",
    },
    Rule {
        room: "src/storage/",
        forbidden: &["crate::cluster", "crate::solve", "cli::", "tokio", "tonic", "prost"],
        why: "storage implements the engine's seams and knows nothing of the cluster or the CLI",
    },
];

/// What no room writes with: `println!` and `print!` (and their stderr
/// twins) panic when the reader has gone (`sokoshard levels FILE | head`);
/// the library writes to neither, and the CLI writes through `outln!` and
/// `out!`, which return the error, and `errln!`, which drops it.
const PANICKING_PRINTS: Rule = Rule {
    room: "src/",
    forbidden: &["println!", "print!", "eprintln!", "eprint!"],
    why: "a print that panics on a closed pipe: the CLI writes through outln!/out!/errln!, the library not at all",
};

/// `proto::` may be named only inside the cluster room.
const PROTO_ROOM: &str = "src/cluster/";

/// Every source file of the crate, relative to the repository root.
fn sources(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("src"), &mut out);
    out.sort();
    out
}

/// The code of a file without its comments (line comments and doc comments;
/// the crate uses no block comments), so that prose may name anything, and
/// without its unit-test module (`#[cfg(test)] mod tests`, last in a file),
/// whose fixtures may read files and build what other rooms build.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| lines[i].trim() == "#[cfg(test)]" && lines.get(i + 1).is_some_and(|l| l.trim() == "mod tests {"))
        .unwrap_or(lines.len());
    lines
        .into_iter()
        .take(end)
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
}

/// True when `word` stands in `line` as a name, not as part of a longer one.
fn names(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        let starts_path = word.ends_with("::") || after.is_none_or(|c| !ident(c));
        before.is_none_or(|c| !ident(c) || word.starts_with("crate::") && c == ':') && starts_path
    })
}

/// Every broken rule in `file` (its path relative to the root, with `/`).
fn violations_of(file: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !text.starts_with("//!") {
        out.push(format!("{file}: the module does not open with a //! line saying what it owns"));
    }
    for rule in RULES.iter().chain([&PANICKING_PRINTS]).filter(|r| file.starts_with(r.room)) {
        for (n, line) in code_lines(text) {
            for word in rule.forbidden.iter().filter(|w| names(line, w)) {
                out.push(format!("{file}:{n}: names `{word}` ({})", rule.why));
            }
        }
    }
    if !file.starts_with(PROTO_ROOM) {
        for (n, line) in code_lines(text) {
            if names(line, "proto::") {
                out.push(format!("{file}:{n}: names `proto::` outside {PROTO_ROOM} (prost types stay in the cluster)"));
            }
        }
    }
    out
}

#[test]
fn rooms_name_only_what_architecture_md_allows() {
    let root = crate::common::repo("");
    let files = sources(&root);
    assert!(files.len() > 40, "too few sources found under {}: {}", root.display(), files.len());
    let mut broken = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        broken.extend(violations_of(&rel, &std::fs::read_to_string(path).unwrap()));
    }
    assert!(broken.is_empty(), "{} broken invariants:\n{}", broken.len(), broken.join("\n"));
}

/// The checker itself catches what it is for: each rule, the proto edge and the
/// module line, and lets comments and longer names through.
#[test]
fn the_invariants_check_catches_forbidden_names() {
    let ok = "//! owns things\nuse super::x;\n// crate::storage in a comment is prose\n";
    assert!(violations_of("src/engine/a.rs", ok).is_empty());
    let bad = |file: &str, line: &str| violations_of(file, &format!("//! owns things\n{line}\n"));
    assert_eq!(bad("src/engine/a.rs", "use crate::storage::mem::MemStore;").len(), 1);
    assert_eq!(bad("src/engine/a.rs", "use crate::cluster::ClusterError;").len(), 1);
    assert_eq!(bad("src/engine/a.rs", "let rt = tokio::runtime::Handle::current();").len(), 1);
    assert_eq!(bad("src/engine/a.rs", "fn f() -> tonic::Status { todo!() }").len(), 1);
    assert_eq!(bad("src/model/b.rs", "use rayon::prelude::*;").len(), 1);
    assert_eq!(bad("src/model/b.rs", "let t = std::fs::read(p);").len(), 1);
    assert_eq!(bad("src/storage/c.rs", "use crate::cluster::proto::Foo;").len(), 2);
    assert_eq!(bad("src/cli/d.rs", "use sokoshard::cluster::proto::HelloRequest;").len(), 1);
    assert!(bad("src/cluster/e.rs", "use super::proto::*;").is_empty());
    assert_eq!(bad("src/cli/f.rs", "println!(\"{x}\");").len(), 1);
    assert_eq!(bad("src/main.rs", "print!(\"{x}\");").len(), 1);
    assert_eq!(bad("src/cli/f.rs", "eprintln!(\"{x}\");").len(), 1);
    assert!(bad("src/cli/f.rs", "errln!(\"{x}\"); outln!(\"{x}\")?;").is_empty());
    // longer names that merely contain a forbidden one
    assert!(bad("src/engine/a.rs", "let prosty = my_tokio_like;").is_empty());
    assert_eq!(violations_of("src/engine/a.rs", "use super::x;\n").len(), 1, "no //! line");
    // a unit-test module's fixtures are not the room's code
    let with_tests = "//! owns things\n#[cfg(test)]\nmod tests {\n    use crate::solve::build_tables;\n}\n";
    assert!(violations_of("src/storage/c.rs", with_tests).is_empty());
}
