//! What-if inputs: scenario files and command-line overrides, resolved against the config.
//!
//! Names follow docs/design.md §8: `GROUP` is that group in every listener that has it, `LISTENER/GROUP`
//! one listener's, `LISTENER/GROUP/ADDRESS` one endpoint (`--down` only). A name that matches
//! nothing is an error.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::Error;
use gtd_core::config::Config;
use gtd_core::health::Check;

type Result<T, E = Error> = std::result::Result<T, E>;

/// A group or an endpoint of the config, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Target {
    pub(crate) listener: usize,
    pub(crate) group: usize,
    /// `None`: the whole group.
    pub(crate) endpoint: Option<usize>,
}

/// Everything that changes the picture besides the config itself.
#[derive(Debug, Default, Clone)]
pub(crate) struct WhatIf {
    /// Groups or endpoints failing their health checks.
    pub(crate) down: Vec<Target>,
    /// Check results replayed through an endpoint's verdict, per (listener, group, endpoint).
    pub(crate) checks: BTreeMap<(usize, usize, usize), Vec<Check>>,
    /// Measured RTT per (node region, listener, group), ms.
    pub(crate) latency: BTreeMap<(String, usize, usize), f64>,
    /// Ratio overrides per (listener, group).
    pub(crate) ratios: BTreeMap<(usize, usize), f64>,
    /// A node's own order of groups per listener (config indices, highest first).
    pub(crate) order: BTreeMap<usize, Vec<usize>>,
    /// Groups taking their share back (`--recovering`) per (listener, group): seconds since
    /// they turned healthy.
    pub(crate) recovering: BTreeMap<(usize, usize), f64>,
    /// Client demand per acceleration region.
    pub(crate) demand: BTreeMap<String, f64>,
    /// `[demand]` entries naming client addresses or prefixes: (as written, the acceleration
    /// region the `[geoip]` database placed them nearest to, amount); their amounts are in
    /// `demand` too.
    pub(crate) demand_clients: Vec<(String, String, f64)>,
}

/// The raw, unresolved form (from a scenario file or flags).
#[derive(Debug, Default, Clone)]
pub(crate) struct RawWhatIf {
    pub(crate) down: Vec<String>,
    /// `NAME` → check results, oldest first (`pass`, `fail`, `timeout`).
    pub(crate) checks: Vec<(String, Vec<String>)>,
    /// `REGION/GROUP` or `REGION/LISTENER/GROUP` → ms.
    pub(crate) latency: Vec<(String, f64)>,
    /// `GROUP` or `LISTENER/GROUP` → percent.
    pub(crate) ratios: Vec<(String, f64)>,
    pub(crate) demand: Vec<(String, f64)>,
    /// `LISTENER` → its groups in a node's own order (a registry entry's).
    pub(crate) order: Vec<(String, Vec<String>)>,
    /// `GROUP` or `LISTENER/GROUP` → seconds since it recovered.
    pub(crate) recovering: Vec<(String, f64)>,
}

impl RawWhatIf {
    /// Reads a scenario file: `[demand]`, `[health] down = [...]`, `[latency]`, `[ratios]`.
    pub(crate) fn from_file(path: &Path) -> Result<RawWhatIf> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadScenario {
            path: path.to_path_buf(),
            source,
        })?;
        let doc: toml::Table = toml::from_str(&text).map_err(|e| {
            let (line, col) = e
                .span()
                .map_or((0, 0), |s| gtd_core::config::position(&text, s.start));
            Error::Scenario(format!("{}:{line}:{col}: {}", path.display(), e.message()))
        })?;
        let mut raw = RawWhatIf::default();
        let at = |key: &str| format!("{}: [{key}]", path.display());
        for (key, value) in &doc {
            match key.as_str() {
                "demand" => raw.demand = numbers(value, &at("demand"))?,
                "latency" => raw.latency = numbers(value, &at("latency"))?,
                "ratios" => raw.ratios = numbers(value, &at("ratios"))?,
                "health" => {
                    let table = value
                        .as_table()
                        .ok_or_else(|| bad(format!("{}: expected a table", at("health"))))?;
                    for (k, v) in table {
                        if k == "checks" {
                            raw.checks.extend(check_lists(v, &at("health"))?);
                            continue;
                        }
                        if k != "down" {
                            return Err(bad(format!(
                                "{}: unknown key {k:?} (expected \"down\" or \"checks\")",
                                at("health")
                            )));
                        }
                        let list = v.as_array().ok_or_else(|| {
                            bad(format!("{}: down must be a list of names", at("health")))
                        })?;
                        for item in list {
                            let name = item.as_str().ok_or_else(|| {
                                bad(format!("{}: down must list names", at("health")))
                            })?;
                            raw.down.push(name.to_owned());
                        }
                    }
                }
                "description" => {}
                other => {
                    return Err(bad(format!(
                        "{}: unknown table [{other}] (expected demand, health, latency, ratios or description)",
                        path.display()
                    )));
                }
            }
        }
        Ok(raw)
    }

    /// Adds the command line's flags after the scenario's entries (later entries win).
    pub(crate) fn extend(&mut self, other: RawWhatIf) {
        self.down.extend(other.down);
        self.checks.extend(other.checks);
        self.latency.extend(other.latency);
        self.ratios.extend(other.ratios);
        self.demand.extend(other.demand);
        self.order.extend(other.order);
        self.recovering.extend(other.recovering);
    }

    /// Resolves every name against `config`.
    pub(crate) fn resolve(&self, config: &Config) -> Result<WhatIf> {
        let mut out = WhatIf::default();
        for name in &self.down {
            out.down.extend(
                resolve_targets(config, name, true).map_err(what(format!("--down {name}")))?,
            );
        }
        for (name, results) in &self.checks {
            let checks = results
                .iter()
                .map(|r| parse_check(r))
                .collect::<Result<Vec<Check>, String>>()
                .map_err(what(format!("checks {name}")))?;
            for t in resolve_targets(config, name, true).map_err(what(format!("checks {name}")))? {
                let g = &config.listeners[t.listener].groups[t.group];
                if g.health_check.is_none() {
                    return Err(Error::WhatIf(format!(
                        "checks {name}: group {:?} of listener {:?} has no health_check, so a node \
                         runs no checks there",
                        g.name, config.listeners[t.listener].name
                    )));
                }
                let endpoints = match t.endpoint {
                    Some(e) => e..e + 1,
                    None => 0..g.endpoints.len(),
                };
                for ei in endpoints {
                    out.checks.insert((t.listener, t.group, ei), checks.clone());
                }
            }
        }
        for (key, ms) in &self.latency {
            if !(ms.is_finite() && *ms >= 0.0) {
                return Err(Error::WhatIf(format!(
                    "latency {key}={ms}: expected milliseconds >= 0"
                )));
            }
            let (region, group) = key.split_once('/').ok_or_else(|| {
                Error::WhatIf(format!(
                    "latency {key:?}: expected REGION/GROUP or REGION/LISTENER/GROUP"
                ))
            })?;
            check_region(config, region).map_err(what(format!("latency {key}")))?;
            for t in
                resolve_targets(config, group, false).map_err(what(format!("latency {key}")))?
            {
                out.latency
                    .insert((region.to_owned(), t.listener, t.group), *ms);
            }
        }
        for (key, ratio) in &self.ratios {
            if !(0.0..=100.0).contains(ratio) {
                return Err(Error::WhatIf(format!(
                    "ratio {key}={ratio} is out of range 0..=100"
                )));
            }
            for t in resolve_targets(config, key, false).map_err(what(format!("ratio {key}")))? {
                out.ratios.insert((t.listener, t.group), *ratio);
            }
        }
        // Regions first (a later entry for a region wins), then client addresses and prefixes,
        // each added to the region it maps to.
        let mut clients = Vec::new();
        for (region, amount) in &self.demand {
            if !(amount.is_finite() && *amount >= 0.0) {
                return Err(Error::WhatIf(format!(
                    "demand {region}={amount}: expected an amount >= 0"
                )));
            }
            if let Some(ip) = client_address(region) {
                clients.push((region, ip, *amount));
                continue;
            }
            check_region(config, region).map_err(what(format!("demand {region}")))?;
            out.demand.insert(region.clone(), *amount);
        }
        for (key, ip, amount) in clients {
            let region = demand_region(config, ip).map_err(what(format!("demand {key}")))?;
            *out.demand.entry(region.clone()).or_default() += amount;
            out.demand_clients.push((key.clone(), region, amount));
        }
        for (listener, groups) in &self.order {
            let Some(li) = config.listeners.iter().position(|l| &l.name == listener) else {
                continue;
            };
            let l = &config.listeners[li];
            let mut order: Vec<usize> = Vec::new();
            for gi in groups
                .iter()
                .filter_map(|g| l.groups.iter().position(|cg| &cg.name == g))
            {
                if !order.contains(&gi) {
                    order.push(gi);
                }
            }
            out.order.insert(li, order);
        }
        for (key, secs) in &self.recovering {
            if !(secs.is_finite() && *secs >= 0.0) {
                return Err(Error::WhatIf(format!(
                    "recovering {key}={secs}: expected seconds >= 0 since the group recovered"
                )));
            }
            let targets =
                resolve_targets(config, key, false).map_err(what(format!("recovering {key}")))?;
            if targets
                .iter()
                .all(|t| config.listeners[t.listener].failback_ramp.is_zero())
            {
                return Err(Error::WhatIf(format!(
                    "recovering {key}={secs}: its listener sets no failback_ramp, so a group \
                     that recovers takes its whole share back at once (set failback_ramp = \
                     \"60s\", say, on the listener)"
                )));
            }
            for t in targets {
                out.recovering.insert((t.listener, t.group), *secs);
            }
        }
        out.down.sort();
        out.down.dedup();
        Ok(out)
    }
}

/// One check result as written: `pass`, `fail` (an answer, not the expected one) or `timeout`
/// (no answer: refused, reset, timed out).
fn parse_check(s: &str) -> Result<Check, String> {
    match s.trim() {
        "pass" => Ok(Check::Passed),
        "fail" => Ok(Check::Refuted),
        "timeout" => Ok(Check::Unanswered),
        other => Err(format!(
            "{other:?} is not a check result (expected pass, fail or timeout)"
        )),
    }
}

/// Parses `NAME=RESULT,RESULT,...` from a flag.
pub fn parse_checks(s: &str) -> Result<(String, Vec<String>), String> {
    let (name, list) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=pass,fail,timeout,..., got {s:?}"))?;
    Ok((
        name.trim().to_owned(),
        list.split(',').map(|r| r.trim().to_owned()).collect(),
    ))
}

fn check_lists(value: &toml::Value, at: &str) -> Result<Vec<(String, Vec<String>)>> {
    let table = value
        .as_table()
        .ok_or_else(|| bad(format!("{at}: checks must be a table of NAME = [results]")))?;
    table
        .iter()
        .map(|(k, v)| {
            let list = v
                .as_array()
                .ok_or_else(|| bad(format!("{at}: checks {k:?} must be a list of results")))?;
            let results = list
                .iter()
                .map(|r| {
                    r.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| bad(format!("{at}: checks {k:?} must list strings")))
                })
                .collect::<Result<Vec<String>>>()?;
            Ok((k.clone(), results))
        })
        .collect()
}

/// Parses `NAME=NUMBER` from a flag.
pub fn parse_assignment(s: &str) -> Result<(String, f64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=NUMBER, got {s:?}"))?;
    let number = value
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{value:?} is not a number"))?;
    Ok((name.trim().to_owned(), number))
}

fn numbers(value: &toml::Value, at: &str) -> Result<Vec<(String, f64)>> {
    let table = value
        .as_table()
        .ok_or_else(|| bad(format!("{at}: expected a table")))?;
    table
        .iter()
        .map(|(k, v)| {
            let n = match v {
                toml::Value::Integer(i) => *i as f64,
                toml::Value::Float(f) => *f,
                _ => return Err(bad(format!("{at}: {k:?} must be a number"))),
            };
            Ok((k.clone(), n))
        })
        .collect()
}

/// A `[demand]` key that names clients: an address (`203.0.113.7`) or a prefix
/// (`203.0.113.0/24`), which stands for its network address; `None` for a region id.
fn client_address(key: &str) -> Option<IpAddr> {
    if let Ok(ip) = key.parse::<IpAddr>() {
        return Some(ip);
    }
    let (ip, len) = key.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return None;
    }
    Some(match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(u32::from(32 - len)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(u32::from(128 - len)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    })
}

/// The acceleration region (one a listener serves) nearest, by great-circle distance, to where
/// the `[geoip]` database places `ip`.
fn demand_region(config: &Config, ip: IpAddr) -> Result<String, String> {
    let Some(geoip) = &config.geoip else {
        return Err(
            "a client address needs a [geoip] database in the config to be placed".to_owned(),
        );
    };
    let Some(place) = geoip.db.lookup(ip) else {
        return Err(format!(
            "{ip} is not in the [geoip] database {}",
            geoip.database.display()
        ));
    };
    let Some(at) = place.location else {
        return Err(format!(
            "the [geoip] database has no latitude/longitude for {ip} (a Country database, or a \
             record without a location): it cannot be placed near a region"
        ));
    };
    let regions = acceleration_regions(config);
    gtd_core::split::location::nearest_region(
        at,
        regions.iter().map(String::as_str),
        &config.catalog,
    )
    .map(str::to_owned)
    .ok_or_else(|| "no listener serves a region of the catalogue".to_owned())
}

/// The regions some listener serves, first-listed order, each once.
pub(crate) fn acceleration_regions(config: &Config) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in config.listeners.iter().flat_map(|l| &l.regions) {
        if !out.contains(r) {
            out.push(r.clone());
        }
    }
    out
}

fn check_region(config: &Config, region: &str) -> Result<(), String> {
    if config.catalog.get(region).is_none() {
        return Err(format!("unknown region {region:?} (not in the catalogue)"));
    }
    Ok(())
}

/// Resolves `GROUP`, `LISTENER/GROUP` or (with `endpoints`) `LISTENER/GROUP/ADDRESS`.
fn resolve_targets(config: &Config, name: &str, endpoints: bool) -> Result<Vec<Target>, String> {
    let parts: Vec<&str> = name.splitn(3, '/').collect();
    let mut found = Vec::new();
    for (li, l) in config.listeners.iter().enumerate() {
        for (gi, g) in l.groups.iter().enumerate() {
            match parts.as_slice() {
                [group] if g.name == *group => found.push(Target {
                    listener: li,
                    group: gi,
                    endpoint: None,
                }),
                [listener, group] if l.name == *listener && g.name == *group => {
                    found.push(Target {
                        listener: li,
                        group: gi,
                        endpoint: None,
                    })
                }
                [listener, group, address]
                    if endpoints && l.name == *listener && g.name == *group =>
                {
                    if let Some(ei) = g.endpoints.iter().position(|e| e.address.text == *address) {
                        found.push(Target {
                            listener: li,
                            group: gi,
                            endpoint: Some(ei),
                        });
                    }
                }
                _ => {}
            }
        }
    }
    if found.is_empty() {
        let form = if endpoints {
            "GROUP, LISTENER/GROUP or LISTENER/GROUP/ADDRESS"
        } else {
            "GROUP or LISTENER/GROUP"
        };
        return Err(format!(
            "{name:?} matches no group or endpoint of the config (expected {form})"
        ));
    }
    Ok(found)
}

/// A scenario file's content that is not a scenario.
fn bad(message: String) -> Error {
    Error::Scenario(message)
}

/// What a what-if's problem becomes: `--down NAME: ...`, `latency KEY: ...`.
fn what(context: String) -> impl FnOnce(String) -> Error {
    move |problem| Error::WhatIf(format!("{context}: {problem}"))
}
