//! A node's live ranking of one listener's groups (docs/design.md §3.1), pure: the catalogue
//! (or static) ranking to start from, then measured RTTs fed in as they arrive, re-ranked with
//! [`Hysteresis`] so that groups a few ms apart do not trade places on jitter. The node's
//! planner owns one per listener and feeds it; `sim --latency` predicts what it settles on.

use crate::config::Listener;
use crate::regions::Catalog;

use super::priority::Hysteresis;
use super::{Ranking, RttSource, rank};

/// The ranking of one listener on one node, kept up to date with measured RTTs.
#[derive(Debug, Clone)]
pub struct Ranker {
    /// The ranking before any measurement: catalogue estimates, or static priorities.
    base: Ranking,
    /// Measured re-ranking; `None` when static priorities decide.
    hysteresis: Option<Hysteresis>,
    /// The sample count last fed to the hysteresis: a round is fed when it grew.
    samples: u64,
    /// The ranking now.
    now: Ranking,
    /// Group names (config order), to know whether a reload kept the same groups.
    names: Vec<String>,
}

impl Ranker {
    /// The ranking of `listener` on a node in `region` before anything is measured.
    pub fn new(listener: &Listener, catalog: &Catalog, region: &str) -> Ranker {
        let base = rank(listener, catalog, region, |_| None);
        let hysteresis =
            (!base.source.contains(&RttSource::Static)).then(|| Hysteresis::new(&base.rtt_ms));
        Ranker {
            now: base.clone(),
            base,
            hysteresis,
            samples: 0,
            names: listener.groups.iter().map(|g| g.name.clone()).collect(),
        }
    }

    /// The same listener after a reload: when the groups are the same (names, config order)
    /// and static priorities neither appeared nor went, the order reached so far and the
    /// sample count carry over; estimates come from the new config.
    pub fn carried(self, next: Ranker) -> Ranker {
        let same =
            self.names == next.names && self.hysteresis.is_some() == next.hysteresis.is_some();
        if !same {
            return next;
        }
        let mut now = next.base.clone();
        now.order.clone_from(&self.now.order);
        if next.hysteresis.is_none() {
            now.order.clone_from(&next.base.order);
        }
        Ranker {
            base: next.base,
            hysteresis: self.hysteresis,
            samples: self.samples,
            now,
            names: next.names,
        }
    }

    /// Takes each group's measured RTT now (config index; `None`: not measured yet, the
    /// estimate stands in) and the count of samples behind them so far. When the count grew,
    /// that is one round for the hysteresis. Returns true when the order changed.
    pub fn observe(&mut self, measured_ms: &[Option<f64>], samples: u64) -> bool {
        let n = self.base.rtt_ms.len();
        debug_assert_eq!(measured_ms.len(), n);
        for i in 0..n {
            match measured_ms.get(i).copied().flatten() {
                Some(ms) => {
                    self.now.rtt_ms[i] = ms;
                    if self.base.source[i] != RttSource::Static {
                        self.now.source[i] = RttSource::Measured;
                    }
                }
                None => {
                    self.now.rtt_ms[i] = self.base.rtt_ms[i];
                    self.now.source[i] = self.base.source[i];
                }
            }
        }
        let Some(h) = &mut self.hysteresis else {
            return false;
        };
        if samples == self.samples {
            return false;
        }
        self.samples = samples;
        let source = &self.now.source;
        if h.observe_measured(&self.now.rtt_ms, |i| source[i] == RttSource::Measured) {
            self.now.order = h.order().to_vec();
            return true;
        }
        false
    }

    /// The ranking now: order, RTT per group and where each came from.
    pub fn ranking(&self) -> &Ranking {
        &self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use std::path::Path;

    const TWO: &str = r#"
[[listener]]
name = "web"
protocol = "tcp"
port = 8080
regions = ["cn-beijing"]

[[listener.group]]
name = "beijing"
region = "cn-beijing"

[[listener.group.endpoint]]
address = "127.0.0.1:9001"

[[listener.group]]
name = "shanghai"
region = "cn-shanghai"

[[listener.group.endpoint]]
address = "127.0.0.1:9002"
"#;

    fn ranker(text: &str) -> Ranker {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let catalog = config::load_catalog(&root.join("regions/catalog.toml")).unwrap();
        let cfg = config::parse(text, Path::new("config.toml"), &catalog).unwrap();
        Ranker::new(&cfg.listeners[0], &cfg.catalog, "cn-beijing")
    }

    #[test]
    fn starts_from_the_catalogue_and_moves_only_past_the_margin() {
        let mut r = ranker(TWO);
        assert_eq!(r.ranking().order, [0, 1]);
        assert_eq!(r.ranking().source, [RttSource::Estimated; 2]);
        // Beijing measured 50 ms, Shanghai 1 ms: Shanghai overtakes after three rounds.
        let mut rounds = 0;
        for s in 1..=10 {
            rounds += 1;
            if r.observe(&[Some(50.0), Some(1.0)], s) {
                break;
            }
        }
        assert_eq!(rounds, 3);
        assert_eq!(r.ranking().order, [1, 0]);
        assert_eq!(r.ranking().source, [RttSource::Measured; 2]);
        assert_eq!(r.ranking().rtt_ms, [50.0, 1.0]);
    }

    #[test]
    fn jitter_within_the_margin_never_flips() {
        let mut r = ranker(TWO);
        for s in 1..=100 {
            let (a, b) = if s % 2 == 0 { (2.0, 1.0) } else { (1.0, 2.0) };
            assert!(!r.observe(&[Some(a), Some(b)], s));
        }
        assert_eq!(r.ranking().order, [0, 1]);
    }

    #[test]
    fn no_new_sample_is_no_new_round() {
        let mut r = ranker(TWO);
        for _ in 0..10 {
            r.observe(&[Some(50.0), Some(1.0)], 1);
        }
        assert_eq!(
            r.ranking().order,
            [0, 1],
            "one sample is one round, however often read"
        );
    }

    #[test]
    fn static_priority_is_never_reordered() {
        let text = TWO
            .replace(
                "region = \"cn-beijing\"\n\n",
                "region = \"cn-beijing\"\npriority = 1\n\n",
            )
            .replace(
                "region = \"cn-shanghai\"\n\n",
                "region = \"cn-shanghai\"\npriority = 2\n\n",
            );
        let mut r = ranker(&text);
        for s in 1..=10 {
            assert!(!r.observe(&[Some(50.0), Some(1.0)], s));
        }
        assert_eq!(r.ranking().order, [0, 1]);
        assert_eq!(r.ranking().source, [RttSource::Static; 2]);
        assert_eq!(r.ranking().rtt_ms, [50.0, 1.0]);
    }

    #[test]
    fn a_reload_with_the_same_groups_keeps_the_order_reached() {
        let mut r = ranker(TWO);
        for s in 1..=3 {
            r.observe(&[Some(50.0), Some(1.0)], s);
        }
        let kept = r.clone().carried(ranker(TWO));
        assert_eq!(kept.ranking().order, [1, 0]);
        let other = TWO.replace("name = \"shanghai\"", "name = \"sh\"");
        let fresh = r.carried(ranker(&other));
        assert_eq!(fresh.ranking().order, [0, 1]);
    }
}
