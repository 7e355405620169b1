//! Measured round-trip times, pure (docs/design.md §3.1): each probe's round trip feeds an
//! exponentially weighted moving average per endpoint ([`Ewma`], α = [`ALPHA`] per sample), and
//! a group's RTT is that of its best usable endpoint ([`group_rtt`]). The ranking that uses it,
//! with its hysteresis, is [`crate::split::priority`]'s.

/// Weight of the newest sample.
pub const ALPHA: f64 = 0.3;

/// One endpoint's measured RTT, ms: the first sample as it is, then `α · sample + (1 − α) ·
/// average`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ewma {
    value: Option<f64>,
    samples: u64,
}

impl Ewma {
    /// Takes one sample, ms (negative or not finite: ignored).
    pub fn observe(&mut self, sample_ms: f64) {
        if !sample_ms.is_finite() || sample_ms < 0.0 {
            return;
        }
        self.value = Some(match self.value {
            None => sample_ms,
            Some(v) => ALPHA * sample_ms + (1.0 - ALPHA) * v,
        });
        self.samples += 1;
    }

    /// The average, once there is a sample.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Samples taken so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

/// A group's measured RTT from its endpoints' `(usable, average)`: the lowest average among
/// usable endpoints; when none usable has been measured, the lowest of any (an unhealthy
/// group's rank matters only for when it comes back); `None` when nothing was measured.
pub fn group_rtt(endpoints: impl IntoIterator<Item = (bool, Option<f64>)>) -> Option<f64> {
    let mut usable: Option<f64> = None;
    let mut any: Option<f64> = None;
    for (ok, v) in endpoints {
        let Some(v) = v else { continue };
        any = Some(any.map_or(v, |a| a.min(v)));
        if ok {
            usable = Some(usable.map_or(v, |a| a.min(v)));
        }
    }
    usable.or(any)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_is_taken_as_is_then_weighted() {
        let mut e = Ewma::default();
        assert_eq!(e.value(), None);
        e.observe(10.0);
        assert_eq!(e.value(), Some(10.0));
        e.observe(20.0);
        assert!((e.value().unwrap() - 13.0).abs() < 1e-9);
        e.observe(f64::NAN);
        e.observe(-1.0);
        assert_eq!(e.samples(), 2);
    }

    #[test]
    fn converges_to_a_steady_value() {
        let mut e = Ewma::default();
        e.observe(1.0);
        for _ in 0..40 {
            e.observe(50.0);
        }
        assert!((e.value().unwrap() - 50.0).abs() < 0.01);
    }

    #[test]
    fn group_rtt_is_the_best_usable_endpoint() {
        assert_eq!(group_rtt([]), None);
        assert_eq!(group_rtt([(true, None), (false, None)]), None);
        assert_eq!(
            group_rtt([(true, Some(9.0)), (false, Some(1.0)), (true, Some(4.0))]),
            Some(4.0)
        );
        // Nothing usable measured: the best of what was.
        assert_eq!(
            group_rtt([(false, Some(7.0)), (true, None), (false, Some(3.0))]),
            Some(3.0)
        );
    }
}
