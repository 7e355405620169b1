//! The `gtd` node binary.
//!
//! - `gtd run [--config F] --region ID [--bind IP] [--log-format text|json]` runs the listener
//!   node of one acceleration region until SIGTERM (drain) — SIGHUP reloads the config.
//! - `gtd check [--config F] [--regions R] [--region ID]` validates a config and its region catalogue: every
//!   error on stderr as `FILE:LINE:COL: path: message` and exit status 1, or a summary on stdout
//!   and exit status 0.
//! - `gtd push --etcd URL... [--config F]` publishes a validated config as the fleet's next
//!   revision; `gtd run --etcd URL... --region ID` serves the fleet's revisions; `gtd fleet`
//!   reports the live nodes (docs/operations.md).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// gtd — a global traffic director.
#[derive(Parser)]
#[command(name = "gtd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the listener node of one acceleration region: serves every listener that lists it.
    Run {
        /// The config file (re-read on SIGHUP and POST /reload).
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// The region catalogue to use instead of the config's `catalog = ...`.
        #[arg(long)]
        regions: Option<PathBuf>,
        /// This node's acceleration region (an id from the catalogue).
        #[arg(long)]
        region: String,
        /// Address the listeners bind to.
        #[arg(long, default_value = "0.0.0.0")]
        bind: std::net::IpAddr,
        /// Admin server address, overriding `[admin] bind`.
        #[arg(long)]
        admin: Option<std::net::SocketAddr>,
        /// Source address of connections to endpoints and health checks, overriding
        /// `[node] source_ip`.
        #[arg(long)]
        source_ip: Option<std::net::IpAddr>,
        /// How every log line is written, the access log's included: text, or one JSON
        /// object per line.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Serve the fleet's revisions from these etcd endpoints (host:port, http://host:port
        /// or https://host:port, comma separated) instead of --config.
        #[arg(long, value_name = "URL,...", value_delimiter = ',', conflicts_with_all = ["config", "regions"])]
        etcd: Vec<String>,
        #[command(flatten)]
        node_fleet: NodeFleet,
    },
    /// Validate a config as `gtd check` does and publish it to etcd as the fleet's next
    /// revision (atomically; the last --keep revisions are kept for rollback and diff).
    Push {
        #[command(flatten)]
        etcd: Etcd,
        /// The config file to publish.
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// The region catalogue to publish instead of the config's `catalog = ...`.
        #[arg(long)]
        regions: Option<PathBuf>,
        /// Print the text difference and `sim --compare` of the running revision against this
        /// one; publish nothing.
        #[arg(long)]
        dry_run: bool,
        /// Publish the revision before the current one again (or revision REV) as a new
        /// revision.
        #[arg(long, value_name = "REV", num_args = 0..=1, conflicts_with_all = ["config", "regions"])]
        rollback: Option<Option<u64>>,
        /// How many revisions to keep (the new one included).
        #[arg(long, default_value_t = gtd::fleet::DEFAULT_KEEP, value_parser = clap::value_parser!(u64).range(1..))]
        keep: u64,
    },
    /// The fleet's live nodes, the revision each serves, and where their views of group health
    /// disagree.
    Fleet {
        #[command(flatten)]
        etcd: Etcd,
        /// Print JSON (the document `GET /fleet` serves).
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        what: Option<FleetCommand>,
    },
    /// See it work: one node per acceleration region of the config on loopback, with its
    /// endpoints and client load, and a live view of the split against what it should be.
    Demo {
        /// The config the nodes run.
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// The region catalogue to use instead of the config's `catalog = ...`.
        #[arg(long)]
        regions: Option<PathBuf>,
        /// How long the load runs ("30s", "2m"); default 30s (with --backends-only: until
        /// Ctrl-C).
        #[arg(long)]
        duration: Option<String>,
        /// New connections, flows or requests per second, per listener and region.
        #[arg(long, default_value_t = 50)]
        rate: u32,
        /// Stop a group's endpoints mid-run: GROUP@TIME or LISTENER/GROUP@TIME (repeatable).
        #[arg(long, value_name = "GROUP@TIME")]
        stop: Vec<String>,
        /// Start them again: GROUP@TIME (repeatable).
        #[arg(long, value_name = "GROUP@TIME")]
        start: Vec<String>,
        /// Print the final report as JSON (and no live view).
        #[arg(long)]
        json: bool,
        /// Only serve the config's endpoints, for nodes started by hand (`gtd run --bind
        /// 127.0.0.2 --source-ip 127.0.0.2` for the first region, .3 for the next...), until
        /// Ctrl-C or --duration.
        #[arg(long)]
        backends_only: bool,
    },
    /// Validate a config file and its region catalogue; print every error, or a summary.
    Check {
        /// The config file.
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// The region catalogue to use instead of the config's `catalog = ...`.
        #[arg(long)]
        regions: Option<PathBuf>,
        /// Also check that a node of this acceleration region would serve something (what
        /// `gtd run --region` refuses otherwise).
        #[arg(long)]
        region: Option<String>,
    },
}

/// `--etcd`, its credentials and `--prefix`.
#[derive(clap::Args)]
struct Etcd {
    /// etcd endpoints: host:port, http://host:port or https://host:port, comma separated.
    #[arg(long, value_name = "URL,...", value_delimiter = ',', required = true)]
    etcd: Vec<String>,
    #[command(flatten)]
    credentials: EtcdCredentials,
    /// The key prefix the fleet lives under.
    #[arg(long, default_value = gtd::fleet::DEFAULT_PREFIX)]
    prefix: String,
}

/// How to show etcd who is asking: TLS (with a client certificate) and a user.
#[derive(clap::Args)]
struct EtcdCredentials {
    /// TLS to etcd: the CA certificates (PEM) its certificate is checked against.
    #[arg(long, value_name = "FILE")]
    etcd_cacert: Option<PathBuf>,
    /// A client certificate (PEM chain) to show etcd (its --client-cert-auth); with
    /// --etcd-key.
    #[arg(long, value_name = "FILE")]
    etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE")]
    etcd_key: Option<PathBuf>,
    /// An etcd user (a cluster with `etcdctl auth enable`); its password from
    /// --etcd-password-file or the GTD_ETCD_PASSWORD environment variable.
    #[arg(long, value_name = "NAME")]
    etcd_user: Option<String>,
    /// A file whose first line is --etcd-user's password.
    #[arg(long, value_name = "FILE")]
    etcd_password_file: Option<PathBuf>,
}

impl EtcdCredentials {
    /// The first flag given, if any.
    fn given(&self) -> Option<&'static str> {
        [
            (self.etcd_cacert.is_some(), "--etcd-cacert"),
            (self.etcd_cert.is_some(), "--etcd-cert"),
            (self.etcd_key.is_some(), "--etcd-key"),
            (self.etcd_user.is_some(), "--etcd-user"),
            (self.etcd_password_file.is_some(), "--etcd-password-file"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// [`EtcdCredentials::access`] with every file read now (`gtd push`, `gtd fleet`: a
    /// mistake is reported before anything connects).
    fn checked_access(self, urls: &[String]) -> anyhow::Result<gtd::fleet::Access> {
        let access = self.access(urls)?;
        access.check_files()?;
        Ok(access)
    }

    /// The access to `urls` with these credentials (files read at each connection).
    fn access(self, urls: &[String]) -> anyhow::Result<gtd::fleet::Access> {
        gtd::fleet::Access::new(
            urls,
            gtd::fleet::Credentials {
                cacert: self.etcd_cacert,
                cert: self.etcd_cert,
                key: self.etcd_key,
                user: self.etcd_user,
                password_file: self.etcd_password_file,
                password_env: std::env::var(gtd::fleet::access::PASSWORD_ENV).ok(),
            },
        )
    }
}

/// `gtd run`'s fleet settings (with `--etcd`).
#[derive(clap::Args)]
struct NodeFleet {
    /// The key prefix the fleet lives under (default /gtd).
    #[arg(long)]
    prefix: Option<String>,
    /// Where the served revision is cached, for a start while etcd is down (default
    /// `$STATE_DIRECTORY/revision-REGION.json`, else `./gtd-revision-REGION.json`).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// This node's id in the registry (default REGION@HOST:ADMIN_PORT).
    #[arg(long)]
    node_id: Option<String>,
    /// The registry lease: a node that dies leaves the registry within this (default 10s).
    #[arg(long)]
    lease_ttl: Option<String>,
    #[command(flatten)]
    credentials: EtcdCredentials,
}

impl NodeFleet {
    /// The first fleet flag given, if any (each needs `--etcd`: clap's `requires` cannot say
    /// so, since `--etcd` conflicts with `--config`, which has a default).
    fn given(&self) -> Option<&'static str> {
        [
            (self.prefix.is_some(), "--prefix"),
            (self.cache.is_some(), "--cache"),
            (self.node_id.is_some(), "--node-id"),
            (self.lease_ttl.is_some(), "--lease-ttl"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
        .or_else(|| self.credentials.given())
    }
}

#[derive(Subcommand)]
enum FleetCommand {
    /// The text difference of two kept revisions and its effect on shares (`sim --compare`).
    Diff {
        /// The older revision.
        a: u64,
        /// The newer revision.
        b: u64,
    },
}

fn main() -> ExitCode {
    // A bad argument (`--etcd https://...`, `--lease-ttl 1s`) in one line, as clap prints its
    // own, rather than anyhow's debug form with a backtrace.
    match command(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gtd: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn command(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Demo {
            config,
            regions,
            duration,
            rate,
            stop,
            start,
            json,
            backends_only,
        } => demo(
            gtd::demo::Options {
                config,
                regions,
                duration: std::time::Duration::ZERO,
                rate,
                stop,
                start,
                json,
                backends_only,
            },
            duration.as_deref(),
        ),
        Command::Check {
            config,
            regions,
            region,
        } => check(config, regions, region),
        Command::Run {
            config,
            regions,
            region,
            bind,
            admin,
            source_ip,
            log_format,
            etcd,
            node_fleet,
        } => {
            let fleet = if etcd.is_empty() {
                if let Some(flag) = node_fleet.given() {
                    anyhow::bail!(
                        "{flag} is a fleet setting: it needs --etcd (a node serving --config \
                         has no revision to cache and no registry to join)"
                    );
                }
                None
            } else {
                Some(node_fleet_options(&etcd, node_fleet, &region)?)
            };
            run(gtd::node::Options {
                config,
                regions,
                region,
                bind,
                admin_bind: admin,
                source_ip,
                log_format: match log_format {
                    LogFormat::Text => gtd::node::LogFormat::Text,
                    LogFormat::Json => gtd::node::LogFormat::Json,
                },
                fleet,
            })
        }
        Command::Push {
            etcd,
            config,
            regions,
            dry_run,
            rollback,
            keep,
        } => push(gtd::fleet::push::Options {
            prefix: gtd::fleet::normalise_prefix(&etcd.prefix)?,
            etcd: etcd.credentials.checked_access(&etcd.etcd)?,
            config,
            regions,
            keep,
            dry_run,
            rollback,
        }),
        Command::Fleet { etcd, json, what } => fleet(etcd, json, what),
    }
}

fn node_fleet_options(
    etcd: &[String],
    f: NodeFleet,
    region: &str,
) -> anyhow::Result<gtd::node::fleet::Options> {
    let ttl = f.lease_ttl.as_deref().unwrap_or("10s");
    let lease_ttl =
        gtd::config::parse_duration(ttl).map_err(|e| anyhow::anyhow!("--lease-ttl {ttl}: {e}"))?;
    if lease_ttl < std::time::Duration::from_secs(2) {
        anyhow::bail!("--lease-ttl {ttl}: at least 2s (etcd counts leases in seconds)");
    }
    let cache = f.cache.unwrap_or_else(|| {
        let name = format!("revision-{region}.json");
        match std::env::var_os("STATE_DIRECTORY") {
            // systemd's StateDirectory= (a list when several are set: the first).
            Some(dirs) => {
                PathBuf::from(dirs.to_string_lossy().split(':').next().unwrap_or(".")).join(name)
            }
            None => PathBuf::from(format!("gtd-{name}")),
        }
    });
    Ok(gtd::node::fleet::Options {
        etcd: f.credentials.access(etcd)?,
        prefix: gtd::fleet::normalise_prefix(
            f.prefix.as_deref().unwrap_or(gtd::fleet::DEFAULT_PREFIX),
        )?,
        cache,
        node_id: f.node_id,
        lease_ttl,
    })
}

/// Runs a fleet command on a small runtime (again while etcd fails transiently: an election),
/// printing its outcome.
fn fleet_command<F, Fut>(work: F) -> anyhow::Result<ExitCode>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<gtd::fleet::push::Outcome>>,
{
    // Warnings (users off on the cluster) to stderr, as one line each.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match runtime.block_on(gtd::fleet::retrying(work)) {
        Ok(o) => {
            std::io::stderr().write_all(o.err.as_bytes())?;
            std::io::stdout().write_all(o.out.as_bytes())?;
            Ok(ExitCode::from(o.code))
        }
        Err(e) => {
            eprintln!("gtd: {}", gtd::fleet::describe(&e));
            Ok(ExitCode::FAILURE)
        }
    }
}

fn push(opts: gtd::fleet::push::Options) -> anyhow::Result<ExitCode> {
    fleet_command(|| async {
        gtd::fleet::push::run(&opts)
            .await
            .map_err(|e| e.into_store())
    })
}

fn fleet(etcd: Etcd, json: bool, what: Option<FleetCommand>) -> anyhow::Result<ExitCode> {
    let prefix = gtd::fleet::normalise_prefix(&etcd.prefix)?;
    let access = etcd.credentials.checked_access(&etcd.etcd)?;
    fleet_command(|| async {
        let mut store = gtd::fleet::Store::connect(&access, &prefix).await?;
        let out = match &what {
            Some(FleetCommand::Diff { a, b }) => gtd::fleet::report::diff(&mut store, *a, *b)
                .await
                .map_err(|e| e.into_store())?,
            None => {
                let f = gtd::fleet::report::Fleet::read(&mut store).await?;
                if json {
                    format!("{:#}\n", f.json())
                } else {
                    f.table()
                }
            }
        };
        Ok(gtd::fleet::push::Outcome {
            out,
            err: String::new(),
            code: 0,
        })
    })
}

fn demo(mut options: gtd::demo::Options, duration: Option<&str>) -> anyhow::Result<ExitCode> {
    options.duration = match duration {
        Some(d) => {
            gtd::config::parse_duration(d).map_err(|e| anyhow::anyhow!("--duration {d}: {e}"))?
        }
        // Serving endpoints for nodes started by hand: until Ctrl-C (a year).
        None if options.backends_only => std::time::Duration::from_secs(365 * 86_400),
        None => std::time::Duration::from_secs(30),
    };
    raise_open_files_limit();
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let report = runtime.block_on(gtd::demo::run(options));
    match report {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("gtd demo: {e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

fn run(options: gtd::node::Options) -> anyhow::Result<ExitCode> {
    // rustls warns about every client that sends an IP address as SNI (wrk, some monitors),
    // which it then ignores as RFC 6066 says: noise at a node's default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,rustls=error".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match options.log_format {
        gtd::node::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // One object per line: timestamp, level, the line's fields (message included) at the
        // top level, and target (docs/design.md §6, logs).
        gtd::node::LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    let log_format = options.log_format;
    raise_open_files_limit();
    // On one CPU (a container limit, `taskset`), a single-threaded runtime skips the
    // work-stealing scheduler's bookkeeping: about 12% more HTTP requests per second measured
    // with wrk against the same node pinned to one core. With more CPUs, one worker per CPU.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = if cpus == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
    .context("starting the runtime")?;
    runtime.block_on(async {
        let signals = gtd::node::Signals::take()?;
        match gtd::node::Node::start(options).await {
            Ok(node) => {
                node.run_until_signal(signals).await?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                match log_format {
                    gtd::node::LogFormat::Text => eprintln!("gtd: {e:#}"),
                    // A log shipper reading JSON gets the reason as one object too.
                    gtd::node::LogFormat::Json => {
                        tracing::error!(error = format!("{e:#}"), "the node did not start");
                    }
                }
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// Every connection gtd proxies holds two descriptors (and a UDP flow one more socket), so the
/// usual soft limit of 1024 open files would cap a node near 500 connections. Like HAProxy and
/// Go programs, gtd raises the soft limit to the hard one at start (`ulimit -Hn`, or systemd's
/// `LimitNOFILE=`, sets how far).
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

fn check(
    config: PathBuf,
    regions: Option<PathBuf>,
    region: Option<String>,
) -> anyhow::Result<ExitCode> {
    match gtd::config::load(&config, regions.as_deref()) {
        Ok(cfg) => {
            let mut err = std::io::stderr().lock();
            for w in &cfg.warnings {
                writeln!(err, "warning: {w}")?;
            }
            if let Some(region) = region
                && let Err(e) = cfg.serves(&region)
            {
                writeln!(err, "{e}")?;
                return Ok(ExitCode::FAILURE);
            }
            let mut out = std::io::stdout().lock();
            out.write_all(cfg.summary().as_bytes())
                .context("writing the summary")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            writeln!(std::io::stderr().lock(), "{}", errors.report(&config))?;
            Ok(ExitCode::FAILURE)
        }
    }
}
