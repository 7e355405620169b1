//! deploy/container: the Containerfile and .dockerignore.

use super::*;

/// A Containerfile's instructions as (INSTRUCTION, arguments), comments dropped and continuation
/// lines joined; the parser directive (`# syntax=`) is a comment here.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (pending.is_empty() && t.is_empty()) {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending) + t;
        let (op, rest) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
        out.push((op.to_ascii_uppercase(), rest.trim().to_owned()));
    }
    assert!(pending.is_empty(), "a continuation at the end");
    out
}

/// An exec-form (JSON array) ENTRYPOINT or CMD.
fn exec_form(v: &str, what: &str) -> Vec<String> {
    serde_json::from_str(v).unwrap_or_else(|e| panic!("{what} is not a JSON array ({e}): {v}"))
}

#[test]
fn containerfile_is_multi_stage_non_root_with_the_binaries_only() {
    let text = read("deploy/container/Containerfile");
    let all = instructions(&text);
    let stages: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert!(stages.len() >= 2, "multi-stage: {} FROM", stages.len());
    let builder = &all[stages[0]].1;
    let (base, name) = builder
        .split_once(" AS ")
        .or_else(|| builder.split_once(" as "))
        .expect("the build stage is named (FROM ... AS name)");
    assert_eq!(base.trim(), "rust:1-bookworm");
    let name = name.trim();
    let build = &all[stages[0] + 1..stages[stages.len() - 1]];
    let runs: String = build
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    // The shipped profile (whole-program LTO), and nothing installed for the build: the etcd
    // client's generated code is in the repository, so no protoc.
    assert!(
        runs.contains("cargo build --profile dist"),
        "the build stage builds the dist profile: {runs}"
    );
    for unneeded in ["protobuf-compiler", "libprotobuf-dev", "apt-get"] {
        assert!(
            !runs.contains(unneeded),
            "the build stage needs no {unneeded}"
        );
    }
    let cargo = runs
        .split("cargo build")
        .nth(1)
        .and_then(|r| r.split("&&").next())
        .expect("cargo build");
    let bins: BTreeSet<&str> = cargo
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--bin")
        .map(|w| w[1])
        .collect();
    assert_eq!(bins, BTreeSet::from(["gtd", "sim"]), "cargo build {cargo}");

    let last = &all[stages[stages.len() - 1]..];
    let base = &last[0].1;
    assert!(
        base.starts_with("debian:bookworm-slim") || base.starts_with("gcr.io/distroless/cc"),
        "a small runtime base: {base}"
    );
    // Nothing from the build context: only the two binaries, from the build stage.
    assert!(
        !last.iter().any(|(op, _)| op == "ADD"),
        "no ADD in the runtime stage"
    );
    let copies: Vec<&str> = last
        .iter()
        .filter(|(op, _)| op == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    assert!(!copies.is_empty(), "the runtime stage copies the binaries");
    let mut copied = BTreeSet::new();
    for c in copies {
        let words: Vec<&str> = c.split_whitespace().collect();
        assert_eq!(
            words.first().copied(),
            Some(format!("--from={name}").as_str()),
            "COPY {c}: only from the build stage"
        );
        let paths: Vec<&str> = words[1..]
            .iter()
            .copied()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let (dest, sources) = paths.split_last().expect("COPY SRC... DEST");
        assert_eq!(*dest, "/usr/local/bin/", "COPY {c}");
        for s in sources {
            assert!(runs.contains(s), "COPY {s}: the build stage writes it");
            copied.insert(Path::new(s).file_name().expect("a file").to_owned());
        }
    }
    assert_eq!(
        copied,
        BTreeSet::from(["gtd".into(), "sim".into()]),
        "exactly the two binaries"
    );
    let value = |op: &str| {
        last.iter()
            .rev()
            .find(|(o, _)| o == op)
            .map(|(_, a)| a.as_str())
            .unwrap_or_else(|| panic!("the runtime stage has no {op}"))
    };
    let user = value("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user}: a numeric uid (runAsNonRoot checks it)"));
    assert_ne!(uid, 0, "USER {user}: not root");
    assert_eq!(value("WORKDIR"), "/etc/gtd");
    assert_eq!(
        exec_form(value("ENTRYPOINT"), "ENTRYPOINT"),
        ["/usr/local/bin/gtd"]
    );
    let cmd = exec_form(value("CMD"), "CMD");
    gtd_accepts(&cmd, "Containerfile CMD");
    let admin = flag(&cmd, "--admin").expect("CMD sets --admin (the exposed port)");
    let port = admin.rsplit(':').next().expect("IP:PORT");
    assert!(
        value("EXPOSE").split_whitespace().any(|p| p == port),
        "EXPOSE {} holds the admin port {port}",
        value("EXPOSE")
    );
    // The fleet cache's default directory exists, owned by the user.
    assert!(
        last.iter()
            .any(|(op, a)| op == "ENV" && a == "STATE_DIRECTORY=/var/lib/gtd"),
        "STATE_DIRECTORY"
    );
    assert!(
        runs_in(last).contains(&format!("-o {uid} ")) && runs_in(last).contains("/var/lib/gtd")
    );
}

fn runs_in(stage: &[(String, String)]) -> String {
    stage
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn containerfile_examples_parse() {
    // The `docker run IMAGE ARGS` lines of its comment, against the binary they run.
    let text = read("deploy/container/Containerfile");
    let mut seen = 0;
    for line in text.lines() {
        let Some(cmd) = line
            .trim_start_matches('#')
            .trim()
            .strip_prefix("docker run ")
        else {
            continue;
        };
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let image = words
            .iter()
            .position(|w| *w == "gtd")
            .expect("the image is called gtd");
        let args = strings(&words[image + 1..]);
        if cmd.contains("--entrypoint /usr/local/bin/sim") {
            parses_up_to_help(SIM, &args, line);
        } else if args.is_empty() {
            // The default command: checked as CMD.
        } else {
            gtd_accepts(&args, line);
        }
        seen += 1;
    }
    assert!(seen >= 3, "the Containerfile shows how to run it");
}

/// Whether a `.dockerignore` pattern (the simple forms used there) excludes `path`.
fn ignored(pattern: &str, path: &str) -> bool {
    if let Some(suffix) = pattern.strip_prefix('*') {
        return path.rsplit('/').next().is_some_and(|n| n.ends_with(suffix));
    }
    if let Some(name) = pattern.strip_prefix("**/") {
        return path.split('/').any(|c| c == name);
    }
    path == pattern || path.starts_with(&format!("{pattern}/"))
}

#[test]
fn dockerignore_keeps_what_the_build_needs_and_drops_the_rest() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    assert!(
        patterns.iter().all(|p| !p.starts_with('!')),
        "no exceptions"
    );
    let excluded = |path: &str| patterns.iter().any(|p| ignored(p, path));
    for gone in [
        "target",
        "fuzz/artifacts",
        "fuzz/target",
        ".git",
        "build.log",
    ] {
        assert!(excluded(gone), "{gone} stays out of the build context");
    }
    // Every file `cargo build --profile dist --locked` reads: the manifest, the lock file and each
    // target's sources (Cargo.toml names its benches, so they are needed too).
    let mut needed = vec![
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "src/lib.rs".to_owned(),
    ];
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    // Each crate of the workspace: its manifest, its library and the node's build script.
    for member in manifest["workspace"]["members"]
        .as_array()
        .expect("members")
    {
        let member = member.as_str().expect("member");
        if member != "." {
            needed.push(format!("{member}/Cargo.toml"));
            needed.push(format!("{member}/src/lib.rs"));
        }
    }
    needed.push("crates/node/build.rs".to_owned());
    for kind in ["bin", "bench"] {
        for t in manifest[kind].as_array().expect("targets") {
            needed.push(match t.get("path") {
                Some(p) => p.as_str().expect("path").to_owned(),
                None => format!("benches/{}.rs", t["name"].as_str().expect("name")),
            });
        }
    }
    for path in &needed {
        assert!(root().join(path).exists(), "{path} exists");
        assert!(!excluded(path), "{path} is needed by the build");
    }
}
