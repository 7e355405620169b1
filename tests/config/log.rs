//! `[log] access`: the targets it takes, a file resolved and placed, and what it refuses — each
//! error at the value, as `gtd check` prints it (docs/configuration.md, `[log]`).

use super::*;

use gtd::config::{AccessFile, AccessLog};

/// A config of one http listener with `[log] access = VALUE` (VALUE as TOML) on line 2.
fn with_access(value: &str) -> String {
    format!("[log]\naccess = {value}\n\n{}", one_group(WEB, "", ""))
}

#[test]
fn the_access_log_is_off_unless_set() {
    assert_eq!(valid(&one_group(WEB, "", "")).log.access, AccessLog::Off);
    for (value, target) in [
        ("\"off\"", AccessLog::Off),
        ("\"stderr\"", AccessLog::Stderr),
        ("\"stdout\"", AccessLog::Stdout),
    ] {
        assert_eq!(valid(&with_access(value)).log.access, target, "{value}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("access.log");
    let cfg = valid(&with_access(&format!("{:?}", file.display().to_string())));
    assert_eq!(
        cfg.log.access,
        AccessLog::File(AccessFile {
            path: file.clone(),
            config: PathBuf::from("config.toml"),
            line: 2,
            column: 10,
        })
    );
    // Checked, not created: only the node opens it.
    assert!(!file.exists());
}

#[test]
fn a_relative_access_log_is_beside_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gtd.toml");
    std::fs::create_dir(dir.path().join("logs")).unwrap();
    let text = format!(
        "catalog = {:?}\n{}",
        catalog_path().display().to_string(),
        with_access("\"logs/access.log\"")
    );
    std::fs::write(&config, text).unwrap();
    let cfg = config::load(&config, None).unwrap();
    let AccessLog::File(f) = &cfg.log.access else {
        panic!("{:?}", cfg.log.access)
    };
    assert_eq!(f.path, dir.path().join("logs/access.log"));
    assert_eq!((f.line, f.column), (3, 10));
}

#[test]
fn an_access_log_that_cannot_be_written_is_an_error_at_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let quoted = |p: &str| format!("{p:?}");
    assert_errors(&[
        (
            with_access(&quoted(&d)),
            &[&format!(
                "config.toml:2:10: log: access log file {} is a directory; name a file in it",
                quoted(&d)
            )],
        ),
        (
            with_access(&quoted(&format!("{d}/no/such/access.log"))),
            &[&format!(
                "config.toml:2:10: log: access log file {} cannot be created: its directory {d}/no/such does not exist",
                quoted(&format!("{d}/no/such/access.log"))
            )],
        ),
        (
            with_access("\"\""),
            &[r#"config.toml:2:10: log: "access" must not be empty"#],
        ),
        (
            with_access("true"),
            &[r#"config.toml:2:10: log: "access" must be a string, found boolean true"#],
        ),
        (
            format!("[log]\nacess = \"stderr\"\n\n{}", one_group(WEB, "", "")),
            &[r#"config.toml:2:1: log: unknown key "acess"; did you mean "access"?"#],
        ),
    ]);
}

#[test]
fn gtd_check_names_the_file_line_and_column_of_a_bad_access_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let text = format!(
        "catalog = {:?}\n{}",
        catalog_path().display().to_string(),
        with_access("\"logs/access.log\"")
    );
    std::fs::write(&config, text).unwrap();
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_gtd"))
            .arg("check")
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    let out = check();
    assert_eq!(out.status.code(), Some(1));
    let f = config.display();
    let logs = dir.path().join("logs");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "{f}:3:10: log: access log file {:?} cannot be created: its directory {} does not exist\n\
             1 error in {f}\n",
            logs.join("access.log").display().to_string(),
            logs.display()
        )
    );
    // Once the directory is there, the config is good and the summary says where lines go.
    std::fs::create_dir(&logs).unwrap();
    let out = check();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8(out.stdout).unwrap();
    let want = format!("access log: {}\n", logs.join("access.log").display());
    assert!(summary.contains(&want), "{summary}");
}
