//! `gtd run`: the listener node of one acceleration region, until SIGTERM (drain); SIGHUP
//! reloads the config.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::etcd::{Endpoints, NodeFleet, urls};

/// `--log-format`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `gtd run`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Run {
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
    bind: IpAddr,
    /// Admin server address, overriding `[admin] bind`.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Source address of connections to endpoints and health checks, overriding
    /// `[node] source_ip`.
    #[arg(long)]
    source_ip: Option<IpAddr>,
    /// How every log line is written, the access log's included: text, or one JSON
    /// object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Serve the fleet's revisions from these etcd endpoints (host:port, http://host:port
    /// or https://host:port, comma separated) instead of --config.
    #[arg(long, value_name = "URL,...", value_parser = crate::etcd::endpoints,
          conflicts_with_all = ["config", "regions"])]
    etcd: Vec<Endpoints>,
    #[command(flatten)]
    node_fleet: NodeFleet,
}

impl Run {
    /// The node's options; `state_directory` is systemd's `$STATE_DIRECTORY`.
    pub(crate) fn options(
        self,
        state_directory: Option<&str>,
    ) -> anyhow::Result<gtd::node::Options> {
        let fleet = if self.etcd.is_empty() {
            if let Some(flag) = self.node_fleet.given() {
                anyhow::bail!(
                    "{flag} is a fleet setting: it needs --etcd (a node serving --config \
                     has no revision to cache and no registry to join)"
                );
            }
            None
        } else {
            let urls = urls(self.etcd);
            Some(
                self.node_fleet
                    .options(&urls, &self.region, state_directory)?,
            )
        };
        Ok(gtd::node::Options {
            config: self.config,
            regions: self.regions,
            region: self.region,
            bind: self.bind,
            admin_bind: self.admin,
            source_ip: self.source_ip,
            log_format: match self.log_format {
                LogFormat::Text => gtd::node::LogFormat::Text,
                LogFormat::Json => gtd::node::LogFormat::Json,
            },
            fleet,
        })
    }

    /// Runs the node until SIGTERM.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let state_directory = std::env::var_os("STATE_DIRECTORY");
        let options = self.options(
            state_directory
                .as_ref()
                .map(|d| d.to_string_lossy())
                .as_deref(),
        )?;
        run(options)
    }
}

fn run(options: gtd::node::Options) -> anyhow::Result<ExitCode> {
    // rustls warns about every client that sends an IP address as SNI (wrk, some monitors),
    // which it then ignores as RFC 6066 says: noise at a node's default.
    let (filter, rewritten) = crate::logs::filter("info,rustls=error");
    // Lines leave through a thread of their own: a stderr nobody reads must not stop the node.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::stderr::Stderr::start());
    let _flush = crate::stderr::Flush;
    match options.log_format {
        gtd::node::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // One object per line: timestamp, level, the line's fields (message included) at the
        // top level, and target (docs/design.md §6, logs).
        gtd::node::LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    for (former, now) in rewritten {
        tracing::info!(former = %former, now = %now, "RUST_LOG: a directive in the former module spelling, read as today's");
    }
    let log_format = options.log_format;
    crate::raise_open_files_limit();
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
                    gtd::node::LogFormat::Text => {
                        crate::stderr::flush();
                        eprintln!("gtd: {e:#}");
                    }
                    // A log shipper reading JSON gets the reason as one object too.
                    gtd::node::LogFormat::Json => {
                        // The target the binary's events had before it was split in modules.
                        tracing::error!(target: "gtd", error = format!("{e:#}"), "the node did not start");
                    }
                }
                Ok(ExitCode::FAILURE)
            }
        }
    })
}
