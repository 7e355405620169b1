//! Outlier detection for HTTP groups (docs/design.md §5), pure: what the answers real requests
//! get say about an endpoint that its checks do not. An endpoint whose `/health` says 200
//! while every request gets 503 passes every check; these rules take it out anyway, as
//! Envoy's outlier detection does:
//!
//! - **Streaks.** Every answer is counted: a 5xx adds one to the 5xx streak; a gateway failure
//!   (502, 503, 504, or no answer at all: connect refused, reset, timed out) adds one to the
//!   gateway streak too, while any other 5xx ends the gateway streak; an answer below 500 ends
//!   both. A streak that reaches `consecutive_5xx` or `consecutive_gateway_failures` (0: that
//!   streak never ejects) ejects the endpoint.
//! - **Ejection time** grows with repeats: the n-th ejection lasts `base_ejection_time × n`,
//!   at most `max_ejection_time`; every `base_ejection_time` spent back in service forgets one
//!   of the ejections before.
//! - **A cap**: an ejection that would leave more than `max_ejection_percent` of the group's
//!   endpoints ejected at once does not happen (the streak stays, and the next error tries
//!   again), so a fault that hits every endpoint alike cannot empty a group.
//!
//! An ejected endpoint is out of rotation like a passively marked one, and comes back when its
//! time is over (or when an admin enables it, a reload changes it, or its active checks turn it
//! healthy after failing: it was down and is back). Checks that pass all along do not end an
//! ejection: they are what missed the fault.
//!
//! The atomics these rules drive live with the endpoint's state ([`crate::balance`]); here are
//! only numbers in, decisions out, tested without sockets or clocks.

use std::time::Duration;

use crate::config::Outlier;

/// What an attempt came to, as the streaks count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Any answer below 500 (the endpoint works, whatever it said).
    Fine,
    /// A 5xx answer other than 502, 503 and 504.
    ServerError,
    /// 502, 503, 504, or no answer at all (connect refused, reset, timed out).
    GatewayFailure,
}

impl Answer {
    /// The class of an HTTP status.
    pub fn of_status(status: u16) -> Answer {
        match status {
            502..=504 => Answer::GatewayFailure,
            500..=599 => Answer::ServerError,
            _ => Answer::Fine,
        }
    }
}

/// The two streaks: consecutive 5xx answers, consecutive gateway failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streaks {
    /// 5xx answers (gateway failures included) in a row.
    pub server_errors: u32,
    /// Gateway failures in a row.
    pub gateway_failures: u32,
}

impl Streaks {
    /// The streaks after `answer`.
    pub fn after(self, answer: Answer) -> Streaks {
        match answer {
            Answer::Fine => Streaks::default(),
            Answer::ServerError => Streaks {
                server_errors: self.server_errors.saturating_add(1),
                gateway_failures: 0,
            },
            Answer::GatewayFailure => Streaks {
                server_errors: self.server_errors.saturating_add(1),
                gateway_failures: self.gateway_failures.saturating_add(1),
            },
        }
    }

    /// True when a streak has reached its limit (a limit of 0 never is).
    pub fn tripped(self, rules: &Outlier) -> bool {
        let reached = |n: u32, limit: u32| limit > 0 && n >= limit;
        reached(self.server_errors, rules.consecutive_5xx)
            || reached(self.gateway_failures, rules.consecutive_gateway_failures)
    }
}

/// The number of the ejection about to start, after `previous` ejections the last of which
/// ended `since` ago (1 for a first one): one of the earlier ones is forgotten per
/// `base_ejection_time` spent back in service.
pub fn ejection_number(previous: u32, since: Duration, rules: &Outlier) -> u32 {
    let base = rules.base_ejection_time.as_nanos().max(1);
    let forgotten = u32::try_from(since.as_nanos() / base).unwrap_or(u32::MAX);
    previous.saturating_sub(forgotten).saturating_add(1)
}

/// How long the `n`-th ejection lasts: `base_ejection_time × n`, at most `max_ejection_time`
/// (never less than the base).
pub fn ejection_time(n: u32, rules: &Outlier) -> Duration {
    let cap = rules.max_ejection_time.max(rules.base_ejection_time);
    rules.base_ejection_time.saturating_mul(n.max(1)).min(cap)
}

/// True when one more of a group's `endpoints` may be ejected while `ejected` already are:
/// the group would have at most `max_ejection_percent` of them ejected.
pub fn room_for_one_more(ejected: usize, endpoints: usize, rules: &Outlier) -> bool {
    (ejected as u64 + 1) * 100 <= u64::from(rules.max_ejection_percent) * endpoints as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Outlier {
        Outlier::default()
    }

    #[test]
    fn statuses_fall_into_three_classes() {
        let table = [
            (200, Answer::Fine),
            (404, Answer::Fine),
            (499, Answer::Fine),
            (500, Answer::ServerError),
            (501, Answer::ServerError),
            (502, Answer::GatewayFailure),
            (503, Answer::GatewayFailure),
            (504, Answer::GatewayFailure),
            (505, Answer::ServerError),
            (599, Answer::ServerError),
        ];
        for (status, class) in table {
            assert_eq!(Answer::of_status(status), class, "{status}");
        }
    }

    #[test]
    fn five_5xx_in_a_row_trip_and_a_good_answer_starts_again() {
        let r = rules();
        let mut s = Streaks::default();
        for _ in 0..4 {
            s = s.after(Answer::ServerError);
            assert!(!s.tripped(&r));
        }
        assert!(s.after(Answer::ServerError).tripped(&r));
        assert!(!s.after(Answer::Fine).after(Answer::ServerError).tripped(&r));
    }

    #[test]
    fn gateway_failures_count_in_both_streaks_and_a_500_ends_the_gateway_one() {
        let r = Outlier {
            consecutive_5xx: 0,
            consecutive_gateway_failures: 3,
            ..rules()
        };
        let s = Streaks::default()
            .after(Answer::GatewayFailure)
            .after(Answer::GatewayFailure);
        assert_eq!(
            s,
            Streaks {
                server_errors: 2,
                gateway_failures: 2
            }
        );
        assert!(s.after(Answer::GatewayFailure).tripped(&r));
        let broken = s.after(Answer::ServerError).after(Answer::GatewayFailure);
        assert!(!broken.tripped(&r), "a 500 between ends the gateway streak");
        assert_eq!(broken.server_errors, 4, "but not the 5xx one");
    }

    #[test]
    fn a_limit_of_zero_never_trips() {
        let r = Outlier {
            consecutive_5xx: 0,
            consecutive_gateway_failures: 0,
            ..rules()
        };
        let mut s = Streaks::default();
        for _ in 0..100 {
            s = s.after(Answer::GatewayFailure);
        }
        assert!(!s.tripped(&r));
    }

    #[test]
    fn ejections_grow_with_repeats_up_to_the_cap_and_are_forgotten_in_service() {
        let r = Outlier {
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(100),
            ..rules()
        };
        assert_eq!(ejection_time(1, &r), Duration::from_secs(30));
        assert_eq!(ejection_time(3, &r), Duration::from_secs(90));
        assert_eq!(ejection_time(4, &r), Duration::from_secs(100), "capped");
        assert_eq!(ejection_time(u32::MAX, &r), Duration::from_secs(100));
        assert_eq!(ejection_number(0, Duration::ZERO, &r), 1);
        assert_eq!(ejection_number(2, Duration::from_secs(5), &r), 3);
        assert_eq!(ejection_number(3, Duration::from_secs(65), &r), 2);
        assert_eq!(ejection_number(3, Duration::from_secs(3600), &r), 1);
    }

    #[test]
    fn at_most_max_ejection_percent_of_a_group_at_once() {
        let r = rules(); // 50 %
        assert!(room_for_one_more(0, 2, &r));
        assert!(!room_for_one_more(1, 2, &r));
        assert!(
            !room_for_one_more(0, 1, &r),
            "never the only endpoint at 50 %"
        );
        assert!(room_for_one_more(1, 4, &r) && !room_for_one_more(2, 4, &r));
        let all = Outlier {
            max_ejection_percent: 100,
            ..rules()
        };
        assert!(room_for_one_more(0, 1, &all) && !room_for_one_more(1, 1, &all));
    }
}
