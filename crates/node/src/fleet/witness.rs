//! The node as a witness of the others' departures: when another node's registry entry leaves
//! (its lease ran out, or it drained), the nodes that see it go record when, and the revision
//! it last served, in its expected record (`PREFIX/expected/ID`,
//! [`gtd_fleet::expected`]); a guarded transaction lets one of them write it, once per
//! departure. `gtd fleet` then shows the node missing since then.
//!
//! A departure while no node watches (the whole fleet down, or a node reconnecting) goes
//! unrecorded: the node is still shown missing, without a since.

use std::time::Duration;

use gtd_fleet::Store;
use gtd_fleet::etcd::pb::mvccpb;
use gtd_fleet::registry::Entry;

/// Watches the registry's departures for the session's life (`own`: this node's id, whose own
/// departure it does not record).
pub(super) async fn watch(store: Store, own: String) {
    // The first store revision not yet seen (0: from now).
    let mut from = 0;
    let mut said = false;
    loop {
        let create = gtd_fleet::expected::departures(&store, from);
        if let Ok(mut events) = store.client().watch_with(create).await {
            while let Ok(Some(r)) = events.message().await {
                if r.canceled {
                    // Compacted past `from`: from now on.
                    from = 0;
                    break;
                }
                for event in &r.events {
                    let Some(kv) = &event.kv else { continue };
                    from = from.max(kv.mod_revision + 1);
                    if event.r#type() != mvccpb::event::EventType::Delete {
                        continue;
                    }
                    let Some(last) = event
                        .prev_kv
                        .as_ref()
                        .and_then(|p| serde_json::from_slice::<Entry>(&p.value).ok())
                    else {
                        continue;
                    };
                    if last.id == own {
                        continue;
                    }
                    match store.mark_gone(&last, kv.mod_revision).await {
                        Ok(true) => {
                            tracing::info!(node = %last.id, "fleet: a node left the registry; recorded as missing")
                        }
                        Ok(false) => {}
                        Err(e) if !said => {
                            said = true;
                            tracing::warn!(node = %last.id, error = %gtd_fleet::describe(&e),
                                "fleet: a node's departure not recorded (PREFIX/expected/, docs/operations.md)");
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        // The member lost or the watch ended: the session notices too; try again meanwhile.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
