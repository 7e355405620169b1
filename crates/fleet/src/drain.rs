//! Fleet-wide drains (`gtd drain`, `gtd undrain`; docs/operations.md "Draining an endpoint
//! across the fleet"): one key per drain, `PREFIX/drains/LISTENER/GROUP/ENDPOINT` (or
//! `PREFIX/drains/LISTENER/GROUP` for every endpoint of a group), holding a JSON [`Drain`]. No
//! lease: a drain stays until `gtd undrain`, through node restarts, reloads and revisions.
//!
//! A node applies the drains it reads as the config's own `drain = true` on the endpoints they
//! name ([`apply`]), so that the one rule for a draining endpoint holds (docs/design.md §3.3:
//! no new traffic, what it has finishes, a sticky client still reaches it): the balancers and
//! the split see a config, never a second flag.

use serde::{Deserialize, Serialize};

use super::outcome::Outcome;
use super::words::utc;
use super::{Store, etcd_error, range};
use crate::etcd::pb::etcdserverpb as rpc;
use gtd_core::config::{Config, Endpoint};

/// One drain as `gtd drain` wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// The listener's name.
    pub listener: String,
    /// The group's name.
    pub group: String,
    /// The endpoint's address as the config writes it (`None`: every endpoint of the group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Who drained it (`user@host`, and `as etcd user NAME` when etcd's users are on).
    pub by: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Why (`gtd drain -m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Drain {
    /// What it names.
    pub fn target(&self) -> Target {
        Target {
            listener: self.listener.clone(),
            group: self.group.clone(),
            endpoint: self.endpoint.clone(),
        }
    }

    /// Whether it names endpoint `e` of group `group` of listener `listener`.
    pub fn names(&self, listener: &str, group: &str, e: &Endpoint) -> bool {
        self.listener == listener
            && self.group == group
            && self
                .endpoint
                .as_deref()
                .is_none_or(|a| a == &*e.address.text || a == &*e.address.id())
    }
}

/// What `gtd drain` names: `LISTENER/GROUP/ENDPOINT`, or `LISTENER/GROUP` for every endpoint
/// of the group (those a later revision adds included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The listener's name.
    pub listener: String,
    /// The group's name.
    pub group: String,
    /// The endpoint's address as the config writes it (`None`: the whole group).
    pub endpoint: Option<String>,
}

/// Why a target is not one, or names nothing in the fleet's config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not `LISTENER/GROUP[/ENDPOINT]`.
    #[error("{0:?}: name an endpoint as LISTENER/GROUP/ENDPOINT, or a group as LISTENER/GROUP")]
    Form(String),
    /// No such listener.
    #[error("no listener {listener:?} in revision {revision} (listeners: {known})")]
    Listener {
        /// As given.
        listener: String,
        /// The revision read.
        revision: u64,
        /// The names there are.
        known: String,
    },
    /// No such group.
    #[error("no group {group:?} in listener {listener:?} of revision {revision} (groups: {known})")]
    Group {
        /// The listener.
        listener: String,
        /// As given.
        group: String,
        /// The revision read.
        revision: u64,
        /// The names there are.
        known: String,
    },
    /// No such endpoint.
    #[error(
        "no endpoint {endpoint:?} in group {listener}/{group} of revision {revision} (endpoints: {known})"
    )]
    Endpoint {
        /// The listener.
        listener: String,
        /// The group.
        group: String,
        /// As given.
        endpoint: String,
        /// The revision read.
        revision: u64,
        /// The addresses there are.
        known: String,
    },
}

impl From<&Drain> for gtd_core::view::DrainView {
    /// A fleet-wide drain, as `/status` shows it on each endpoint it covers.
    fn from(d: &Drain) -> Self {
        gtd_core::view::DrainView {
            source: "fleet".to_owned(),
            by: Some(d.by.clone()),
            at_ms: Some(d.at_ms),
            message: d.message.clone(),
            target: Some(d.target().to_string()),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Target, TargetError> {
        let form = || TargetError::Form(s.to_owned());
        let mut parts = s.splitn(3, '/');
        let listener = parts.next().filter(|p| !p.is_empty()).ok_or_else(form)?;
        let group = parts.next().filter(|p| !p.is_empty()).ok_or_else(form)?;
        let endpoint = match parts.next() {
            None => None,
            Some(e) if !e.is_empty() && !e.contains('/') => Some(e.to_owned()),
            Some(_) => return Err(form()),
        };
        Ok(Target {
            listener: listener.to_owned(),
            group: group.to_owned(),
            endpoint,
        })
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.listener, self.group)?;
        if let Some(e) = &self.endpoint {
            write!(f, "/{e}")?;
        }
        Ok(())
    }
}

impl Target {
    /// Checks that the target names something in `config` (revision `revision`'s): the first
    /// name that matches nothing is the error, with the names there are.
    pub fn check(&self, config: &Config, revision: u64) -> Result<(), TargetError> {
        let join = |names: Vec<String>| names.join(", ");
        let l = config
            .listeners
            .iter()
            .find(|l| l.name == self.listener)
            .ok_or_else(|| TargetError::Listener {
                listener: self.listener.clone(),
                revision,
                known: join(config.listeners.iter().map(|l| l.name.clone()).collect()),
            })?;
        let g = l
            .groups
            .iter()
            .find(|g| g.name == self.group)
            .ok_or_else(|| TargetError::Group {
                listener: self.listener.clone(),
                group: self.group.clone(),
                revision,
                known: join(l.groups.iter().map(|g| g.name.clone()).collect()),
            })?;
        let Some(endpoint) = &self.endpoint else {
            return Ok(());
        };
        if g.endpoints.iter().any(|e| &*e.address.text == endpoint) {
            return Ok(());
        }
        Err(TargetError::Endpoint {
            listener: self.listener.clone(),
            group: self.group.clone(),
            endpoint: endpoint.clone(),
            revision,
            known: join(
                g.endpoints
                    .iter()
                    .map(|e| e.address.text.to_string())
                    .collect(),
            ),
        })
    }
}

/// Sets `drain` on every endpoint of `config` that a drain of `drains` names; returns how many
/// endpoints it set (drained by the config already or not). Pure: the node calls it on each
/// config it loads, and on the running one when the drains change.
pub fn apply(config: &mut Config, drains: &[Drain]) -> usize {
    let mut set = 0;
    if drains.is_empty() {
        return set;
    }
    for l in &mut config.listeners {
        for g in &mut l.groups {
            for e in &mut g.endpoints {
                if drains.iter().any(|d| d.names(&l.name, &g.name, e)) {
                    e.drain = true;
                    set += 1;
                }
            }
        }
    }
    set
}

/// The drain of `drains` that names endpoint `e` of `listener`/`group`: one for the endpoint
/// itself before one for its whole group.
pub fn naming<'d>(
    drains: &'d [Drain],
    listener: &str,
    group: &str,
    e: &Endpoint,
) -> Option<&'d Drain> {
    let named = |d: &&Drain| d.names(listener, group, e);
    drains
        .iter()
        .filter(named)
        .find(|d| d.endpoint.is_some())
        .or_else(|| drains.iter().find(named))
}

impl Store {
    /// `PREFIX/drains/`.
    pub fn drains_key(&self) -> String {
        format!("{}/drains/", self.prefix)
    }

    /// The key of `target`'s drain.
    fn drain_key(&self, target: &Target) -> String {
        format!("{}{target}", self.drains_key())
    }

    /// Every drain, in key order, and etcd's store revision when they were read (a watch from
    /// one past it misses nothing). A value that is not a drain is left out.
    pub async fn drains(&mut self) -> Result<(Vec<Drain>, i64), super::Error> {
        let from = self.drains_key();
        let resp = self
            .client
            .range(rpc::RangeRequest {
                serializable: self.serializable,
                ..range(&from, true)
            })
            .await
            .map_err(etcd_error("reading the drains"))?;
        let header = resp.header.as_ref().map_or(0, |h| h.revision);
        let drains = resp
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        Ok((drains, header))
    }

    /// Writes `drain` (its `by` gains the etcd user, as a push's `pushed_by` does); returns it
    /// as written.
    pub async fn put_drain(&mut self, mut drain: Drain) -> Result<Drain, super::Error> {
        if let Some(user) = &self.user {
            drain.by = format!("{} as etcd user {user}", drain.by);
        }
        let put = rpc::PutRequest {
            key: self.drain_key(&drain.target()).into_bytes(),
            value: serde_json::to_vec(&drain).map_err(super::Error::Encode)?,
            ..Default::default()
        };
        self.client
            .put(put)
            .await
            .map_err(etcd_error("writing the drain"))?;
        Ok(drain)
    }

    /// Deletes `target`'s drain; returns the drain that was there, if any.
    pub async fn delete_drain(&mut self, target: &Target) -> Result<Option<Drain>, super::Error> {
        let delete = rpc::DeleteRangeRequest {
            key: self.drain_key(target).into_bytes(),
            prev_kv: true,
            ..Default::default()
        };
        let resp = self
            .client
            .delete_range(delete)
            .await
            .map_err(etcd_error("deleting the drain"))?;
        Ok(resp
            .prev_kvs
            .first()
            .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }
}

/// What `gtd drain` and `gtd undrain` were asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// etcd's members and the credentials to show them.
    pub etcd: super::Access,
    /// Key prefix.
    pub prefix: String,
    /// What to drain or undrain.
    pub target: Target,
    /// `gtd drain -m`.
    pub message: Option<String>,
    /// Drain (true) or undrain.
    pub drain: bool,
}

/// `gtd drain` or `gtd undrain`: the target checked against the current revision's config,
/// then its key written or deleted. A target that names nothing is refused (status 1),
/// nothing written; undraining what is not drained says so and succeeds.
pub async fn run(opts: &Options) -> Result<Outcome, super::Error> {
    let mut store = Store::connect(&opts.etcd, &opts.prefix).await?;
    let target = &opts.target;
    if !opts.drain {
        let out = match store.delete_drain(target).await? {
            Some(d) => format!(
                "{target}: undrained (drained by {} at {})\n",
                d.by,
                utc(d.at_ms)
            ),
            None => format!("{target}: was not drained under {}\n", store.prefix()),
        };
        return Ok(Outcome {
            out,
            err: String::new(),
            code: 0,
        });
    }
    let seen = store.current().await?;
    let Some(revision) = store.named(seen.number).await? else {
        return Ok(refused(format!(
            "nothing is published under {} yet: nothing to drain",
            store.prefix()
        )));
    };
    let config = match revision.validate() {
        Ok(c) => c,
        Err(errors) => {
            return Ok(refused(format!(
                "revision {} does not validate here:\n{}",
                revision.revision,
                errors.report(&revision.config_file())
            )));
        }
    };
    if let Err(e) = target.check(&config, revision.revision) {
        return Ok(refused(e.to_string()));
    }
    let drain = store
        .put_drain(Drain {
            listener: target.listener.clone(),
            group: target.group.clone(),
            endpoint: target.endpoint.clone(),
            by: super::who(),
            at_ms: super::now_ms(),
            message: opts.message.clone(),
        })
        .await?;
    Ok(Outcome {
        out: format!(
            "{target}: drained across the fleet by {} (no new traffic; what it has finishes; \
             `gtd undrain {target}` to end it)\n",
            drain.by
        ),
        err: String::new(),
        code: 0,
    })
}

/// A refusal: on stderr, nothing written, status 1.
fn refused(why: String) -> Outcome {
    Outcome {
        out: String::new(),
        err: format!("gtd: {why}; nothing was written\n"),
        code: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9002"
    drain = true

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"
"#;

    fn config() -> Config {
        let catalog = gtd_core::config::parse_catalog(
            &std::fs::read_to_string(
                std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                    .join("regions/catalog.toml"),
            )
            .unwrap(),
            std::path::Path::new("catalog.toml"),
        )
        .unwrap();
        gtd_core::config::parse(CONFIG, std::path::Path::new("config.toml"), &catalog).unwrap()
    }

    fn drain(target: &str) -> Drain {
        let t: Target = target.parse().unwrap();
        Drain {
            listener: t.listener,
            group: t.group,
            endpoint: t.endpoint,
            by: "ops@h".to_owned(),
            at_ms: 1,
            message: None,
        }
    }

    fn drained(c: &Config) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for l in &c.listeners {
            for g in &l.groups {
                for e in g.endpoints.iter().filter(|e| e.drain) {
                    out.push((l.name.clone(), g.name.clone(), e.address.text.to_string()));
                }
            }
        }
        out
    }

    #[test]
    fn targets_read_as_listener_group_and_endpoint() {
        let t: Target = "web/beijing/[::1]:80".parse().unwrap();
        assert_eq!(t.endpoint.as_deref(), Some("[::1]:80"));
        assert_eq!(t.to_string(), "web/beijing/[::1]:80");
        let t: Target = "web/beijing".parse().unwrap();
        assert_eq!((t.group.as_str(), t.endpoint), ("beijing", None));
        for bad in ["web", "web/", "/beijing", "web/beijing/", "web/b/a/x", ""] {
            assert!(
                matches!(bad.parse::<Target>(), Err(TargetError::Form(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_target_that_names_nothing_is_refused_naming_it() {
        let c = config();
        let table = [
            ("web/beijing/127.0.0.1:9001", None),
            ("web/shanghai", None),
            (
                "api/beijing",
                Some("no listener \"api\" in revision 4 (listeners: web)"),
            ),
            (
                "web/tokyo/127.0.0.1:9001",
                Some(
                    "no group \"tokyo\" in listener \"web\" of revision 4 (groups: beijing, shanghai)",
                ),
            ),
            (
                "web/beijing/127.0.0.1:9101",
                Some(
                    "no endpoint \"127.0.0.1:9101\" in group web/beijing of revision 4 \
                     (endpoints: 127.0.0.1:9001, 127.0.0.1:9002)",
                ),
            ),
        ];
        for (target, want) in table {
            let got = target.parse::<Target>().unwrap().check(&c, 4);
            assert_eq!(
                got.map_err(|e| e.to_string()).err().as_deref(),
                want,
                "{target}"
            );
        }
    }

    #[test]
    fn drains_set_the_configs_drain_on_what_they_name() {
        let mut c = config();
        let base = drained(&c);
        assert_eq!(apply(&mut c, &[]), 0);
        assert_eq!(drained(&c), base);
        let n = apply(
            &mut c,
            &[drain("web/beijing/127.0.0.1:9001"), drain("web/shanghai")],
        );
        assert_eq!(n, 2);
        let names: Vec<String> = drained(&c)
            .into_iter()
            .map(|(l, g, e)| format!("{l}/{g}/{e}"))
            .collect();
        assert_eq!(
            names,
            [
                "web/beijing/127.0.0.1:9001",
                "web/beijing/127.0.0.1:9002",
                "web/shanghai/127.0.0.1:9101"
            ]
        );
    }

    #[test]
    fn an_endpoints_own_drain_comes_before_its_groups() {
        let c = config();
        let e = &c.listeners[0].groups[0].endpoints[0];
        let group = drain("web/beijing");
        let own = Drain {
            message: Some("disk".to_owned()),
            ..drain("web/beijing/127.0.0.1:9001")
        };
        let drains = [group.clone(), own.clone()];
        assert_eq!(naming(&drains, "web", "beijing", e), Some(&own));
        assert_eq!(naming(&drains[..1], "web", "beijing", e), Some(&group));
        assert_eq!(naming(&drains, "web", "shanghai", e), None);
    }

    #[test]
    fn a_drain_reads_back_as_written() {
        let d = Drain {
            message: Some("kernel upgrade".to_owned()),
            ..drain("web/beijing/127.0.0.1:9001")
        };
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Drain>(&text).unwrap(), d);
        let group = serde_json::to_value(drain("web/beijing")).unwrap();
        assert!(group.get("endpoint").is_none(), "{group}");
    }
}
