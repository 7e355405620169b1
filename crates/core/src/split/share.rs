//! What the cascade reads and writes for one group: its [`GroupFacts`] (ratio, health, usable
//! part) and its [`Share`] of the listener's traffic. Their own room, below both
//! [`super::cascade`] (the walk) and [`super::graceful`] (the grading on top of it), which
//! each use them.

/// Facts about one group that the cascade needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupFacts {
    /// Traffic distribution ratio, percent, 0..=100.
    pub ratio: f64,
    /// The group has at least `min_healthy` usable endpoints.
    pub healthy: bool,
    /// The usable part of the group, 0..=1: the weight of its usable endpoints over the weight
    /// of all of them. Only `failover = "graceful"` reads it; for the other modes it is 1, so
    /// that an endpoint's change that cannot move the split does not rebuild the plan.
    pub fraction: f64,
}

impl GroupFacts {
    /// A group with `ratio` that is healthy (every endpoint usable) or not.
    pub fn new(ratio: f64, healthy: bool) -> GroupFacts {
        GroupFacts {
            ratio,
            healthy,
            fraction: if healthy { 1.0 } else { 0.0 },
        }
    }
}

/// One group's part of the split, percent of the node's traffic for the listener.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Share {
    /// Taken in the walk: `remaining * ratio / 100`.
    pub first_pass: f64,
    /// Its equal part of what the walk left over.
    pub leftover: f64,
    /// `failover = "graceful"`: what the groups above passed down to this one (0 otherwise).
    pub spill: f64,
    /// `failover = "graceful"`: the part of `first_pass + leftover + spill` the group keeps,
    /// `min(1, overprovisioning × fraction)`, 0 when unhealthy (0 in the other modes).
    pub keep: f64,
    /// The group's share: `first_pass + leftover`; under graceful, what it keeps, scaled up
    /// when the last groups passed some down past the end (docs/design.md §3.3).
    pub total: f64,
}

impl Share {
    /// The share in its parts, [first pass, leftover, spill], each at what the group keeps of
    /// it, so that they add up to `total` (for drawing the split). In the cascade modes that is
    /// `[first_pass, leftover, 0]`; under graceful every part of what reached the group times
    /// `total / (first_pass + leftover + spill)`.
    pub fn kept_parts(&self) -> [f64; 3] {
        let reached = self.first_pass + self.leftover + self.spill;
        let scale = if reached > 0.0 {
            self.total / reached
        } else {
            0.0
        };
        [
            self.first_pass * scale,
            self.leftover * scale,
            self.spill * scale,
        ]
    }
}
