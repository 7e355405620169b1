//! The node's event timeline (`GET /events`, the dashboard's timeline): the last
//! [`EventLog::CAPACITY`] failovers, rank changes (and reorders held back), every change of an
//! endpoint's or a group's state both ways (checks, passive marks, ejections, drains, admin),
//! reloads and revisions, each with when, where and why.
//!
//! A bounded ring behind a short mutex. It is written only when such an event happens (a plan
//! changing mode, a mark, an ejection, a reload): never on the per-request path while nothing
//! happens, and each of those writers already logs a line and re-plans.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

use gtd_core::sync::lock;
use gtd_core::view::build::unix_ms;
use gtd_core::view::{EventView, Events};

/// What kind of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A listener's plan entered failover.
    Failover,
    /// A listener's plan left failover for the cascade.
    Failback,
    /// Any other change of a listener's mode (fail-open, no route, back from them).
    Mode,
    /// Measured round trips reordered a listener's groups.
    Rank,
    /// Passive checks took an endpoint out of rotation.
    Passive,
    /// Outlier detection ejected an endpoint.
    Ejection,
    /// The config was reloaded (or the reload rejected).
    Reload,
    /// A fleet revision was applied (or refused).
    Revision,
    /// A fleet-wide drain began or ended (`gtd drain`, `gtd undrain`).
    Drain,
    /// An endpoint was enabled or disabled through this node's admin API (or the config).
    Admin,
    /// Active health checks took an endpoint out of rotation, or let it back.
    Check,
    /// A group became unhealthy, drained or healthy again.
    Group,
    /// The ramp this node drives (`gtd push --ramp`) took a step, judged one, or went back.
    Ramp,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Failover => "failover",
            Kind::Failback => "failback",
            Kind::Mode => "mode",
            Kind::Rank => "rank",
            Kind::Passive => "passive",
            Kind::Ejection => "ejection",
            Kind::Reload => "reload",
            Kind::Revision => "revision",
            Kind::Drain => "drain",
            Kind::Admin => "admin",
            Kind::Check => "check",
            Kind::Group => "group",
            Kind::Ramp => "ramp",
        }
    }
}

/// Where an event happened: the listener, group and endpoint it concerns, where they apply.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Place<'a> {
    pub(crate) listener: Option<&'a str>,
    pub(crate) group: Option<&'a str>,
    pub(crate) endpoint: Option<&'a str>,
}

/// The ring.
#[derive(Debug, Default)]
pub struct EventLog {
    ring: Mutex<VecDeque<EventView>>,
}

impl EventLog {
    /// Events kept.
    pub const CAPACITY: usize = 100;

    /// Records an event that happened now; the oldest goes when the ring is full.
    pub(crate) fn record(&self, kind: Kind, at: Place<'_>, message: String) {
        let event = EventView {
            at_unix_ms: unix_ms(SystemTime::now()),
            kind: kind.as_str().to_owned(),
            listener: at.listener.map(str::to_owned),
            group: at.group.map(str::to_owned),
            endpoint: at.endpoint.map(str::to_owned),
            message,
        };
        let mut ring = lock(&self.ring);
        if ring.len() == Self::CAPACITY {
            ring.pop_front();
        }
        ring.push_back(event);
    }

    /// The `/events` document: the events kept, newest first.
    pub fn recent(&self) -> Events {
        let ring = lock(&self.ring);
        Events {
            capacity: Self::CAPACITY,
            events: ring.iter().rev().cloned().collect(),
        }
    }
}

/// Puts a reload on the timeline: of `new`, a fleet revision (`revision`), else of the config
/// `what` names (`reload`); applied, or rejected with its first error.
pub(crate) fn reloaded(
    log: &EventLog,
    new: Option<&gtd_fleet::Revision>,
    what: &str,
    result: &Result<(), crate::Error>,
) {
    let kind = if new.is_some() {
        Kind::Revision
    } else {
        Kind::Reload
    };
    let message = match result {
        Ok(()) => format!("{what} applied"),
        Err(e) => {
            let e = e.to_string();
            let first = e.lines().next().unwrap_or_default();
            let more = e.lines().count().saturating_sub(1);
            let more = if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            };
            format!("{what} rejected, the running config stays: {first}{more}")
        }
    };
    log.record(kind, Place::default(), message);
}

/// Puts the fleet-wide drains that began or ended on the timeline: those of `now` not in
/// `before`, and those of `before` not in `now`.
pub(crate) fn drains_changed(
    log: &EventLog,
    before: &[gtd_fleet::drain::Drain],
    now: &[gtd_fleet::drain::Drain],
) {
    for (d, began) in now
        .iter()
        .filter(|d| !before.contains(d))
        .map(|d| (d, true))
        .chain(
            before
                .iter()
                .filter(|d| !now.contains(d))
                .map(|d| (d, false)),
        )
    {
        let message = if began {
            let whole = if d.endpoint.is_none() {
                " (every endpoint of the group)"
            } else {
                ""
            };
            let why = d
                .message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"));
            format!(
                "drained across the fleet{whole} by {}{why}: no new traffic, what it has finishes",
                d.by
            )
        } else {
            format!("undrained across the fleet (drained by {})", d.by)
        };
        let at = Place {
            listener: Some(&d.listener),
            group: Some(&d.group),
            endpoint: d.endpoint.as_deref(),
        };
        log.record(Kind::Drain, at, message);
    }
}

/// Puts a decision of the ramp this node drives on the timeline.
pub(crate) fn ramp(log: &EventLog, message: String) {
    log.record(Kind::Ramp, Place::default(), message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_hundred_newest_first() {
        let log = EventLog::default();
        for i in 0..130 {
            let at = Place {
                listener: Some("web"),
                ..Place::default()
            };
            log.record(Kind::Reload, at, format!("reload {i}"));
        }
        let doc = log.recent();
        assert_eq!(doc.events.len(), EventLog::CAPACITY);
        assert_eq!(doc.events[0].message, "reload 129");
        assert_eq!(doc.events[99].message, "reload 30");
        assert_eq!(doc.events[0].kind, "reload");
        assert_eq!(doc.events[0].listener.as_deref(), Some("web"));
        assert_eq!(doc.events[0].group, None);
    }
}
