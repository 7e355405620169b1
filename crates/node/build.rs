//! Names the git commit gtd is built from, for `gtd_build_info{commit}`: `GTD_COMMIT` is
//! `git rev-parse HEAD` when the repository around this crate has a `.git` (a clone or a worktree) and git answers,
//! else `unknown` (a source tarball, a crate download, no git installed). Nothing else: no code
//! is generated here (the etcd client's is checked in, see Cargo.toml).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    // This crate sits two folders below the repository's root (crates/node).
    let root =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo")).join("../..");
    // Without this line cargo would run the script again whenever any file of the package
    // changed; with it, only when this file or one of the git files below does.
    println!("cargo::rerun-if-changed=build.rs");
    let commit = if root.join(".git").exists() {
        watch_head(&root);
        git(&root, &["rev-parse", "--verify", "HEAD"])
            .filter(|c| c.len() >= 7 && c.bytes().all(|b| b.is_ascii_hexdigit()))
    } else {
        None
    };
    println!(
        "cargo::rustc-env=GTD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}

/// Asks cargo to run this again when HEAD moves: HEAD itself (a checkout), the branch it names
/// (a commit) and packed-refs (a branch packed by `git gc`). Only files that exist are named:
/// cargo runs a script every time when a named file is missing.
fn watch_head(root: &Path) {
    let mut paths = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    for p in paths {
        // In a worktree HEAD is in the worktree's git dir, branches in the common one:
        // `--git-path` knows which.
        if let Some(path) = git(root, &["rev-parse", "--git-path", &p]) {
            let path = root.join(path);
            if path.exists() {
                println!("cargo::rerun-if-changed={}", path.display());
            }
        }
    }
}

/// `git -C root ARGS`'s first line of output, when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim();
    (out.status.success() && !line.is_empty()).then(|| line.to_owned())
}
