//! Endpoint host names: resolved with hickory-resolver (A and AAAA), each re-resolved when its
//! answer's TTL runs out (bounded by `[dns] min_ttl` and `max_ttl`), one task per name.
//!
//! Every address of a name is a balancing target of its own with the endpoint's keys (a name
//! with three addresses weighs three times its weight, as in Angie; a ketama ring gives the
//! name's points to its addresses together, since they share its text). [`expand`] turns a
//! listener's config into the targets the snapshot is built from; when a name's address set
//! changes, the node rebuilds its snapshot from the same config (as a reload would, without
//! reading a file or binding a port): established connections are untouched, and addresses
//! that stay keep their health and passive state.
//!
//! A lookup that fails for want of an answer (timeout, refused, server failure) keeps the last
//! good addresses; an authoritative "no such name" (NXDOMAIN) or "no address" answer empties
//! the set. A name with no address is one placeholder target marked `down`: never picked,
//! shown in `/status` with the reason. Each change of a name's addresses or of its failure is
//! logged once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::Name;
use metrics::Counter;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use gtd_core::config::{Config, Dns, Host, Listener};
use gtd_core::sync::lock;

use super::telemetry::{self as m, Registry};

/// What a node knows of one name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NameState {
    /// Its addresses (sorted): the last good answer's, or none.
    pub(crate) addrs: Arc<[IpAddr]>,
    /// Why the last lookup failed (kept addresses, or none at all), if it did.
    pub(crate) error: Option<String>,
    /// When the last lookup ended, and when the name is asked next.
    pub(crate) checked_at: SystemTime,
    pub(crate) next_in: Duration,
    /// How long the kept answer is valid (its TTL, within min_ttl..=max_ttl).
    pub(crate) ttl: Option<Duration>,
}

impl NameState {
    /// `resolved` (answers), `stale` (the last lookup failed; the last good addresses are
    /// used) or `unresolved` (no address: not served).
    pub(crate) fn state(&self) -> &'static str {
        match (self.addrs.is_empty(), self.error.is_some()) {
            (true, _) => "unresolved",
            (false, true) => "stale",
            (false, false) => "resolved",
        }
    }
}

/// Every name's state, by name.
pub(crate) type Table = BTreeMap<String, NameState>;

/// The node's names: their states (read by snapshot builds and `/status`), the resolver and
/// one re-resolving task per name.
pub(crate) struct Names {
    table: ArcSwap<Table>,
    /// Told when a name's address set changed: the node rebuilds its snapshot.
    pub(crate) changed: Notify,
    running: Mutex<Running>,
    lookups: Lookups,
}

#[derive(Default)]
struct Running {
    settings: Option<Dns>,
    resolver: Option<Arc<TokioResolver>>,
    tasks: HashMap<String, CancellationToken>,
}

/// `gtd_dns_lookups_total` by result.
struct Lookups {
    ok: Counter,
    nxdomain: Counter,
    no_address: Counter,
    timeout: Counter,
    error: Counter,
}

/// One lookup's outcome.
enum Answer {
    /// Addresses, and how long they are valid.
    Found(Vec<IpAddr>, Duration),
    /// The name does not exist, or has no A/AAAA record: authoritative, the set is emptied.
    Gone(&'static str, String),
    /// Some family got no usable answer (`result`, why): its last good addresses are kept
    /// beside the other family's answer (the addresses to use, and their TTL when the other
    /// family answered).
    Failed(&'static str, String, Vec<IpAddr>, Option<Duration>),
}

impl Names {
    pub(crate) fn new(registry: &Registry) -> Arc<Names> {
        let c = |r: &str| registry.counter(&m::DNS_LOOKUPS_TOTAL, &[r]);
        Arc::new(Names {
            table: ArcSwap::from_pointee(Table::new()),
            changed: Notify::new(),
            running: Mutex::new(Running::default()),
            lookups: Lookups {
                ok: c("ok"),
                nxdomain: c("nxdomain"),
                no_address: c("no_address"),
                timeout: c("timeout"),
                error: c("error"),
            },
        })
    }

    /// The states now.
    pub(crate) fn table(&self) -> Arc<Table> {
        self.table.load_full()
    }

    /// Gets ready for `config` on a node in `region` (start, reload), before its snapshot is
    /// built: a first lookup of every name not known yet (concurrently, each within the
    /// resolver's timeout and attempts), with the resolver of its `[dns]`. Nothing running
    /// changes: [`Names::commit`] does that once the config is in service. Fails only when the
    /// system's resolver settings cannot be read and no name servers are configured.
    pub(crate) async fn prepare(
        self: &Arc<Self>,
        config: &Config,
        region: &str,
    ) -> Result<(), ResolverError> {
        let known = self.table();
        let fresh: Vec<String> = names_of(config, region)
            .into_iter()
            .filter(|n| !known.contains_key(n))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let resolver = self.resolver_for(&config.dns)?;
        let first: Vec<_> = fresh
            .into_iter()
            .map(|name| {
                let (me, resolver, dns) =
                    (Arc::clone(self), Arc::clone(&resolver), config.dns.clone());
                tokio::spawn(async move {
                    let answer = lookup(&resolver, &name, &[]).await;
                    me.apply(&name, answer, &dns, 1);
                })
            })
            .collect();
        for f in first {
            let _ = f.await;
        }
        Ok(())
    }

    /// `config` is in service: its `[dns]` becomes the running one (every name asked again
    /// with it when it changed), each of its names gets a re-resolving task, and names no
    /// listener of `region` uses any more are forgotten. (A rejected reload never gets here,
    /// so the running config's names stay.)
    pub(crate) fn commit(self: &Arc<Self>, config: &Config, region: &str) {
        let wanted = names_of(config, region);
        let mut running = lock(&self.running);
        if running.settings.as_ref() != Some(&config.dns) && !wanted.is_empty() {
            match resolver(&config.dns) {
                Ok(r) => {
                    running.resolver = Some(Arc::new(r));
                    running.settings = Some(config.dns.clone());
                    for (_, t) in running.tasks.drain() {
                        t.cancel();
                    }
                }
                Err(e) => tracing::error!("dns: {e}; names keep the previous settings"),
            }
        }
        running.tasks.retain(|name, t| {
            let keep = wanted.contains(name);
            if !keep {
                t.cancel();
            }
            keep
        });
        self.table.rcu(|t| {
            let mut t = (**t).clone();
            t.retain(|name, _| wanted.contains(name));
            t
        });
        let (Some(resolver), Some(dns)) = (running.resolver.clone(), running.settings.clone())
        else {
            return;
        };
        for name in wanted {
            if running.tasks.contains_key(&name) {
                continue;
            }
            let stop = CancellationToken::new();
            running.tasks.insert(name.clone(), stop.clone());
            tokio::spawn(Arc::clone(self).keep(name, Arc::clone(&resolver), dns.clone(), stop));
        }
    }

    /// The running resolver when `dns` is the running `[dns]`, else a new one for it.
    fn resolver_for(&self, dns: &Dns) -> Result<Arc<TokioResolver>, ResolverError> {
        let running = lock(&self.running);
        match (&running.settings, &running.resolver) {
            (Some(s), Some(r)) if s == dns => Ok(Arc::clone(r)),
            _ => resolver(dns).map(Arc::new),
        }
    }

    /// Stops every task (the node's drain ended).
    pub(crate) fn stop(&self) {
        for (_, t) in lock(&self.running).tasks.drain() {
            t.cancel();
        }
    }

    /// Re-resolves `name` whenever its answer runs out, until `stop`.
    async fn keep(
        self: Arc<Self>,
        name: String,
        resolver: Arc<TokioResolver>,
        dns: Dns,
        stop: CancellationToken,
    ) {
        let mut failures = 0_u32;
        loop {
            let wait = self.table().get(&name).map_or(dns.min_ttl, |s| s.next_in);
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let kept = self.table().get(&name).map(|s| s.addrs.clone());
            let answer = lookup(&resolver, &name, kept.as_deref().unwrap_or_default()).await;
            if stop.is_cancelled() {
                return;
            }
            failures = match answer {
                Answer::Found(..) => 0,
                _ => failures.saturating_add(1),
            };
            self.apply(&name, answer, &dns, failures);
        }
    }

    /// Records one lookup's outcome for `name` (the `failures`-th in a row when it failed),
    /// logs a change once and tells the node when the addresses changed.
    fn apply(&self, name: &str, answer: Answer, dns: &Dns, failures: u32) {
        let old = self.table().get(name).cloned();
        let old_addrs: Arc<[IpAddr]> = old
            .as_ref()
            .map_or_else(|| Arc::from([]), |o| o.addrs.clone());
        let old_error = old.as_ref().and_then(|o| o.error.clone());
        // After a failure: min_ttl, doubling with each failure in a row, at most 30 s (or
        // max_ttl, if shorter).
        let backoff = || {
            let cap = Duration::from_secs(30).min(dns.max_ttl).max(dns.min_ttl);
            dns.min_ttl
                .saturating_mul(1 << failures.saturating_sub(1).min(16))
                .min(cap)
        };
        let (addrs, error, next_in, ttl) = match answer {
            Answer::Found(mut ips, ttl) => {
                self.lookups.ok.increment(1);
                ips.sort();
                ips.dedup();
                let ttl = ttl.clamp(dns.min_ttl, dns.max_ttl);
                (Arc::from(ips), None, ttl, Some(ttl))
            }
            Answer::Gone(result, why) => {
                self.count(result);
                (Arc::from([]), Some(why), backoff(), None)
            }
            Answer::Failed(result, why, mut ips, ttl) => {
                self.count(result);
                ips.sort();
                ips.dedup();
                let ttl = ttl.or_else(|| old.as_ref().and_then(|o| o.ttl));
                (Arc::from(ips), Some(why), backoff(), ttl)
            }
        };
        let moved = addrs != old_addrs;
        if moved || error != old_error {
            let list = |a: &[IpAddr]| {
                if a.is_empty() {
                    return "none".to_owned();
                }
                a.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match &error {
                None => tracing::info!(
                    name,
                    addresses = %list(&addrs),
                    was = %list(&old_addrs),
                    ttl_s = next_in.as_secs_f64(),
                    "dns: name resolved"
                ),
                Some(why) if addrs.is_empty() => tracing::warn!(
                    name,
                    was = %list(&old_addrs),
                    "dns: {why}: the name has no address, its endpoints are out of rotation"
                ),
                Some(why) => tracing::warn!(
                    name,
                    addresses = %list(&addrs),
                    "dns: {why}: keeping the last good addresses"
                ),
            }
        }
        let state = NameState {
            addrs,
            error,
            checked_at: SystemTime::now(),
            next_in,
            ttl,
        };
        self.table.rcu(|t| {
            let mut t = (**t).clone();
            t.insert(name.to_owned(), state.clone());
            t
        });
        if moved {
            self.changed.notify_one();
        }
    }

    fn count(&self, result: &str) {
        match result {
            "nxdomain" => self.lookups.nxdomain.increment(1),
            "no_address" => self.lookups.no_address.increment(1),
            "timeout" => self.lookups.timeout.increment(1),
            _ => self.lookups.error.increment(1),
        }
    }
}

/// The names used by the endpoints of listeners served in `region`.
fn names_of(config: &Config, region: &str) -> BTreeSet<String> {
    config
        .listeners
        .iter()
        .filter(|l| l.regions.iter().any(|r| r == region))
        .flat_map(|l| &l.groups)
        .flat_map(|g| &g.endpoints)
        .filter_map(|e| match &e.address.host {
            Host::Name(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

/// A resolver for `[dns]`: its name servers (UDP, then TCP for a truncated answer) or the
/// system's, with its timeout and attempts; no cache of its own (each name is asked again
/// when its answer runs out, and that is the cache).
fn resolver(dns: &Dns) -> Result<TokioResolver, ResolverError> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = if dns.nameservers.is_empty() {
        TokioResolver::builder_tokio().map_err(ResolverError::SystemSettings)?
    } else {
        let servers = dns
            .nameservers
            .iter()
            .map(|a| {
                let mut s = NameServerConfig::udp_and_tcp(a.ip());
                for c in &mut s.connections {
                    c.port = a.port();
                }
                s
            })
            .collect();
        TokioResolver::builder_with_config(ResolverConfig::from_name_servers(servers), provider)
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    if let Some(t) = dns.timeout {
        opts.timeout = t;
    }
    // The resolver's `attempts` are the queries after the first; resolv.conf's (and gtd's)
    // count the first too (glibc's default: 2).
    opts.attempts = if dns.nameservers.is_empty() {
        opts.attempts.saturating_sub(1)
    } else {
        1
    };
    if let Some(n) = dns.attempts {
        opts.attempts = n.saturating_sub(1) as usize;
    }
    if !dns.nameservers.is_empty() {
        // Name servers chosen in the config answer alone; the system's way includes
        // /etc/hosts, as getaddrinfo(3) does.
        opts.use_hosts_file = ResolveHosts::Never;
    }
    opts.cache_size = 0;
    builder.build().map_err(ResolverError::Build)
}

/// Why no resolver can be set up for a `[dns]` (a start or reload fails with it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolverError {
    /// No name servers configured, and the system's cannot be read.
    #[error("reading the system's DNS settings (/etc/resolv.conf): {0}; set [dns] nameservers")]
    SystemSettings(NetError),
    /// The resolver refuses its settings.
    #[error("setting up the DNS resolver: {0}")]
    Build(NetError),
}

/// One lookup of `name`: A and AAAA asked separately (together, the resolver would report
/// one family's failure as the other's "no record"), combined. A family that answers gives its
/// addresses; one that fails for want of an answer keeps the family's last good ones in
/// `kept`; the name is gone only when both families say so authoritatively.
async fn lookup(resolver: &TokioResolver, name: &str, kept: &[IpAddr]) -> Answer {
    // A name is absolute: the search list of resolv.conf does not apply.
    let fqdn = match Name::from_utf8(name) {
        Ok(mut n) => {
            n.set_fqdn(true);
            n
        }
        Err(e) => return Answer::Gone("error", format!("{name} is not a DNS name: {e}")),
    };
    let (v4, v6) = tokio::join!(
        resolver.ipv4_lookup(fqdn.clone()),
        resolver.ipv6_lookup(fqdn)
    );
    let now = Instant::now();
    let mut ips = Vec::new();
    let mut ttl: Option<Duration> = None;
    let mut gone: Vec<&'static str> = Vec::new();
    let mut failed: Option<(&'static str, String)> = None;
    for (result, v6) in [(v4, false), (v6, true)] {
        match result {
            Ok(found) => {
                let before = ips.len();
                ips.extend(found.answers().iter().filter_map(|r| r.data.ip_addr()));
                if ips.len() > before {
                    let t = found.valid_until().saturating_duration_since(now);
                    ttl = Some(ttl.map_or(t, |x| x.min(t)));
                } else {
                    gone.push("no_address");
                }
            }
            Err(e) if e.is_nx_domain() => gone.push("nxdomain"),
            Err(e) if e.is_no_records_found() => gone.push("no_address"),
            Err(e) => {
                ips.extend(kept.iter().filter(|ip| ip.is_ipv6() == v6));
                let why = if matches!(e, NetError::Timeout) {
                    ("timeout", format!("lookup of {name} timed out"))
                } else {
                    ("error", format!("lookup of {name} failed: {e}"))
                };
                failed.get_or_insert(why);
            }
        }
    }
    match (failed, ttl) {
        // Both families answered (one may have had no record).
        (None, Some(ttl)) => Answer::Found(ips, ttl),
        (None, None) if gone.contains(&"nxdomain") => {
            Answer::Gone("nxdomain", format!("{name} does not exist (NXDOMAIN)"))
        }
        (None, None) => Answer::Gone("no_address", format!("{name} has no A or AAAA record")),
        (Some((result, why)), _) => Answer::Failed(result, why, ips, ttl),
    }
}

/// `l` with every named endpoint replaced by one target per address of its name (the same
/// keys; see the module's doc), or by a `down` placeholder while the name has none.
pub(crate) fn expand(l: &Listener, names: &Table) -> Listener {
    let named = l
        .groups
        .iter()
        .flat_map(|g| &g.endpoints)
        .any(|e| matches!(e.address.host, Host::Name(_)));
    if !named {
        return l.clone();
    }
    let mut out = l.clone();
    for g in &mut out.groups {
        let mut endpoints = Vec::with_capacity(g.endpoints.len());
        for e in &g.endpoints {
            let Host::Name(name) = &e.address.host else {
                endpoints.push(e.clone());
                continue;
            };
            let addrs = names.get(name).map(|s| &s.addrs[..]).unwrap_or_default();
            if addrs.is_empty() {
                let mut placeholder = e.clone();
                placeholder.down = true;
                endpoints.push(placeholder);
            }
            for ip in addrs {
                let mut target = e.clone();
                target.address = e.address.resolved(*ip);
                endpoints.push(target);
            }
        }
        g.endpoints = endpoints;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use super::*;
    use gtd_core::balance::{GroupBalancer, StaticRequest};
    use gtd_core::config::{self, Protocol};

    fn listener(balance: &str) -> Listener {
        let text = format!(
            r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "g"
  region = "cn-beijing"
  {balance}
    [[listener.group.endpoint]]
    address = "api.internal:443"
    weight = 2
    [[listener.group.endpoint]]
    address = "10.0.0.9:443"
    [[listener.group.endpoint]]
    address = "gone.internal:443"
"#
        );
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let catalog = config::load_catalog(&root.join("regions/catalog.toml")).unwrap();
        let cfg = config::parse(&text, Path::new("config.toml"), &catalog).unwrap();
        cfg.listeners[0].clone()
    }

    fn table(entries: &[(&str, &[&str])]) -> Table {
        entries
            .iter()
            .map(|(name, ips)| {
                let addrs: Vec<IpAddr> = ips.iter().map(|a| a.parse().unwrap()).collect();
                let state = NameState {
                    addrs: Arc::from(addrs),
                    error: None,
                    checked_at: SystemTime::now(),
                    next_in: Duration::from_secs(5),
                    ttl: Some(Duration::from_secs(5)),
                };
                ((*name).to_owned(), state)
            })
            .collect()
    }

    #[test]
    fn every_address_of_a_name_is_a_target_with_its_keys_and_a_name_without_one_is_down() {
        let names = table(&[("api.internal", &["10.0.0.2", "10.0.0.1", "2001:db8::1"])]);
        let l = expand(&listener(""), &names);
        let e = &l.groups[0].endpoints;
        let ids: Vec<String> = e.iter().map(|e| e.address.id().into_owned()).collect();
        assert_eq!(
            ids,
            [
                "api.internal:443@10.0.0.2",
                "api.internal:443@10.0.0.1",
                "api.internal:443@2001:db8::1",
                "10.0.0.9:443",
                "gone.internal:443",
            ]
        );
        // The name's keys on each of its addresses; its text stays the name (Host header,
        // SNI, the admin API).
        assert!(e[..3].iter().all(|e| e.weight == 2 && !e.down));
        assert!(e[..3].iter().all(|e| e.address.text == "api.internal:443"));
        assert_eq!(e[2].address.ip(), Some("2001:db8::1".parse().unwrap()));
        // Never resolved: one placeholder, out of rotation, that connects nowhere.
        assert!(e[4].down);
        assert_eq!(e[4].address.ip(), None);
        assert!(crate::connect::resolve(&e[4].address).is_err());
    }

    #[test]
    fn a_name_with_three_addresses_weighs_three_times_in_the_rotation() {
        let names = table(&[("api.internal", &["10.0.0.1", "10.0.0.2", "10.0.0.3"])]);
        let l = expand(&listener(""), &names);
        let now = std::time::Instant::now();
        let b = GroupBalancer::new(&l.groups[0], Protocol::Http, now);
        let shares = b.expected_shares(now).unwrap();
        // Weight 2 on each of three addresses against 1 for the literal (the placeholder of
        // gone.internal is down): 6/7 to the name.
        let name: f64 = shares[..3].iter().sum();
        assert!((name - 6.0 / 7.0).abs() < 1e-9, "{shares:?}");
        assert!((shares[3] - 1.0 / 7.0).abs() < 1e-9, "{shares:?}");
        assert_eq!(shares[4], 0.0);
    }

    #[test]
    fn on_a_ketama_ring_the_addresses_share_the_names_points() {
        let ring = "balance = \"hash\"\n  hash_key = \"$request_uri\"\n  consistent = true";
        let one = table(&[("api.internal", &["10.0.0.1"])]);
        let three = table(&[("api.internal", &["10.0.0.1", "10.0.0.2", "10.0.0.3"])]);
        let now = std::time::Instant::now();
        let a = GroupBalancer::new(
            &expand(&listener(ring), &one).groups[0],
            Protocol::Http,
            now,
        );
        let b = GroupBalancer::new(
            &expand(&listener(ring), &three).groups[0],
            Protocol::Http,
            now,
        );
        // The name keeps its arcs of the ring when it gains addresses: a key it owned stays
        // with one of its addresses, a key of the literal endpoint stays there.
        let (mut moved, mut kept_by_name) = (0, 0);
        for i in 0..2000 {
            let uri = format!("/item/{i}");
            let req = StaticRequest::from_ip("192.0.2.1".parse().unwrap()).with_uri(uri);
            let before = a.pick(&req, now).map(|p| p.index()).unwrap();
            let after = b.pick(&req, now).map(|p| p.index()).unwrap();
            let name_before = before == 0;
            let name_after = after < 3;
            if name_before != name_after {
                moved += 1;
            }
            kept_by_name += usize::from(name_before && name_after);
        }
        assert_eq!(moved, 0);
        assert!(kept_by_name > 0);
    }
}
