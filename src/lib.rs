//! gtd — a global traffic director.
//!
//! This package holds the `gtd` and `sim` programs. Their code lives in a workspace of crates
//! whose dependency graph is the architecture, each depending only on those below it, so that
//! an import that runs back up does not compile:
//!
//! - `gtd-core` ([`config`], [`regions`], [`health`], [`balance`], [`split`], [`view`], and the
//!   leaves [`files`], [`geoip`]): every decision, pure, with no I/O runtime among its
//!   dependencies;
//! - `gtd-sim` ([`sim`]): the what-if simulator, over the same decisions;
//! - `gtd-fleet` ([`fleet`]): the fleet on etcd — revisions, the node registry, drains,
//!   history, and each node's prediction through the simulator;
//! - `gtd-node` ([`node`]): the listener node — data planes, checks, admin API, dashboard,
//!   following the fleet's revisions;
//! - `gtd-demo` ([`demo`]): `gtd demo`, real nodes on loopback.
//!
//! This library re-exports them under the names the binaries, tests, benches and fuzz targets
//! use (`gtd::config`, `gtd::node`, ...). The node and the simulator call the same decision
//! code; the rules themselves are stated in `docs/design.md`.

pub use gtd_core::{balance, config, files, geoip, health, regions, split, sync, view};
pub use gtd_demo as demo;
pub use gtd_fleet as fleet;
pub use gtd_node as node;
#[doc(hidden)]
pub use gtd_node::fuzzing;
pub use gtd_sim as sim;
