//! `gtd check` end to end: errors, summary, warnings, exit codes.

use super::*;

fn gtd_check(config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("check")
        .arg("--config")
        .arg(config)
        .arg("--regions")
        .arg(catalog_path())
        .output()
        .unwrap()
}

#[test]
fn gtd_check_prints_every_error_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = EXAMPLE.replace(
        "ratio = 50\n\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1:9001\"",
        "ratio = 150\n\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1\"",
    );
    std::fs::write(&file, text).unwrap();
    let out = gtd_check(&file);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let f = file.display();
    assert_eq!(
        stderr,
        format!(
            "{f}:15:11: listener \"web\" group \"beijing\": ratio 150 is out of range 0..=100\n\
             {f}:18:15: listener \"web\" group \"beijing\" endpoint \"127.0.0.1\": invalid address \"127.0.0.1\": it has no port; write host:port, like \"10.0.0.1:80\", \"[2001:db8::1]:80\" or \"api.example.com:443\"\n\
             2 errors in {f}\n"
        )
    );
}

#[test]
fn gtd_check_prints_a_summary_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, EXAMPLE).unwrap();
    let out = gtd_check(&file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One warning: the udp listener's check is over TCP on another port, blind to an
    // endpoint whose UDP service hangs.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "warning: {}:64:21: listener \"voice\" group \"beijing\" health_check: this health check is over tcp on port 9020, not the endpoints' UDP port: an endpoint whose UDP service never replies passes and stays in rotation. Use protocol = \"udp\" with send and expect (a datagram the endpoint answers, and what its reply holds)\n",
            file.display()
        )
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "{}: ok — 3 listeners, 6 groups, 8 endpoints; {} regions in the catalogue

listener  protocol  port  regions                 groups  endpoints  routes
web       http      8080  cn-beijing,cn-shanghai  2       4          0
game      tcp       7000  cn-beijing,cn-shanghai  2       2          0
voice     udp       7000  cn-beijing,cn-shanghai  2       2          0

region       name              groups  endpoints
cn-beijing   China (Beijing)   3       4
cn-shanghai  China (Shanghai)  3       4
",
        file.display(),
        catalog().regions.len()
    );
    assert_eq!(stdout, expected);
}

#[test]
fn gtd_check_prints_warnings_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = EXAMPLE.replacen("port = 8080\n", "port = 8080\nproxy_protocol = \"v2\"\n", 1);
    std::fs::write(&file, text).unwrap();
    let out = gtd_check(&file);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "warning: {f}:10:1: listener \"web\": \"proxy_protocol\" is only for tcp listeners; ignored\n\
             warning: {f}:65:21: listener \"voice\" group \"beijing\" health_check: this health check is over tcp on port 9020, not the endpoints' UDP port: an endpoint whose UDP service never replies passes and stays in rotation. Use protocol = \"udp\" with send and expect (a datagram the endpoint answers, and what its reply holds)\n",
            f = file.display()
        )
    );
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains(": ok — 3 listeners")
    );
}

#[test]
fn gtd_check_reports_a_missing_file() {
    let out = gtd_check(Path::new("/nonexistent/gtd.toml"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("/nonexistent/gtd.toml:1:1: cannot read file: "),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("1 error in /nonexistent/gtd.toml\n"),
        "{stderr}"
    );
}

/// Files that are not regular files, or too large, are refused at once, naming the file; a name
/// too long to be a label is an error, not a panic; text that is not UTF-8 is placed.
#[test]
fn gtd_check_refuses_pipes_devices_huge_names_and_bad_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let check_of = |catalog: &str| {
        let text = EXAMPLE.replacen(
            "catalog = \"regions/catalog.toml\"",
            &format!("catalog = \"{catalog}\""),
            1,
        );
        std::fs::write(&file, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["check", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    // /dev/zero once grew `gtd check` to 4 GB; a named pipe held it until someone wrote.
    let (code, err) = check_of("/dev/zero");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "cannot read region catalogue /dev/zero: not a regular file (a character device)"
        ),
        "{err}"
    );
    let fifo = dir.path().join("cat.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, err) = check_of("cat.fifo");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not a regular file (a named pipe)"), "{err}");

    // A listener name of 64 Ki characters once panicked in the summary table.
    let long = "a".repeat(64 * 1024);
    let text = EXAMPLE.replacen("name = \"web\"", &format!("name = \"{long}\""), 1);
    assert_ne!(text, EXAMPLE, "the example has a listener named web");
    std::fs::write(&file, text).unwrap();
    let out = gtd_check(&file);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("listener name \"aaaaaaaaaaaaaaaa\"… is 65536 characters long; at most 64"),
        "{err}"
    );
    assert!(
        err.len() < 1000,
        "the name is not repeated: {} bytes",
        err.len()
    );

    // Bytes that are not UTF-8: the error is where they are, not at 1:1.
    let mut bytes = EXAMPLE.as_bytes().to_vec();
    let at = EXAMPLE.find("web").unwrap();
    bytes[at] = 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let out = gtd_check(&file);
    let err = String::from_utf8(out.stderr).unwrap();
    let line = EXAMPLE[..at].matches('\n').count() + 1;
    let column = EXAMPLE[..at].rsplit('\n').next().unwrap().len() + 1;
    assert!(
        err.contains(&format!("config.toml:{line}:{column}: not UTF-8 text")),
        "{err}"
    );

    // A certificate or key that is a device is named as one, not "not found".
    std::fs::write(
        &file,
        "[[listener]]\nname = \"s\"\nprotocol = \"https\"\nport = 8443\nregions = [\"cn-beijing\"]\n\
         tls = { certs = [{ cert = \"/dev/zero\", key = \"/dev/null\" }] }\n\
         [[listener.group]]\nname = \"g\"\nregion = \"cn-beijing\"\n\
         [[listener.group.endpoint]]\naddress = \"127.0.0.1:9001\"\n",
    )
    .unwrap();
    let out = gtd_check(&file);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cert file \"/dev/zero\" is not a regular file (a character device)")
            && err.contains("key file \"/dev/null\" is not a regular file (a character device)"),
        "{err}"
    );
}

/// `gtd check --region` says what `gtd run --region` would refuse: the check and the node ask
/// one function.
#[test]
fn gtd_check_region_says_whether_a_node_there_serves_anything() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, EXAMPLE).unwrap();
    let run = |region: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["check", "--region", region, "--regions"])
            .arg(catalog_path())
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    assert_eq!(run("cn-beijing").0, Some(0));
    let (code, err) = run("us-east-1");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--region us-east-1: no listener lists this region (listeners are served from: cn-beijing, cn-shanghai)"),
        "{err}"
    );
    let (code, err) = run("atlantis");
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--region atlantis: not in the region catalogue"),
        "{err}"
    );
}
