//! Endpoint health from active checks, pure (docs/design.md §5): the [`verdict`] state machine
//! (thresholds, `explicit`, `essential`, flap damping) that turns each check's result into
//! "healthy" or "unhealthy" and says why. The checks themselves (sockets, timers) are I/O and
//! belong to the node; they hand results to this machine, as pingora keeps `observe_health`
//! beside its prober.

pub mod verdict;

pub use verdict::{Change, Check, Rules, Verdict};
