//! The differential suite (issue 28 item 9): every raw HTTP/1.1 request of
//! `tests/differential/corpus.toml` goes through gtd, nginx and HAProxy to a recording endpoint.
//! For each case gtd's answer and what reached the endpoint must be what the corpus expects of
//! gtd; where gtd does something neither anchor does, the corpus says why (`reason`). nginx's
//! and HAProxy's results are recorded beside, as the anchors the expectations were reviewed
//! against; one line per disagreement is printed at the end.
//!
//! One gtd node (in this process), one nginx, one HAProxy and one endpoint (a port per proxy)
//! serve every case; cases go one after the other, the three proxies of a case at once. A proxy
//! silent for 3 s counts as `timeout`.
//!
//! nginx and HAProxy are required under CI (`CI=true`); elsewhere a missing one skips the
//! suite with one line naming the package. `GTD_NGINX` and `GTD_HAPROXY` name other binaries.
//!
//! Re-record (after adding cases, or on another nginx/HAProxy):
//! `GTD_DIFFERENTIAL_RECORD=1 cargo test --test differential`. That rewrites the anchors'
//! results and fills in gtd's expectation only where a case has none yet; review those by hand
//! (an expectation is a decision about what gtd should do, not a recording of what it does).

#[path = "../common/mod.rs"]
mod common;

mod anchors;
mod backend;
mod corpus;
mod wire;

use std::collections::HashSet;
use std::io::Write as _;
use std::time::Duration;

use common::*;
use corpus::{Case, Corpus, Outcome};

const CORPUS: &str = "tests/differential/corpus.toml";

fn load() -> (String, Vec<Case>) {
    let path = root().join(CORPUS);
    let text = std::fs::read_to_string(&path).expect("read the corpus");
    let corpus: Corpus =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names = HashSet::new();
    for case in &corpus.case {
        assert!(names.insert(&case.name), "case {} twice", case.name);
    }
    (text, corpus.case)
}

/// Whether gtd's expectation differs from both anchors' recorded results.
fn differs_from_both(case: &Case) -> bool {
    match (&case.gtd, &case.nginx, &case.haproxy) {
        (Some(g), Some(n), Some(h)) => g != n && g != h,
        _ => false,
    }
}

#[test]
fn corpus_is_large_and_every_departure_from_both_anchors_says_why() {
    let (_, cases) = load();
    assert!(cases.len() >= 200, "{} cases, fewer than 200", cases.len());
    let unexplained: Vec<&str> = cases
        .iter()
        .filter(|c| differs_from_both(c) && c.reason.trim().is_empty())
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        unexplained.is_empty(),
        "gtd differs from both nginx and HAProxy without a `reason`: {unexplained:?}"
    );
}

/// Shortens an outcome for a one-line summary.
fn brief(o: &Outcome) -> String {
    let text = o.to_string();
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}…")
    } else {
        text
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_gtd_nginx_and_haproxy() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let nginx_bin = anchors::binary("nginx", "GTD_NGINX");
    let haproxy_bin = anchors::binary("haproxy", "GTD_HAPROXY");
    let (Some(nginx_bin), Some(haproxy_bin)) = (nginx_bin.clone(), haproxy_bin.clone()) else {
        let missing = if nginx_bin.is_none() {
            "nginx"
        } else {
            "haproxy"
        };
        assert!(
            !ci,
            "{missing} not found: the differential suite needs it under CI \
             (apt-get install {missing}, or set GTD_{})",
            missing.to_uppercase()
        );
        // Past the harness's capture, so that a skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "differential: skipped: install Debian's `{missing}` package to run it"
        );
        return;
    };
    let record = std::env::var_os("GTD_DIFFERENTIAL_RECORD").is_some_and(|v| v == "1");
    let (text, mut cases) = load();

    let endpoints = [
        backend::Recorder::start().await,
        backend::Recorder::start().await,
        backend::Recorder::start().await,
    ];
    let (nginx, haproxy) = tokio::task::block_in_place(|| {
        (
            anchors::nginx(&nginx_bin, endpoints[1].addr),
            anchors::haproxy(&haproxy_bin, endpoints[2].addr),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(endpoints[0].addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&config).await;
    let proxies = [listener_addr(&node, "web").await, nginx.addr, haproxy.addr];

    let mut observed: Vec<[Outcome; 3]> = Vec::with_capacity(cases.len());
    for case in &cases {
        let writes = corpus::expand(&case.request);
        let head = writes[0].starts_with(b"HEAD ");
        let exchange = |i: usize| wire::exchange(proxies[i], &writes, case.responses, head);
        let (g, n, h) = tokio::join!(exchange(0), exchange(1), exchange(2));
        // Whatever the endpoint still had on its way has had the client's last wait to arrive;
        // a moment more, then the endpoint's record of this case is closed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // A Host a proxy writes from the endpoint's address (for a client that sent none) is
        // written as `ENDPOINT`: the port changes from run to run.
        let [fg, fn_, fh] = [0, 1, 2].map(|i| {
            let addr = endpoints[i].addr.to_string();
            let records = endpoints[i].take();
            records
                .into_iter()
                .map(|r| r.replace(&addr, "ENDPOINT"))
                .collect::<Vec<_>>()
        });
        observed.push([
            Outcome {
                status: g,
                forwarded: fg,
            },
            Outcome {
                status: n,
                forwarded: fn_,
            },
            Outcome {
                status: h,
                forwarded: fh,
            },
        ]);
    }
    drop(node);
    drop((nginx, haproxy));

    let mut failures = Vec::new();
    let mut notes = Vec::new();
    let mut filled = 0;
    for (case, [g, n, h]) in cases.iter_mut().zip(&observed) {
        match &case.gtd {
            Some(expected) if expected != g => failures.push(format!(
                "{}: gtd should give {expected}, gave {g}",
                case.name
            )),
            Some(_) => {}
            None if record => {
                case.gtd = Some(g.clone());
                filled += 1;
            }
            None => failures.push(format!(
                "{}: no gtd expectation (gtd gave {g}); record and review it",
                case.name
            )),
        }
        for (who, recorded, now) in [
            ("nginx", &mut case.nginx, n),
            ("haproxy", &mut case.haproxy, h),
        ] {
            if recorded.as_ref() == Some(now) {
                continue;
            }
            if record {
                *recorded = Some(now.clone());
            } else {
                notes.push(format!(
                    "{}: {who} now gives {now} (recorded: {})",
                    case.name,
                    recorded.as_ref().map_or("nothing".into(), brief)
                ));
            }
        }
        if !differs_from_both(case) && !case.reason.trim().is_empty() {
            notes.push(format!(
                "{}: gtd now agrees with an anchor; its reason can go",
                case.name
            ));
        }
        if differs_from_both(case) && case.reason.trim().is_empty() {
            failures.push(format!(
                "{}: gtd differs from both nginx and HAProxy and the case gives no reason",
                case.name
            ));
        }
    }

    // Straight to stderr, past the test harness's capture: the summary is for every run.
    let mut out = std::io::stderr().lock();
    let mut disagreements = 0;
    for (case, [g, n, h]) in cases.iter().zip(&observed) {
        if g != n || g != h {
            disagreements += 1;
            let why = if case.reason.is_empty() {
                String::new()
            } else {
                format!(" — {}", case.reason)
            };
            let _ = writeln!(
                out,
                "differential: {}: gtd {} | nginx {} | haproxy {}{why}",
                case.name,
                brief(g),
                brief(n),
                brief(h)
            );
        }
    }
    let _ = writeln!(
        out,
        "differential: {} cases, gtd disagrees with an anchor on {disagreements}",
        cases.len()
    );
    for note in &notes {
        let _ = writeln!(out, "differential: note: {note}");
    }
    if record {
        let path = root().join(CORPUS);
        std::fs::write(&path, corpus::render(&corpus::header(&text), &cases))
            .expect("write the corpus");
        let _ = writeln!(
            out,
            "differential: recorded into {}; {filled} gtd expectations filled in: review them",
            path.display()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
