//! `gtd fleet history`: the kept revisions, newest first, each with when and by whom it was
//! pushed, the pusher's message (`gtd push -m`) and what changed against the revision before
//! it. The change is `gtd fleet diff`'s: its text difference (counted in lines) and the two
//! revisions validated as it validates them, then summarised by listener, group, ratio and
//! endpoint ([`changes`], pure).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::compare::{text_diff, validated};
use super::stale::Stale;
use super::words::utc;
use super::{Access, Revision, Store};
use gtd_core::config::Config;

/// The kept revisions as `gtd fleet history` lists them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Key prefix.
    pub prefix: String,
    /// Newest first.
    pub revisions: Vec<Item>,
    /// Read from one member's own store, etcd having no quorum ([`read_or_stale`]).
    #[serde(default)]
    pub stale: bool,
    /// Where that stale read came from.
    #[serde(default)]
    pub stale_from: Option<Stale>,
}

/// One revision in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Its number.
    pub revision: u64,
    /// When it was pushed, ms since the Unix epoch.
    pub pushed_at_ms: u64,
    /// Who pushed it, as recorded: `user@host`, and `as etcd user NAME` when etcd's users
    /// were on.
    pub pushed_by: String,
    /// The etcd user that wrote it, when etcd's users were on.
    pub etcd_user: Option<String>,
    /// The pusher's message (`gtd push -m`; empty when none was given).
    pub message: String,
    /// The revision whose text it republished (`gtd push --rollback`).
    pub rollback_of: Option<u64>,
    /// What changed against the revision before it (none: that one is not kept, or this is
    /// revision 1).
    pub changes: Option<Changes>,
}

/// What changed between two revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// The revision compared with.
    pub against: u64,
    /// Lines added to the config and catalogue texts (`gtd fleet diff`'s `+` lines).
    pub lines_added: usize,
    /// Lines removed.
    pub lines_removed: usize,
    /// Listeners, groups, ratios and endpoints added, removed or changed; empty when only
    /// other settings changed, or when [`Changes::unvalidated`].
    pub items: Vec<Change>,
    /// Why the two configs could not be compared key by key here (a file one names is not on
    /// this machine): only the line counts say what changed.
    pub unvalidated: Option<String>,
}

/// One thing added, removed or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// `listener`, `group`, `ratio`, `health_check`, `endpoint` or `catalogue`.
    pub kind: String,
    /// `web`, `web/beijing`, `web/beijing/10.0.0.1:80`; empty for the catalogue.
    pub name: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    /// For a change: what, `50 -> 0`, `port 8080 -> 8081`.
    pub detail: String,
}

impl Change {
    fn new(kind: &str, name: String, change: &str, detail: String) -> Change {
        Change {
            kind: kind.to_owned(),
            name,
            change: change.to_owned(),
            detail,
        }
    }
}

/// [`read`] from a quorum; when etcd has none (the read fails as an outage does), at once from
/// the first member that answers from its own store, marked stale, as `gtd fleet` does
/// ([`super::stale`]): the history is there to read during an outage, when it matters most.
pub async fn read_or_stale(
    access: &Access,
    prefix: &str,
    limit: Option<usize>,
) -> Result<History, super::Error> {
    let fresh = async {
        let mut store = Store::connect(access, prefix).await?;
        read(&mut store, limit).await
    };
    match fresh.await {
        Err(e) if super::transient(&e) => {
            let Ok((mut store, stale)) =
                Store::connect_stale(access, prefix, super::describe(&e)).await
            else {
                return Err(e);
            };
            let mut history = read(&mut store, limit).await?;
            history.stale = true;
            history.stale_from = Some(stale);
            Ok(history)
        }
        read => read,
    }
}

/// Reads the newest `limit` kept revisions (all with none) and what each changed.
pub async fn read(store: &mut Store, limit: Option<usize>) -> Result<History, super::Error> {
    let kept = store.kept().await?;
    let from = limit.map_or(0, |l| kept.len().saturating_sub(l));
    let mut revisions = Vec::new();
    // The revision before the first listed, when kept, to compare it with.
    let mut before: Option<Revision> = match from.checked_sub(1) {
        Some(i) => store.revision(kept[i]).await?,
        None => None,
    };
    for &n in &kept[from..] {
        let Some(r) = store.revision(n).await? else {
            // Deleted by a push since the listing.
            continue;
        };
        let changes = before
            .as_ref()
            .filter(|b| b.revision + 1 == r.revision)
            .map(|b| compare(b, &r));
        revisions.push(item(&r, changes));
        before = Some(r);
    }
    revisions.reverse();
    Ok(History {
        prefix: store.prefix().to_owned(),
        revisions,
        stale: false,
        stale_from: None,
    })
}

fn item(r: &Revision, changes: Option<Changes>) -> Item {
    Item {
        revision: r.revision,
        pushed_at_ms: r.pushed_at_ms,
        pushed_by: r.pushed_by.clone(),
        etcd_user: r
            .pushed_by
            .split_once(" as etcd user ")
            .map(|(_, u)| u.to_owned()),
        message: r.message.clone(),
        rollback_of: r.rollback_of,
        changes,
    }
}

/// `new` against `old`: `gtd fleet diff`'s text difference counted, and both validated as it
/// validates them, compared key by key.
pub fn compare(old: &Revision, new: &Revision) -> Changes {
    let diff = text_diff(old, new, &format!("revision {}", new.revision));
    let count = |sign: char, header: &str| {
        diff.lines()
            .filter(|l| l.starts_with(sign) && !l.starts_with(header))
            .count()
    };
    let (lines_added, lines_removed) = (count('+', "+++"), count('-', "---"));
    let (items, unvalidated) = match (validated(old), validated(new)) {
        (Ok(a), Ok(b)) => {
            let mut items = changes(&a, &b);
            if old.catalog != new.catalog {
                items.push(Change::new(
                    "catalogue",
                    String::new(),
                    "changed",
                    String::new(),
                ));
            }
            (items, None)
        }
        (Err(e), _) | (_, Err(e)) => (Vec::new(), Some(e.to_string())),
    };
    Changes {
        against: old.revision,
        lines_added,
        lines_removed,
        items,
        unvalidated,
    }
}

/// The listeners, groups, ratios and endpoints `new` adds, removes or changes against `old`,
/// in `new`'s order (what it removes after what it keeps).
pub fn changes(old: &Config, new: &Config) -> Vec<Change> {
    let mut out = Vec::new();
    let olds: BTreeMap<&str, _> = old.listeners.iter().map(|l| (l.name.as_str(), l)).collect();
    for l in &new.listeners {
        let Some(o) = olds.get(l.name.as_str()) else {
            out.push(Change::new(
                "listener",
                l.name.clone(),
                "added",
                String::new(),
            ));
            continue;
        };
        let mut how = Vec::new();
        if o.protocol != l.protocol {
            how.push(format!(
                "protocol {} -> {}",
                o.protocol.as_str(),
                l.protocol.as_str()
            ));
        }
        if o.port != l.port {
            how.push(format!("port {} -> {}", o.port, l.port));
        }
        if o.regions != l.regions {
            how.push(format!(
                "regions {} -> {}",
                o.regions.join(","),
                l.regions.join(",")
            ));
        }
        if !how.is_empty() {
            out.push(Change::new(
                "listener",
                l.name.clone(),
                "changed",
                how.join(", "),
            ));
        }
        groups(&mut out, &l.name, &o.groups, &l.groups);
    }
    for o in &old.listeners {
        if !new.listeners.iter().any(|l| l.name == o.name) {
            out.push(Change::new(
                "listener",
                o.name.clone(),
                "removed",
                String::new(),
            ));
        }
    }
    out
}

fn groups(
    out: &mut Vec<Change>,
    listener: &str,
    old: &[gtd_core::config::Group],
    new: &[gtd_core::config::Group],
) {
    for g in new {
        let name = format!("{listener}/{}", g.name);
        let Some(o) = old.iter().find(|o| o.name == g.name) else {
            out.push(Change::new("group", name, "added", String::new()));
            continue;
        };
        if o.ratio != g.ratio {
            out.push(Change::new(
                "ratio",
                name.clone(),
                "changed",
                format!("{} -> {}", o.ratio, g.ratio),
            ));
        }
        group_settings(out, &name, o, g);
        for e in &g.endpoints {
            let id = format!("{name}/{}", e.address.text);
            match o
                .endpoints
                .iter()
                .find(|x| x.address.text == e.address.text)
            {
                None => out.push(Change::new("endpoint", id, "added", String::new())),
                Some(x) if x != e => {
                    let mut how = Vec::new();
                    let mut flag = |what: &str, a: bool, b: bool| {
                        if a != b {
                            how.push(format!("{what} {a} -> {b}"));
                        }
                    };
                    flag("down", x.down, e.down);
                    flag("drain", x.drain, e.drain);
                    flag("enabled", x.enabled, e.enabled);
                    flag("backup", x.backup, e.backup);
                    if x.weight != e.weight {
                        how.push(format!("weight {} -> {}", x.weight, e.weight));
                    }
                    if how.is_empty() {
                        how.push("settings".to_owned());
                    }
                    out.push(Change::new("endpoint", id, "changed", how.join(", ")));
                }
                Some(_) => {}
            }
        }
        for x in &o.endpoints {
            if !g.endpoints.iter().any(|e| e.address.text == x.address.text) {
                let id = format!("{name}/{}", x.address.text);
                out.push(Change::new("endpoint", id, "removed", String::new()));
            }
        }
    }
    for o in old {
        if !new.iter().any(|g| g.name == o.name) {
            let name = format!("{listener}/{}", o.name);
            out.push(Change::new("group", name, "removed", String::new()));
        }
    }
}

/// What a group's own keys changed: its health check (added, removed, or which of its keys
/// changed) and its balancing keys. A push that takes every check away shows as that, not as
/// line counts.
fn group_settings(
    out: &mut Vec<Change>,
    name: &str,
    o: &gtd_core::config::Group,
    g: &gtd_core::config::Group,
) {
    match (&o.health_check, &g.health_check) {
        (None, Some(_)) => out.push(Change::new(
            "health_check",
            name.to_owned(),
            "added",
            String::new(),
        )),
        (Some(_), None) => out.push(Change::new(
            "health_check",
            name.to_owned(),
            "removed",
            String::new(),
        )),
        (Some(a), Some(b)) if a != b => {
            let mut keys = Vec::new();
            let mut key = |k: &str, differs: bool| {
                if differs {
                    keys.push(k.to_owned());
                }
            };
            key("protocol", a.protocol != b.protocol);
            key("port", a.port != b.port);
            key("interval", a.interval != b.interval);
            key(
                "timeouts",
                (a.timeout, a.connect_timeout, a.read_timeout)
                    != (b.timeout, b.connect_timeout, b.read_timeout),
            );
            key(
                "thresholds",
                (a.healthy_threshold, a.unhealthy_threshold)
                    != (b.healthy_threshold, b.unhealthy_threshold),
            );
            key(
                "request",
                (
                    &a.method,
                    &a.path,
                    &a.host,
                    &a.headers,
                    &a.body,
                    a.id_header,
                ) != (
                    &b.method,
                    &b.path,
                    &b.host,
                    &b.headers,
                    &b.body,
                    b.id_header,
                ),
            );
            key(
                "expect",
                (&a.expect_status, &a.expect_headers, &a.expect_body)
                    != (&b.expect_status, &b.expect_headers, &b.expect_body),
            );
            key("send/expect", (&a.send, &a.expect) != (&b.send, &b.expect));
            key(
                "essential/explicit",
                (a.essential, a.explicit) != (b.essential, b.explicit),
            );
            out.push(Change::new(
                "health_check",
                name.to_owned(),
                "changed",
                keys.join(", "),
            ));
        }
        _ => {}
    }
    let mut how = Vec::new();
    if o.balance != g.balance {
        how.push(format!(
            "balance {} -> {}",
            o.balance.name(),
            g.balance.name()
        ));
    }
    if o.min_healthy != g.min_healthy {
        how.push(format!(
            "min_healthy {} -> {}",
            o.min_healthy, g.min_healthy
        ));
    }
    if o.priority != g.priority {
        how.push("priority".to_owned());
    }
    if o.region != g.region {
        how.push(format!("region {} -> {}", o.region, g.region));
    }
    if !how.is_empty() {
        out.push(Change::new(
            "group",
            name.to_owned(),
            "changed",
            how.join(", "),
        ));
    }
}

impl Change {
    /// `web/hongkong ratio 50 -> 0`, `web/beijing/10.0.0.1:80 endpoint added`.
    pub fn line(&self) -> String {
        if self.kind == "ratio" {
            return format!("{} ratio {}", self.name, self.detail);
        }
        let mut s = format!("{} {}", self.kind.replace('_', " "), self.change);
        if !self.name.is_empty() {
            s = format!("{} {s}", self.name);
        }
        if !self.detail.is_empty() {
            s.push_str(&format!(": {}", self.detail));
        }
        s
    }
}

impl History {
    /// The table an operator reads: one block per revision, newest first.
    pub fn table(&self) -> String {
        let mut out = self
            .stale_from
            .as_ref()
            .map_or_else(String::new, |s| s.banner("later pushes"));
        if self.revisions.is_empty() {
            out.push_str(&format!("fleet {} · nothing published yet\n", self.prefix));
            return out;
        }
        out += &format!(
            "fleet {} · {} kept revision{}, newest first\n",
            self.prefix,
            self.revisions.len(),
            super::words::plural(self.revisions.len())
        );
        for r in &self.revisions {
            out.push_str(&format!(
                "\nrevision {}  {}  by {}{}\n",
                r.revision,
                utc(r.pushed_at_ms),
                r.pushed_by,
                r.rollback_of.map_or(String::new(), |n| format!(
                    "  (rollback to revision {n}'s config)"
                ))
            ));
            if !r.message.is_empty() {
                out.push_str(&format!("  \"{}\"\n", r.message));
            }
            let Some(c) = &r.changes else {
                out.push_str(&if r.revision == 1 {
                    "  the first revision\n".to_owned()
                } else {
                    format!(
                        "  revision {} is no longer kept: nothing to compare with\n",
                        r.revision - 1
                    )
                });
                continue;
            };
            let lines = format!(
                "+{} -{} lines against revision {}",
                c.lines_added, c.lines_removed, c.against
            );
            match (&c.unvalidated, c.items.is_empty()) {
                (Some(why), _) => out.push_str(&format!(
                    "  {lines} (not compared key by key: {})\n",
                    why.lines().next().unwrap_or_default()
                )),
                (None, true) if c.lines_added + c.lines_removed == 0 => out.push_str(&format!(
                    "  no change in the text against revision {}\n",
                    c.against
                )),
                (None, true) => out.push_str(&format!("  {lines}: other settings only\n")),
                (None, false) => {
                    out.push_str(&format!("  {lines}:\n"));
                    for i in &c.items {
                        out.push_str(&format!("    {}\n", i.line()));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let catalog = gtd_core::config::parse_catalog(
            "[[region]]\nid = \"a\"\nname = \"A\"\nlat = 0\nlon = 0\n[[region]]\nid = \"b\"\nname = \"B\"\nlat = 1\nlon = 1\n",
            std::path::Path::new("catalog.toml"),
        )
        .unwrap();
        gtd_core::config::parse(text, std::path::Path::new("config.toml"), &catalog).unwrap()
    }

    const BASE: &str = r#"
[[listener]]
name = "web"
protocol = "tcp"
port = 8080
regions = ["a", "b"]
  [[listener.group]]
  name = "one"
  region = "a"
  ratio = 50
    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"
  [[listener.group]]
  name = "two"
  region = "b"
  ratio = 50
    [[listener.group.endpoint]]
    address = "127.0.0.1:9002"
"#;

    #[test]
    fn ratios_groups_endpoints_and_listeners_are_named_with_how_they_changed() {
        let new = BASE
            .replace("ratio = 50\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1:9001\"",
                "ratio = 0\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1:9001\"\n    weight = 3\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1:9003\"")
            .replace("port = 8080", "port = 8081");
        let got: Vec<String> = changes(&config(BASE), &config(&new))
            .iter()
            .map(Change::line)
            .collect();
        assert_eq!(
            got,
            [
                "web listener changed: port 8080 -> 8081",
                "web/one ratio 50 -> 0",
                "web/one/127.0.0.1:9001 endpoint changed: weight 1 -> 3",
                "web/one/127.0.0.1:9003 endpoint added",
            ]
        );
        let two = BASE
            .split("  [[listener.group]]\n  name = \"two\"")
            .next()
            .unwrap();
        let got: Vec<String> = changes(&config(BASE), &config(two))
            .iter()
            .map(Change::line)
            .collect();
        assert_eq!(got, ["web/two group removed"]);
    }

    #[test]
    fn health_checks_removed_added_or_changed_are_named() {
        let check = "  [listener.group.health_check]\n  interval = \"2s\"\n";
        let checked = BASE.replace("  ratio = 50\n", &format!("  ratio = 50\n{check}"));
        let two = format!(
            "{checked}{}",
            checked
                .replace("\"web\"", "\"game\"")
                .replace("8080", "8090")
        );
        let none = format!(
            "{BASE}{}",
            BASE.replace("\"web\"", "\"game\"").replace("8080", "8090")
        );
        let lines = |old: &str, new: &str| -> Vec<String> {
            changes(&config(old), &config(new))
                .iter()
                .map(Change::line)
                .collect()
        };
        assert_eq!(
            lines(&two, &none),
            [
                "web/one health check removed",
                "web/two health check removed",
                "game/one health check removed",
                "game/two health check removed",
            ]
        );
        assert_eq!(
            lines(
                BASE,
                &BASE.replacen("  ratio = 50\n", &format!("  ratio = 50\n{check}"), 1)
            ),
            ["web/one health check added"]
        );
        let slower = checked.replacen("interval = \"2s\"", "interval = \"5s\"", 1);
        assert_eq!(
            lines(&checked, &slower),
            ["web/one health check changed: interval, timeouts"]
        );
    }
}
