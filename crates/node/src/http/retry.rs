//! HTTP's retry rule (docs/design.md §4, retries): after each attempt of a request, what comes
//! next, as a value — the endpoint's answer goes to the client, another attempt goes to the
//! next endpoint of the walk, or gtd gives up and answers itself. Decided synchronously, apart
//! from the loop that sends (as linkerd2-proxy keeps its retry policy apart from its sending
//! loop): the listener's [`Budget`] (`retry`, `tries`, `retry_timeout`, shared with TCP and
//! UDP) plus HTTP's own rule on top:
//!
//! - an answer with a status out of `unhealthy_status` goes to the client as it is;
//! - an answer with one of `unhealthy_status`, a connect failure, a timeout or a broken
//!   connection are retried while the budget allows, the body can be sent again (there is none,
//!   or no byte of it left) and the method is idempotent, nothing was sent (a connect failure)
//!   or `retry_non_idempotent` is set — and the walk has an endpoint left; otherwise the last
//!   answer goes to the client as it is, or gtd answers for the failure;
//! - a failure that is nobody's or the client's (this node out of open files, the client's body
//!   broke off or stalled, a response head gtd does not pass on, a target that cannot be made)
//!   is never retried.

use std::time::Instant;

use http::Method;

use super::failure::Failure;
use super::methods::idempotent;
use crate::attempt::Budget;

/// What the last failed attempt left.
#[derive(Debug)]
pub(crate) enum Last {
    /// No attempt was made: no group could take the request.
    Nothing,
    /// The last attempt failed so.
    Failed(Failure),
}

/// How one attempt ended, as the rule sees it. The endpoint's answer itself stays with the
/// caller: the rule needs only whether it was healthy (a response is a few hundred bytes, and
/// every move of it through the decision is a copy on the request path).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ended {
    /// The endpoint answered; `unhealthy` when the status is one of `unhealthy_status`.
    Answered { unhealthy: bool },
    /// No answer to pass on.
    Failed(Failure),
}

/// What the request itself allows, known before its first attempt but for the body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resend {
    /// The method is idempotent, or `retry_non_idempotent` is set: a request that reached the
    /// endpoint may still go again.
    pub(crate) after_sent: bool,
    /// The body can be sent again (there is none, or no byte of it left).
    pub(crate) replayable: bool,
}

impl Resend {
    /// The rule's view of a request with `method` on a listener with `retry_non_idempotent`.
    pub(crate) fn new(method: &Method, retry_non_idempotent: bool, replayable: bool) -> Resend {
        Resend {
            after_sent: retry_non_idempotent || idempotent(method),
            replayable,
        }
    }
}

/// What comes after an attempt; `W` is where another attempt goes.
#[derive(Debug)]
pub(crate) enum Next<W> {
    /// The endpoint's answer goes to the client.
    Respond,
    /// Another attempt, at `to` (an unhealthy answer this one got is dropped unread).
    Retry { to: W },
    /// gtd answers for the last attempt.
    GiveUp(Last),
}

/// What follows an attempt that `ended` so, for a request that allows `resend`, with the
/// listener's `budget` at `now`. `walk` gives the next endpoint of the request's walk: it is
/// asked only when the rule lets another attempt start (a pick counts against its endpoint).
pub(crate) fn next<W>(
    ended: Ended,
    resend: Resend,
    budget: &Budget,
    now: Instant,
    walk: impl FnOnce() -> Option<W>,
) -> Next<W> {
    let (sent, failure) = match ended {
        Ended::Answered { unhealthy: false } => return Next::Respond,
        Ended::Answered { .. } => (true, None),
        // Nothing reached the endpoint.
        Ended::Failed(failure @ Failure::Connect(_)) => (false, Some(failure)),
        Ended::Failed(failure @ (Failure::Timeout | Failure::Broken)) => (true, Some(failure)),
        Ended::Failed(
            failure @ (Failure::BadTarget
            | Failure::Exhausted
            | Failure::ClientGone
            | Failure::ClientStalled
            | Failure::BadResponse),
        ) => return Next::GiveUp(Last::Failed(failure)),
    };
    let may = budget.allows(now) && resend.replayable && (!sent || resend.after_sent);
    match (if may { walk() } else { None }, failure) {
        (Some(to), _) => Next::Retry { to },
        (None, None) => Next::Respond,
        (None, Some(failure)) => Next::GiveUp(Last::Failed(failure)),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::*;
    use crate::http::failure::Cause;

    /// What the rule decided, by name (the walk's endpoint is "b").
    #[derive(Debug, PartialEq)]
    enum Got {
        Respond,
        Retry,
        GiveUp(Option<Failure>),
    }

    /// A case: what it shows, how the attempt ended, the request, the budget, whether the walk
    /// has an endpoint left, and what the rule decides.
    type Case<'a> = (&'a str, Ended, Resend, &'a Budget, bool, Got);

    fn decide(ended: Ended, resend: Resend, budget: &Budget, left: bool) -> Got {
        let asked = Cell::new(false);
        let walk = || {
            asked.set(true);
            left.then_some("b")
        };
        let decided = next(ended, resend, budget, Instant::now(), walk);
        let got = match decided {
            Next::Respond => Got::Respond,
            Next::Retry { to } => {
                assert_eq!(to, "b");
                Got::Retry
            }
            Next::GiveUp(Last::Failed(f)) => Got::GiveUp(Some(f)),
            Next::GiveUp(Last::Nothing) => Got::GiveUp(None),
        };
        // The walk is asked only when another attempt may start.
        if !asked.get() {
            assert_ne!(got, Got::Retry);
        }
        got
    }

    #[test]
    fn the_rule_as_a_table() {
        let ok = Ended::Answered { unhealthy: false };
        let unhealthy = || Ended::Answered { unhealthy: true };
        let connect = Failure::Connect(Cause::Refused);
        let get = Resend::new(&Method::GET, false, true);
        let post = Resend::new(&Method::POST, false, true);
        let post_anyway = Resend::new(&Method::POST, true, true);
        let streamed = Resend::new(&Method::GET, false, false);
        let t0 = Instant::now();
        let mut room = Budget::of(3, Duration::from_secs(10), t0);
        room.spend();
        let mut spent = Budget::of(1, Duration::from_secs(10), t0);
        spent.spend();
        let mut late = Budget::of(3, Duration::ZERO, t0);
        late.spend();

        use Got::*;
        #[rustfmt::skip]
        let table: Vec<Case> = vec![
            ("a healthy answer goes back", ok, get, &room, true, Respond),
            ("unhealthy status: retried", unhealthy(), get, &room, true, Retry),
            ("unhealthy status, walk ended: goes back", unhealthy(), get, &room, false, Respond),
            ("unhealthy status, no tries left: goes back", unhealthy(), get, &spent, true, Respond),
            ("unhealthy status after retry_timeout: goes back", unhealthy(), get, &late, true, Respond),
            ("unhealthy status, POST: goes back", unhealthy(), post, &room, true, Respond),
            ("unhealthy status, POST, retry_non_idempotent", unhealthy(), post_anyway, &room, true, Retry),
            ("unhealthy status, body streamed: goes back", unhealthy(), streamed, &room, true, Respond),
            ("connect failure: retried", Ended::Failed(connect), get, &room, true, Retry),
            ("connect failure, POST: nothing was sent", Ended::Failed(connect), post, &room, true, Retry),
            ("connect failure, walk ended", Ended::Failed(connect), get, &room, false, GiveUp(Some(connect))),
            ("connect failure, no tries left", Ended::Failed(connect), get, &spent, true, GiveUp(Some(connect))),
            ("connect failure, body streamed", Ended::Failed(connect), streamed, &room, true, GiveUp(Some(connect))),
            ("timeout: retried", Ended::Failed(Failure::Timeout), get, &room, true, Retry),
            ("timeout, POST: it was sent", Ended::Failed(Failure::Timeout), post, &room, true, GiveUp(Some(Failure::Timeout))),
            ("timeout, POST, retry_non_idempotent", Ended::Failed(Failure::Timeout), post_anyway, &room, true, Retry),
            ("timeout after retry_timeout", Ended::Failed(Failure::Timeout), get, &late, true, GiveUp(Some(Failure::Timeout))),
            ("broken: retried", Ended::Failed(Failure::Broken), get, &room, true, Retry),
            ("broken, POST", Ended::Failed(Failure::Broken), post, &room, true, GiveUp(Some(Failure::Broken))),
            ("out of open files: never retried", Ended::Failed(Failure::Exhausted), get, &room, true, GiveUp(Some(Failure::Exhausted))),
            ("client body broke off: never retried", Ended::Failed(Failure::ClientGone), get, &room, true, GiveUp(Some(Failure::ClientGone))),
            ("client body stalled: never retried", Ended::Failed(Failure::ClientStalled), get, &room, true, GiveUp(Some(Failure::ClientStalled))),
            ("bad response head: never retried", Ended::Failed(Failure::BadResponse), get, &room, true, GiveUp(Some(Failure::BadResponse))),
            ("bad target: never retried", Ended::Failed(Failure::BadTarget), get, &room, true, GiveUp(Some(Failure::BadTarget))),
        ];
        for (case, ended, resend, budget, left, expected) in table {
            assert_eq!(decide(ended, resend, budget, left), expected, "{case}");
        }
    }
}
