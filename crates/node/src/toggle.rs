//! An endpoint enabled, disabled, drained or undrained at run time through the admin API.

use std::time::Instant;

use super::{Inner, events};

/// What an endpoint is after a toggle (every address of a name alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Toggled {
    /// Administratively enabled.
    pub(crate) enabled: bool,
    /// Drained through the admin API.
    pub(crate) drained: bool,
}

impl Inner {
    /// Applies `action` to one endpoint at run time (survives reloads until changed again).
    pub(crate) fn toggle(
        &self,
        listener: &str,
        group: &str,
        address: &str,
        action: Action,
    ) -> std::result::Result<Toggled, Unknown> {
        let snap = self.snapshot.load();
        let l = snap
            .listener(listener)
            .ok_or_else(|| Unknown::Listener(listener.to_owned()))?;
        let gi = l
            .groups
            .iter()
            .position(|g| g.name == group)
            .ok_or_else(|| Unknown::Group {
                listener: listener.to_owned(),
                group: group.to_owned(),
            })?;
        // An endpoint as configured (every address of a name), or one address of a name
        // (`NAME:PORT@IP`, as `/status` and the metrics name it).
        let states = l.groups[gi].balancer.endpoints();
        let chosen: Vec<_> = l.cfg.groups[gi]
            .endpoints
            .iter()
            .zip(states)
            .filter(|(e, _)| e.address.text == address || e.address.id() == address)
            .map(|(e, state)| (state, e.address.text == address))
            .collect();
        let Some((first, _)) = chosen.first() else {
            return Err(Unknown::Endpoint {
                group: group.to_owned(),
                address: address.to_owned(),
            });
        };
        let now = Instant::now();
        for (state, by_name) in &chosen {
            match action {
                Action::Enable | Action::Disable => {
                    state.set_enabled(action == Action::Enable, now)
                }
                Action::Drain | Action::Undrain => state.set_drained(action == Action::Drain),
            }
            // What a new address of the name takes over (`GroupBalancer::rebuild`).
            state.set_toggled_by_name(*by_name);
        }
        let done = Toggled {
            enabled: first.is_enabled(),
            drained: first.is_admin_drained(),
        };
        tracing::info!(
            listener,
            group,
            endpoint = address,
            action = action.as_str(),
            "endpoint toggled"
        );
        toggled(self.registry.events(), [listener, group, address], action);
        l.replan(now);
        Ok(done)
    }
}

/// What a toggle names that this node does not have (the admin API's 404).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unknown {
    /// No listener of that name.
    #[error("no listener {0:?} on this node")]
    Listener(String),
    /// No group of that name in the listener.
    #[error("no group {group:?} in listener {listener:?}")]
    Group {
        /// The listener.
        listener: String,
        /// The group asked for.
        group: String,
    },
    /// No endpoint of that address (or `NAME:PORT@IP`) in the group.
    #[error("no endpoint {address:?} in group {group:?}")]
    Endpoint {
        /// The group.
        group: String,
        /// The address asked for.
        address: String,
    },
}

/// What a `POST /endpoints/…/ACTION` does to one endpoint on this node (until changed again;
/// a reload keeps it, a restart forgets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Back in rotation; ends a passive mark and an ejection (docs/design.md §5).
    Enable,
    /// Out of rotation at once, its connections kept.
    Disable,
    /// No new traffic; what is bound to it finishes (a sticky client, a UDP flow).
    Drain,
    /// Ends an admin drain.
    Undrain,
}

impl Action {
    /// The path's last segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Enable => "enable",
            Action::Disable => "disable",
            Action::Drain => "drain",
            Action::Undrain => "undrain",
        }
    }

    pub(crate) fn of(segment: &str) -> Option<Action> {
        [
            Action::Enable,
            Action::Disable,
            Action::Drain,
            Action::Undrain,
        ]
        .into_iter()
        .find(|a| a.as_str() == segment)
    }
}

/// Puts an endpoint (`[listener, group, address]`) enabled or disabled through the admin API
/// on the timeline.
fn toggled(log: &events::EventLog, [listener, group, endpoint]: [&str; 3], action: Action) {
    let what = match action {
        Action::Enable => "enabled",
        Action::Disable => "disabled",
        Action::Drain => "drained",
        Action::Undrain => "undrained",
    };
    let at = events::Place {
        listener: Some(listener),
        group: Some(group),
        endpoint: Some(endpoint),
    };
    log.record(
        events::Kind::Admin,
        at,
        format!("{what} through this node's admin API"),
    );
}
