//! The pick inside a group, in words ([`GroupBalancer::trace`]).

use super::*;
use crate::balance::{Admit, EndpointState, HashWalk};
use crate::config::Group;

/// Why the pick may not choose endpoint `e` at `now`: every reason that holds, health ones only
/// where the pick heeds health (not in fail-open, which ignores them).
fn why_not(e: &EndpointState, admit: Admit, now: Instant) -> Vec<String> {
    let mut why = Vec::new();
    if admit == Admit::Usable {
        if let Some(left) = e.ejected_for(now) {
            why.push(format!(
                "ejected by outlier detection ({:.0} s left)",
                left.as_secs_f64().ceil()
            ));
        }
        if e.is_passively_down(now) {
            why.push(format!(
                "marked ({} failures within fail_timeout)",
                e.config().max_fails
            ));
        }
        if !e.is_active_healthy() {
            why.push("checked out (its health checks fail)".to_owned());
        }
    }
    if e.config().drain {
        why.push("drained (the config's or a fleet drain)".to_owned());
    }
    if e.is_admin_drained() {
        why.push("drained (admin API)".to_owned());
    }
    if !e.is_enabled() {
        why.push("disabled (admin API)".to_owned());
    }
    if e.config().down {
        why.push("down in the config".to_owned());
    }
    if let Some(max) = e.config().max_conns
        && e.active() >= max
    {
        why.push(format!("at max_conns ({max} in flight)"));
    }
    why
}

/// The pick inside group `gi`, from its balancer's trace: what decided it, in words, and
/// each endpoint as the method saw it.
pub(super) fn pick_explain(
    l: &Listener,
    gi: usize,
    b: &GroupBalancer,
    ask: &Ask<'_>,
    plan: &Plan,
    now: Instant,
) -> PickExplain {
    let g = &l.groups[gi];
    let t: PickTrace = b.trace(ask, plan.admit(), now);
    let address = |i: usize| g.endpoints[i].address.text.clone();
    let endpoints = g
        .endpoints
        .iter()
        .zip(b.endpoints())
        .enumerate()
        .map(|(i, (cfg, state))| PickEndpoint {
            address: cfg.address.text.clone(),
            weight: cfg.weight,
            backup: cfg.backup,
            candidate: t.candidates[i],
            why_not: if t.candidates[i] {
                Vec::new()
            } else {
                why_not(state, plan.admit(), now)
            },
            share: t.shares.as_ref().map(|s| s[i] * 100.0),
            active: state.active(),
            effective_weight: state.effective_weight(now),
            latency_ms: state.latency().map(|d| d.as_secs_f64() * 1000.0),
            feedback: state.feedback(),
        })
        .collect();
    let (by, reason, hash) = walk_words(g, &t);
    let backup = if t.backup {
        " (no primary can serve: backups)"
    } else {
        ""
    };
    PickExplain {
        group: g.name.clone(),
        method: g.balance.name().to_owned(),
        endpoint: t.endpoint.map(address),
        by: by.to_owned(),
        reason: format!("{reason}{backup}"),
        hash,
        endpoints,
    }
}

/// What decided the pick (`by`), why in words, and a hash walk's steps.
fn walk_words<'t>(g: &Group, t: &'t PickTrace) -> (&'t str, String, Option<HashExplain>) {
    let none_usable = !t.candidates.iter().any(|&c| c);
    match &t.walk {
        _ if none_usable => (
            "none",
            "no endpoint can take it (none usable, or all at max_conns): the next eligible \
             group is tried"
                .to_owned(),
            None,
        ),
        Walk::Hash(w) => hash_words(g, w),
        Walk::HashThenRotation(w) => {
            let why = if w.key.is_empty() {
                "the key is empty for this request".to_owned()
            } else {
                format!("no usable endpoint within {} steps", w.steps.len())
            };
            (
                "rotation",
                format!(
                    "{} walk: {why}, so the weighted rotation picks (each endpoint its weight's \
                     part)",
                    w.kind
                ),
                Some(hash_explain(g, w)),
            )
        }
        Walk::Rotation { because } => (
            "rotation",
            match because {
                Some(why) => format!("{why}: the weighted rotation picks"),
                None => "smooth weighted rotation: each endpoint gets its weight's part of the \
                         picks, whoever the client is"
                    .to_owned(),
            },
            None,
        ),
        Walk::Random { two } => (
            "random",
            if *two {
                "random two: two weighted draws, the one with fewer active connections per \
                 weight"
                    .to_owned()
            } else {
                "a weighted random draw: each endpoint its weight's part".to_owned()
            },
            None,
        ),
        Walk::Load => (
            "load",
            format!(
                "{} is load-dependent: it reads the endpoints' {} now (listed per endpoint)",
                t.method,
                match t.method {
                    "least_conn" => "active connections per weight",
                    "least_time" => "average response times",
                    _ => "reported feedback values",
                }
            ),
            None,
        ),
    }
}

/// A hash walk that named an endpoint: the hash, the slot or ring point, and the steps that
/// landed on endpoints that could not take it.
fn hash_words(g: &Group, w: &HashWalk) -> (&'static str, String, Option<HashExplain>) {
    let last = w
        .steps
        .last()
        .expect("a walk that named an endpoint has a step");
    let skipped = w.steps.len() - 1;
    let how = match w.kind {
        "ip_hash" => format!(
            "ip_hash of {} (the first three octets of IPv4, all of IPv6) is {}; {} mod \
             total weight {} = slot {}",
            w.key, last.hash, last.hash, w.space, last.slot
        ),
        "hash consistent" => format!(
            "crc32({:?}) = {}; the first ring point at or after it is point {} ({}) of {}",
            w.key, w.hash, last.slot, last.hash, w.space
        ),
        _ => format!(
            "crc32({:?}) = {}; slot {} of total weight {}",
            w.key, last.hash, last.slot, w.space
        ),
    };
    let skipped = if skipped > 0 {
        format!(" after {skipped} step(s) landing on endpoints that could not take it")
    } else {
        String::new()
    };
    (
        w.kind,
        format!(
            "{how}: {}{skipped}",
            g.endpoints[last.endpoint].address.text
        ),
        Some(hash_explain(g, w)),
    )
}

/// A hash walk's key, hash and steps, each step's endpoint by address.
fn hash_explain(g: &Group, w: &HashWalk) -> HashExplain {
    HashExplain {
        key: w.key.clone(),
        hash: w.hash,
        space: w.space,
        steps: w
            .steps
            .iter()
            .map(|s| HashStepExplain {
                round: s.round,
                hash: s.hash,
                slot: s.slot,
                endpoint: g.endpoints[s.endpoint].address.text.clone(),
                usable: s.usable,
            })
            .collect(),
    }
}
