//! `gtd demo`: the product at work on one machine. One real node per acceleration region of the
//! config, each on its own loopback address (127.0.0.2, 127.0.0.3, …) with its own admin
//! server; embedded backends for every endpoint ([`backends`]), answering each node after the
//! catalogue RTT between the node's region and the endpoint's group's region, so that measured
//! priorities reproduce geography; client load per region for every listener ([`load`]); a live
//! view and a final table of observed against expected ([`view`]). `--stop GROUP@T` and
//! `--start GROUP@T` take a group's endpoints down and back mid-run, so that failover and
//! failback happen in the view. Ctrl-C stops everything it started.

mod backends;
mod error;
mod load;
mod view;

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use gtd_core::config::{self, Config, Protocol, UpstreamTls};
use gtd_core::sync::lock;
use gtd_node::{Node, Options as NodeOptions};

use self::backends::{Backend, Geography, Spec};
use self::load::{Generator, Tally};
use self::view::Pane;

pub use self::error::Error;

type Result<T, E = Error> = std::result::Result<T, E>;

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct Options {
    /// The config the nodes run.
    pub config: PathBuf,
    /// Region catalogue override.
    pub regions: Option<PathBuf>,
    /// How long the load runs.
    pub duration: Duration,
    /// New decisions per second, per listener and region.
    pub rate: u32,
    /// `GROUP@T` / `LISTENER/GROUP@T`: the group's endpoints stop at T.
    pub stop: Vec<Change>,
    /// The same, started again at T.
    pub start: Vec<Change>,
    /// Print the final report as JSON instead of the table (and no live view).
    pub json: bool,
    /// Serve the endpoints only (no nodes, no load), for nodes started by hand.
    pub backends_only: bool,
}

/// `--stop` / `--start`: a group (`GROUP` or `LISTENER/GROUP`) and when, from the start of
/// the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `GROUP` or `LISTENER/GROUP`, as written.
    pub group: String,
    /// When.
    pub at: Duration,
    /// `GROUP@TIME` as written (for errors).
    written: String,
}

/// Why a `--stop` or `--start` value is not `GROUP@TIME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// No `@`.
    #[error("expected GROUP@TIME, like beijing@10s")]
    NoTime,
    /// The time is not a duration.
    #[error(transparent)]
    Time(#[from] config::DurationError),
}

impl std::str::FromStr for Change {
    type Err = ChangeError;

    fn from_str(s: &str) -> Result<Change, ChangeError> {
        let (group, at) = s.rsplit_once('@').ok_or(ChangeError::NoTime)?;
        Ok(Change {
            group: group.to_owned(),
            at: config::parse_duration(at)?,
            written: s.to_owned(),
        })
    }
}

/// One scheduled change.
#[derive(Debug, Clone)]
struct Event {
    at: Duration,
    /// `LISTENER/GROUP` or `GROUP`, as written.
    name: String,
    start: bool,
    /// The backends (indices into the plan) it stops or starts.
    backends: Vec<usize>,
}

/// The first node's address: 127.0.0.2 (127.0.0.1 is the endpoints').
fn node_ip(i: usize) -> Result<IpAddr> {
    let last = u8::try_from(i + 2)
        .ok()
        .filter(|&n| n < 255)
        .ok_or(Error::TooManyRegions)?;
    Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
}

fn parse_events(opts: &Options, plan: &[Spec]) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    for (list, start, flag) in [
        (&opts.stop, false, "--stop"),
        (&opts.start, true, "--start"),
    ] {
        for change in list {
            let (name, at, item) = (change.group.as_str(), change.at, &change.written);
            let backends: Vec<usize> = plan
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    s.groups.iter().any(|g| {
                        g == name || g.split_once('/').is_some_and(|(_, group)| group == name)
                    })
                })
                .map(|(i, _)| i)
                .collect();
            if backends.is_empty() {
                return Err(Error::NoGroup {
                    flag,
                    item: item.clone(),
                    name: name.to_owned(),
                });
            }
            if at > opts.duration {
                return Err(Error::AfterEnd {
                    flag,
                    item: item.clone(),
                    duration: config::format_duration(opts.duration),
                });
            }
            events.push(Event {
                at,
                name: name.to_owned(),
                start,
                backends,
            });
        }
    }
    events.sort_by_key(|e| e.at);
    Ok(events)
}

/// A TLS client for the demo's own HTTPS listeners: their certificates are the operator's, so
/// the demo's clients do not verify them.
fn insecure_tls() -> Result<tokio_rustls::TlsConnector> {
    let t = UpstreamTls {
        insecure_skip_verify: true,
        ..UpstreamTls::defaults()
    };
    let cfg = gtd_node::tls_client_config(&t).map_err(|e| Error::Tls(e.to_string()))?;
    Ok(tokio_rustls::TlsConnector::from(cfg))
}

/// Runs the demo; returns the final report (table or JSON) for stdout.
pub async fn run(opts: Options) -> Result<String> {
    let config = Arc::new(config::load(&opts.config, opts.regions.as_deref()).map_err(
        |errors| Error::Config {
            file: opts.config.clone(),
            errors,
        },
    )?);
    if opts.rate == 0 {
        return Err(Error::NoRate);
    }
    // Every acceleration region that serves some listener, in config order.
    let mut regions: Vec<String> = Vec::new();
    for l in &config.listeners {
        for r in &l.regions {
            if !regions.contains(r) {
                regions.push(r.clone());
            }
        }
    }
    let ips: Vec<IpAddr> = (0..regions.len()).map(node_ip).collect::<Result<_>>()?;
    let plan = backends::plan(&config)?;
    let events = parse_events(&opts, &plan)?;
    let geo = Arc::new(Geography::new(
        ips.iter().copied().zip(regions.iter().cloned()).collect(),
        config.clone(),
    ));

    let mut running: Vec<Option<Backend>> = Vec::with_capacity(plan.len());
    for spec in &plan {
        running.push(Some(backends::start(spec, geo.clone()).await?));
    }
    if opts.backends_only {
        let text: String = plan
            .iter()
            .map(|spec| format!("  {} ({})\n", spec.addr, spec.groups.join(", ")))
            .collect();
        let nodes: Vec<String> = regions
            .iter()
            .zip(&ips)
            .map(|(r, ip)| format!("{r} from {ip}"))
            .collect();
        println!(
            "serving {} endpoints for {} (each answers a node after the catalogue RTT from \
             the node's region, known by its source address: {}):\n{text}Ctrl-C stops",
            plan.len(),
            opts.config.display(),
            nodes.join(", ")
        );
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = tokio::time::sleep(opts.duration) => {}
        }
        drop(running);
        return Ok(String::new());
    }
    let admin_port = config.admin.bind.port();
    let mut nodes: Vec<Node> = Vec::new();
    for (region, &ip) in regions.iter().zip(&ips) {
        let node = Node::start(NodeOptions {
            config: opts.config.clone(),
            regions: opts.regions.clone(),
            region: region.clone(),
            bind: ip,
            admin_bind: Some(SocketAddr::new(ip, admin_port)),
            source_ip: Some(ip),
            log_format: gtd_node::LogFormat::Text,
            fleet: None,
        })
        .await
        .map_err(|error| Error::Node {
            region: region.clone(),
            ip,
            error,
        })?;
        nodes.push(node);
    }
    let outcome = drive(
        &opts,
        &config,
        &regions,
        &nodes,
        &plan,
        &mut running,
        events,
        geo,
    )
    .await;
    // The load has stopped: nothing is left to drain but idle UDP flows, which would each
    // hold its node for its whole `drain_timeout` (30 s by default) before the report.
    for node in nodes {
        node.shutdown_within(Duration::from_secs(1)).await;
    }
    drop(running);
    outcome
}

/// A pane's node (region index), the shares its generator reads and the tally it keeps.
type Feed = (usize, Arc<ArcSwap<Vec<f64>>>, Arc<Mutex<Tally>>);

/// Runs the load, the view and the events; returns the final report.
#[allow(clippy::too_many_arguments)]
async fn drive(
    opts: &Options,
    config: &Arc<Config>,
    regions: &[String],
    nodes: &[Node],
    plan: &[Spec],
    running: &mut [Option<Backend>],
    mut events: Vec<Event>,
    geo: Arc<Geography>,
) -> Result<String> {
    let stop = CancellationToken::new();
    let (mut panes, feeds) = start_load(opts, config, regions, nodes, &stop).await?;
    let names: BTreeMap<String, Vec<String>> = config
        .listeners
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                l.groups.iter().map(|g| g.name.clone()).collect(),
            )
        })
        .collect();
    let tty = std::io::stdout().is_terminal() && !opts.json;
    let started = Instant::now();
    let mut sample = tokio::time::interval(Duration::from_millis(200));
    let mut second = 0_u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = &mut ctrl_c => { interrupted = true; break; }
            _ = sample.tick() => {}
        }
        let elapsed = started.elapsed();
        // The nodes' plans, for the generators' expected shares and the view.
        for (pane, (ri, shares, _)) in panes.iter_mut().zip(&feeds) {
            let status = nodes[*ri].status();
            let (mode, groups) = view::read_status(&status, &pane.listener, &names[&pane.listener]);
            shares.store(Arc::new(view::shares(&groups, names[&pane.listener].len())));
            pane.mode = mode;
            pane.groups = groups;
        }
        let say = !tty && !opts.json;
        run_events(&mut events, elapsed, running, plan, &geo, say).await?;
        if elapsed.as_secs() > second || elapsed >= opts.duration {
            second = elapsed.as_secs();
            for (pane, (_, _, tally)) in panes.iter_mut().zip(&feeds) {
                let t = lock(tally).clone();
                pane.history.push_back(t);
                while pane.history.len() > view::WINDOW + 1 {
                    pane.history.pop_front();
                }
            }
            if !opts.json {
                show(opts, &panes, &events, second, tty);
            }
        }
        if elapsed >= opts.duration {
            break;
        }
    }
    stop.cancel();
    report(opts, &mut panes, &feeds, &names, interrupted)
}

/// One pane per listener and node region serving it, each with its load generator started
/// against that node's listener (until `stop`).
async fn start_load(
    opts: &Options,
    config: &Config,
    regions: &[String],
    nodes: &[Node],
    stop: &CancellationToken,
) -> Result<(Vec<Pane>, Vec<Feed>)> {
    let tls = if config
        .listeners
        .iter()
        .any(|l| l.protocol == Protocol::Https)
    {
        Some(insecure_tls()?)
    } else {
        None
    };
    let mut panes: Vec<Pane> = Vec::new();
    // Per pane: its node (region index), and what its generator and the view share.
    let mut feeds: Vec<Feed> = Vec::new();
    for l in &config.listeners {
        for (ri, region) in regions.iter().enumerate() {
            if !l.regions.contains(region) {
                continue;
            }
            let target = nodes[ri]
                .listener_addrs()
                .await
                .into_iter()
                .find(|(n, _)| *n == l.name)
                .map(|(_, a)| a)
                .ok_or_else(|| Error::NotBound {
                    listener: l.name.clone(),
                    region: region.clone(),
                })?;
            let names: Vec<String> = l.groups.iter().map(|g| g.name.clone()).collect();
            let (_, now) = view::read_status(&nodes[ri].status(), &l.name, &names);
            let shares = Arc::new(ArcSwap::from_pointee(view::shares(&now, names.len())));
            let tally = Arc::new(Mutex::new(Tally::new(l.groups.len())));
            let generator = Generator {
                listener: l.clone(),
                target,
                rate: opts.rate,
                shares: shares.clone(),
                tally: tally.clone(),
                tls: tls.clone().filter(|_| l.protocol == Protocol::Https),
            };
            tokio::spawn(generator.run(stop.child_token()));
            feeds.push((ri, shares, tally));
            panes.push(Pane {
                listener: l.name.clone(),
                protocol: l.protocol.as_str(),
                port: l.port,
                region: region.clone(),
                mode: String::new(),
                groups: Vec::new(),
                history: VecDeque::new(),
            });
        }
    }
    Ok((panes, feeds))
}

/// The events due by `elapsed`: their backends stopped or started again; each said on a line
/// when `say` (no screen to show it).
async fn run_events(
    events: &mut Vec<Event>,
    elapsed: Duration,
    running: &mut [Option<Backend>],
    plan: &[Spec],
    geo: &Arc<Geography>,
    say: bool,
) -> Result<()> {
    while events.first().is_some_and(|e| e.at <= elapsed) {
        let e = events.remove(0);
        for &i in &e.backends {
            running[i] = None;
            if e.start {
                running[i] = Some(backends::start(&plan[i], geo.clone()).await?);
            }
        }
        if say {
            println!(
                "{:>4}s {} {}: its endpoints {}",
                elapsed.as_secs(),
                if e.start { "start" } else { "stop" },
                e.name,
                if e.start {
                    "answer again"
                } else {
                    "stop answering"
                }
            );
        }
    }
    Ok(())
}

/// The view after `second` seconds: the screen on a terminal, else a line per pane.
fn show(opts: &Options, panes: &[Pane], events: &[Event], second: u64, tty: bool) {
    let next = events.first().map_or_else(String::new, |e| {
        format!(
            " · next: {} {} at {}",
            if e.start { "start" } else { "stop" },
            e.name,
            config::format_duration(e.at)
        )
    });
    if tty {
        let header = format!(
            "gtd demo — {}s of {}{next} · observed over the last {}s · Ctrl-C stops",
            second,
            config::format_duration(opts.duration),
            view::WINDOW
        );
        print!("{}", view::screen(panes, &header));
    } else {
        print!("{}", view::lines(panes, second));
    }
    let _ = std::io::stdout().flush();
}

/// The final report: each pane over the whole run, as a table or JSON.
fn report(
    opts: &Options,
    panes: &mut [Pane],
    feeds: &[Feed],
    names: &BTreeMap<String, Vec<String>>,
    interrupted: bool,
) -> Result<String> {
    // The whole run, for the final report.
    for (pane, (_, _, tally)) in panes.iter_mut().zip(feeds) {
        let t = lock(tally).clone();
        pane.history.push_back(t.clone());
        pane.history = VecDeque::from([t]);
    }
    let group_names = |p: &Pane| names[&p.listener].clone();
    let mut report = if opts.json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&view::json(panes, group_names))?
        )
    } else {
        format!(
            "\n{}observed over the whole run; expected is the node's share at each decision\n\n{}",
            if interrupted { "interrupted · " } else { "" },
            view::table(panes, group_names)
        )
    };
    if interrupted && opts.json {
        report.push('\n');
    }
    Ok(report)
}
