//! Endpoint health and measured latency from active checks, pure (docs/design.md §3.1, §5):
//!
//! - [`verdict`]: the state machine (thresholds, `explicit`, `essential`, flap damping) that
//!   turns each check's result into "healthy" or "unhealthy" and says why;
//! - [`outlier`]: what the answers real requests get say of an endpoint (HTTP): streaks of
//!   5xx and gateway failures that eject it for a while;
//! - [`rtt`]: each probe's round trip into an average per endpoint, and a group's RTT;
//! - [`spread`]: where in its interval each endpoint's checks fall, so that a node's checks do
//!   not all start at once.
//!
//! The checks themselves (sockets, timers) are I/O and belong to the node
//! (gtd-node's `checks`); they hand results to these, as pingora keeps `observe_health`
//! beside its prober.

pub mod outlier;
pub mod rtt;
pub mod verdict;

use std::time::Duration;

/// The delay before an endpoint's first check, within `[0, interval)`: a fixed, unkeyed hash
/// (FNV-1a with the splitmix finaliser, as every placement hash in gtd) of `listener NUL group
/// NUL address`, so a node's checks are spread over the interval rather than sent together,
/// and every restart spreads them the same way.
pub fn spread(listener: &str, group: &str, address: &str, interval: Duration) -> Duration {
    let key = format!("{listener}\0{group}\0{address}");
    let h = crate::hash::mix(crate::hash::fnv1a(key.as_bytes()));
    let nanos = u64::try_from(interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_nanos(h % nanos)
}

pub use verdict::{Change, Check, Rules, Verdict};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_spread_over_the_interval() {
        let interval = Duration::from_secs(5);
        let offsets: Vec<Duration> = (0..200)
            .map(|i| spread("web", "g", &format!("127.0.0.1:{}", 9000 + i), interval))
            .collect();
        assert!(offsets.iter().all(|&o| o < interval));
        // Fixed: the same endpoint, the same offset.
        assert_eq!(offsets[7], spread("web", "g", "127.0.0.1:9007", interval));
        // Spread: every fifth of the interval gets some of the 200.
        for fifth in 0..5 {
            let lo = interval * fifth / 5;
            let hi = interval * (fifth + 1) / 5;
            let n = offsets.iter().filter(|&&o| o >= lo && o < hi).count();
            assert!(n > 10, "fifth {fifth}: {n} of 200");
        }
    }
}
