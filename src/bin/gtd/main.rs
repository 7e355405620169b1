//! The `gtd` node binary.
//!
//! - `gtd run [--config F] --region ID [--bind IP] [--log-format text|json]` runs the listener
//!   node of one acceleration region until SIGTERM (drain) — SIGHUP reloads the config.
//! - `gtd check [--config F] [--regions R] [--region ID]` validates a config and its region
//!   catalogue: every error on stderr as `FILE:LINE:COL: path: message` and exit status 1, or a
//!   summary on stdout and exit status 0.
//! - `gtd push --etcd URL... [--config F]` publishes a validated config as the fleet's next
//!   revision; `gtd run --etcd URL... --region ID` serves the fleet's revisions; `gtd fleet`
//!   reports the live nodes; `gtd drain`/`gtd undrain` drain an endpoint fleet-wide
//!   (docs/operations.md).
//! - `gtd explain LISTENER CLIENT [--host H] [--path P] [--admin ADDR] [--json]` asks a
//!   running node why that client goes where it goes (docs/explain.md).
//! - `gtd completions SHELL` and `gtd man [--dir DIR]` print the shell completions and the
//!   manual pages, written from the same clap definitions.
//!
//! # Layout
//!
//! One module per command, each with its arguments as clap types (clap parses every value:
//! a bad duration, address or endpoint is refused as clap refuses any value, `error: invalid
//! value ...`, exit status 2) and an `apply` that does the I/O; [`etcd`] holds the etcd
//! options the fleet commands share. They live beside this file, declared only from it, so
//! that the library holds no code only the binary uses.

#[cfg(unix)]
mod alloc;
mod check;
mod completions;
mod demo;
mod drain;
mod etcd;
mod explain;
mod fleet;
mod logs;
mod man;
mod push;
mod ramp;
mod run;
mod stderr;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

/// gtd — a global traffic director.
#[derive(Parser)]
#[command(name = "gtd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the listener node of one acceleration region: serves every listener that lists it.
    Run(run::Run),
    /// Validate a config as `gtd check` does and publish it to etcd as the fleet's next
    /// revision (atomically; the last --keep revisions are kept for rollback and diff).
    Push(push::Push),
    /// The fleet's live nodes, the revision each serves, and where their views of group health
    /// disagree.
    Fleet(fleet::Fleet),
    /// Drain an endpoint (or every endpoint of a group) on every node of the fleet, through
    /// etcd: no new traffic, what it has finishes, sticky clients still reach it.
    Drain(drain::Drain),
    /// End a fleet-wide drain.
    Undrain(drain::Undrain),
    /// The fleet's ramp (gtd push --ramp): its state and every decision, or abort, pause and
    /// resume it.
    Ramp(ramp::Ramp),
    /// See it work: one node per acceleration region of the config on loopback, with its
    /// endpoints and client load, and a live view of the split against what it should be.
    Demo(demo::Demo),
    /// Validate a config file and its region catalogue; print every error, or a summary.
    Check(check::Check),
    /// Ask a running node why a client's connection or request goes where it goes.
    Explain(explain::Explain),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(completions::Completions),
    /// Print the manual page (roff), or write every command's page into a directory.
    Man(man::Man),
}

/// The command line's definition: what parses it, and what completions and manual pages are
/// written from.
fn command() -> clap::Command {
    Cli::command()
}

fn main() -> ExitCode {
    #[cfg(unix)]
    if let Err(e) = alloc::tune() {
        eprintln!(
            "gtd: warning: the allocator's settings were refused ({e}): memory a burst freed stays resident"
        );
    }
    let result = match Cli::parse().command {
        Command::Run(c) => c.apply(),
        Command::Push(c) => c.apply(),
        Command::Fleet(c) => c.apply(),
        Command::Drain(c) => c.apply(),
        Command::Undrain(c) => c.apply(),
        Command::Ramp(c) => c.apply(),
        Command::Demo(c) => c.apply(),
        Command::Check(c) => c.apply(),
        Command::Explain(c) => c.apply(),
        Command::Completions(c) => c.apply(),
        Command::Man(c) => c.apply(),
    };
    // A refusal of gtd's own (`--etcd https://...` without `--etcd-cacert`) in one line, as
    // clap prints its own, rather than anyhow's debug form with a backtrace.
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gtd: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Every connection gtd proxies holds two descriptors (and a UDP flow one more socket), so the
/// usual soft limit of 1024 open files would cap a node near 500 connections. Like HAProxy and
/// Go programs, gtd raises the soft limit to the hard one at start (`ulimit -Hn`, or systemd's
/// `LimitNOFILE=`, sets how far).
/// Writes `bytes` to stdout; a reader that went away (`gtd man | head`) ends the output
/// quietly, as it ends any Unix tool's.
fn print_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // An unlimited hard limit is not a valid soft one for open files; 1 Mi is the kernel's
    // default ceiling (fs.nr_open).
    let target = limit.maximum.unwrap_or(1 << 20);
    let Some(current) = limit.current.filter(|&c| c < target) else {
        return;
    };
    let raised = rustix::process::Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(from = current, to = target, "open files limit raised"),
        Err(e) => tracing::warn!(limit = current, error = %e, "open files limit not raised"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("gtd").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .command
    }

    #[test]
    fn the_command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn a_fleet_node_takes_its_defaults_and_systemds_state_directory() {
        let Command::Run(run) = parse(&["run", "--region", "r", "--etcd", "a:1, b:2"]) else {
            panic!("not run");
        };
        let opts = run.options(Some("/var/lib/gtd:/var/lib/other")).unwrap();
        let fleet = opts.fleet.expect("fleet mode");
        assert_eq!(fleet.etcd.endpoints(), ["http://a:1", "http://b:2"]);
        assert_eq!(fleet.prefix, "/gtd");
        assert_eq!(fleet.lease_ttl, std::time::Duration::from_secs(10));
        assert_eq!(
            fleet.cache,
            std::path::Path::new("/var/lib/gtd/revision-r.json")
        );
        let Command::Run(run) = parse(&[
            "run",
            "--region",
            "r",
            "--etcd",
            "a:1",
            "--prefix",
            "/x/",
            "--lease-ttl",
            "1m",
        ]) else {
            panic!("not run");
        };
        let fleet = run.options(None).unwrap().fleet.expect("fleet mode");
        assert_eq!(fleet.prefix, "/x");
        assert_eq!(fleet.lease_ttl, std::time::Duration::from_secs(60));
        assert_eq!(fleet.cache, std::path::Path::new("gtd-revision-r.json"));
    }

    #[test]
    fn the_demo_runs_30s_or_until_ctrl_c_with_backends_only() {
        let Command::Demo(demo) = parse(&["demo", "--stop", "web/beijing@10s"]) else {
            panic!("not demo");
        };
        let opts = demo.options();
        assert_eq!(opts.duration, std::time::Duration::from_secs(30));
        assert_eq!(opts.stop[0].group, "web/beijing");
        assert_eq!(opts.stop[0].at, std::time::Duration::from_secs(10));
        let Command::Demo(demo) = parse(&["demo", "--backends-only"]) else {
            panic!("not demo");
        };
        assert!(demo.options().duration > std::time::Duration::from_secs(86_400));
    }
}
