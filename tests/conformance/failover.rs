//! A group stopped mid-run: the three-region fleet with Shanghai's endpoints (every listener's
//! group "shanghai") served by a backends process of their own. Measured, then that process is
//! killed: once every node's checks show the group unhealthy, the split is `sim --down
//! shanghai`'s (next-priority failover for api and rtc, recompute for stream); then started
//! again: the failback gives `sim`'s original split.

use crate::fleet::*;
use crate::shipped::THREE_REGIONS;

#[test]
fn a_group_stopped_mid_run_moves_its_traffic_as_sim_down_predicts() {
    let cfg = Cfg::from_text(THREE_REGIONS);
    let mut fleet = Fleet::start(
        &cfg,
        &[
            cfg.serving(&["shanghai"], false),
            cfg.serving(&["shanghai"], true),
        ],
    );
    fleet.wait_health(&[]);
    fleet.conforms(&fleet.sim(&[]));

    fleet.stop_backends(1);
    fleet.wait_health(&["shanghai"]);
    let down = fleet.sim(&["--down", "shanghai"]);
    // From Shanghai the top group is down: failover, Beijing takes all of api.
    assert_eq!(sim_split(&down, "api", "cn-shanghai", None).0, "failover");
    fleet.conforms(&down);

    fleet.start_backends_again(1);
    fleet.wait_health(&[]);
    fleet.conforms(&fleet.sim(&[]));
}
