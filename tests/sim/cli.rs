//! The `sim` program itself, a thin command line over `gtd::sim`: what it prints, where, and
//! its exit status — 0, 1 with one `sim: ` line naming the problem, 2 on an overflow under
//! `--fail-on-overflow` (and clap's own status for arguments it refuses).

use crate::capacity::N_PLUS_ONE;
use crate::what_if::{custom, group};
use crate::*;

#[test]
fn prints_what_the_library_computes_and_exits_by_its_verdict() {
    let (code, out, err) = cli(&["--region", "cn-beijing"]);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(out, sim(&["--region", "cn-beijing"]));

    let args = [
        "--scenario",
        N_PLUS_ONE,
        "--down",
        "beijing",
        "--format",
        "json",
    ];
    let (code, out, err) = cli(&[&args[..], &["--fail-on-overflow"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(out, sim(&args), "the output is printed all the same");
    assert_eq!(
        err,
        "sim: overflow (--fail-on-overflow): a capacity is exceeded or demand has no route\n"
    );
    let (code, _, _) = cli(&args);
    assert_eq!(code, Some(0), "without --fail-on-overflow it only reports");
}

#[test]
fn an_error_is_one_line_after_the_configs_warnings() {
    let (code, out, err) = cli(&["--down", "nosuch"]);
    assert_eq!((code, out.as_str()), (Some(1), ""));
    assert_eq!(
        err,
        format!("sim: {}\n", sim_err(&["--down", "nosuch"])),
        "the library's words"
    );
    assert!(
        err.starts_with("sim: --down nosuch: \"nosuch\" matches no group"),
        "{err}"
    );

    // A setting that does nothing is warned about, before the error that follows.
    let dir = tempfile::tempdir().unwrap();
    let config = custom(dir.path(), "headroom = 80", &group("g", "r-a", "100", 9001));
    let config = config.to_str().unwrap();
    let (code, _, err) = cli(&["--config", config, "--down", "nosuch"]);
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("warning: ") && lines[0].contains("headroom has no effect"));
    assert!(lines[1].starts_with("sim: --down nosuch"), "{err}");

    let (code, _, err) = cli(&["--compare", "/nonexistent/old.toml"]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("sim: --compare: /nonexistent/old.toml:1:1: cannot read file"),
        "{err}"
    );
}

#[test]
fn arguments_it_cannot_take_are_refused_naming_the_flag() {
    assert!(cli_err(&["--host", "x"]).contains("--client"));
    for (flag, value, says) in [
        ("--path", "v1/users", "a path starts with /"),
        (
            "--path",
            "http://api.example.com/v2/",
            "give the host with --host",
        ),
        ("--header", "x tier:gold", "not a header name"),
        ("--header", "x-tier", "expected NAME:VALUE"),
        ("--each-down", "zone", "expected a number of groups"),
        ("--set", "web/beijing=abc", "is not a number"),
        ("--checks", "web/beijing", "expected NAME=pass,fail,timeout"),
    ] {
        let err = cli_err(&["--client", "203.0.113.9", flag, value]);
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    let (code, out, err) = cli(&["--out", "/nonexistent/dir/x.txt"]);
    assert_eq!((code, out.as_str()), (Some(1), ""));
    assert!(
        err.starts_with("sim: --out /nonexistent/dir/x.txt: "),
        "{err}"
    );
}

/// `sim --help` says what `sim` does, not what the package is (clap's bare `about` took the
/// package's description: "gtd — a global traffic director: …").
#[test]
fn its_help_says_what_sim_does() {
    let (code, out, _) = cli(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with("Print the traffic split every gtd node will produce"),
        "{out}"
    );
}
