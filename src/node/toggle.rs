//! An endpoint enabled or disabled at run time through the admin API.

use std::time::Instant;

use super::{Inner, events};

impl Inner {
    /// Enables or disables one endpoint at run time (survives reloads until changed again).
    pub(crate) fn set_enabled(
        &self,
        listener: &str,
        group: &str,
        address: &str,
        enabled: bool,
    ) -> std::result::Result<(), String> {
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
            .collect();
        if chosen.is_empty() {
            return Err(format!("no endpoint {address:?} in group {group:?}"));
        }
        for (_, state) in chosen {
            state.set_enabled(enabled, Instant::now());
        }
        tracing::info!(
            listener,
            group,
            endpoint = address,
            enabled,
            "endpoint toggled"
        );
        events::toggled(self.registry.events(), [listener, group, address], enabled);
        l.replan(Instant::now());
        Ok(())
    }
}
