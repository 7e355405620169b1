//! An endpoint enabled, disabled, drained or undrained at run time through the admin API.

use std::time::Instant;

use super::admin::Action;
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
    ) -> std::result::Result<Toggled, String> {
        let snap = self.snapshot.load();
        let l = snap
            .listener(listener)
            .ok_or_else(|| format!("no listener {listener:?} on this node"))?;
        let gi = l
            .groups
            .iter()
            .position(|g| g.name == group)
            .ok_or_else(|| format!("no group {group:?} in listener {listener:?}"))?;
        // An endpoint as configured (every address of a name), or one address of a name
        // (`NAME:PORT@IP`, as `/status` and the metrics name it).
        let states = l.groups[gi].balancer.endpoints();
        let chosen: Vec<_> = l.cfg.groups[gi]
            .endpoints
            .iter()
            .zip(states)
            .filter(|(e, _)| e.address.text == address || e.address.id() == address)
            .map(|(_, state)| state)
            .collect();
        let Some(first) = chosen.first() else {
            return Err(format!("no endpoint {address:?} in group {group:?}"));
        };
        let now = Instant::now();
        for state in &chosen {
            match action {
                Action::Enable | Action::Disable => {
                    state.set_enabled(action == Action::Enable, now)
                }
                Action::Drain | Action::Undrain => state.set_drained(action == Action::Drain),
            }
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
        events::toggled(self.registry.events(), [listener, group, address], action);
        l.replan(now);
        Ok(done)
    }
}
