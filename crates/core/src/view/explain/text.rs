//! The explanation as an operator reads it (`gtd explain`).

use super::build::pct;
use super::*;

impl Explain {
    /// The explanation as an operator reads it (`gtd explain`).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}\nlistener {} ({}) on the {} node: mode {}, failover {}, affinity {}, groups by {}\n",
            self.summary,
            self.listener,
            self.protocol,
            self.region,
            self.mode,
            self.failover,
            self.affinity,
            self.priority_by
        );
        if let Some(r) = &self.rule {
            out += &format!("rule: {}\n", r.reason);
        }
        out += "\ngroups, priority order:\n";
        for g in &self.groups {
            out += &format!(
                "  {}. {} ({}) rtt {} ms [{}], ratio {}, {} ({}/{} usable, min {}), share {} %\n",
                g.rank,
                g.name,
                g.region,
                g.rtt_ms
                    .map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
                g.rtt_source,
                g.ratio,
                g.health,
                g.usable,
                g.endpoints,
                g.min_healthy,
                pct(g.share)
            );
            out += &format!("     rank: {}\n", g.rank_reason);
            out += &format!("     share ({}): {}\n", g.step, g.share_reason);
            if let Some(f) = &g.failover {
                out += &format!("     failover from {}: {}\n", f.from, f.reason);
            }
        }
        if let Some(c) = &self.chosen {
            out += &format!("\nchosen: {}: {}\n", c.group, c.reason);
        }
        if let Some(c) = &self.chances {
            out += "\nchances (rotation):";
            for c in c {
                out += &format!(" {} {} %", c.group, pct(c.percent));
            }
            out += "\n";
        }
        for g in &self.groups {
            let Some(p) = &g.pick else { continue };
            out += &format!(
                "\npick in {} ({}): {}\n  {}\n",
                p.group,
                p.method,
                p.endpoint.as_deref().unwrap_or("by the method"),
                p.reason
            );
            for e in &p.endpoints {
                let cannot = match (e.candidate, e.why_not.is_empty()) {
                    (true, _) => String::new(),
                    (false, true) => " (cannot take it)".to_owned(),
                    (false, false) => format!(" (cannot take it: {})", e.why_not.join(", ")),
                };
                out += &format!(
                    "    {} weight {}{}{} share {} active {}\n",
                    e.address,
                    e.weight,
                    if e.backup { " backup" } else { "" },
                    cannot,
                    e.share
                        .map_or_else(|| "load-dependent".to_owned(), |s| format!("{} %", pct(s))),
                    e.active
                );
            }
        }
        if let Some(c) = &self.sticky_cookie {
            out += &format!("\nA request carrying the {c} cookie goes where the cookie names.\n");
        }
        out
    }
}
