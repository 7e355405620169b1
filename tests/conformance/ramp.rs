//! `gtd push --ramp --dry-run` against a real three-member etcd and a node per region: the plan
//! of moved traffic per step and node from each node's registry entry, and the refusals (exit
//! 2, nothing published) of a step over capacity and of a receiving group a node sees down.

use crate::etcd::*;
use crate::fleet::*;

#[test]
fn a_ramp_is_planned_per_node_and_refused_over_capacity_or_onto_a_sick_group() {
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    // web/shanghai's endpoints have nothing behind them: every node sees the group down.
    let backends = cfg.serving(&["web/shanghai"], false);
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&backends));
    fleet.wait_health(&["web/shanghai"]);
    let config = fleet.config.display().to_string();
    let ramp = |extra: &[&str]| {
        let mut args = vec!["push", "--ramp", "--dry-run", "--config", &config];
        args.extend_from_slice(extra);
        let out = gtd_as(&cluster, As::Pusher, &args);
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };

    // Towards Beijing (healthy): planned in the default five steps, per registered node.
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let (code, out, err) = ramp(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("dry run: nothing published\n"), "{out}");
    assert!(out.contains("in 5 steps of moved traffic"), "{out}");
    assert!(out.contains("ratios: web/beijing 50 -> 100"), "{out}");
    for n in &fleet.nodes {
        assert!(out.contains(&format!("({})\n    web: ", n.region)), "{out}");
    }
    assert!(out.contains("step 5 · 100 % of the move"), "{out}");
    assert!(out.contains("the ramp may start"), "{out}");

    // With demand the whole move overflows Beijing: refused with the numbers.
    let scenario = fleet.dir.path().join("demand.toml");
    std::fs::write(
        &scenario,
        "[demand]\ncn-beijing = 22000\ncn-shanghai = 6000\n",
    )
    .unwrap();
    let (code, out, err) = ramp(&["--scenario", &scenario.display().to_string()]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("refused"), "{err}");
    // At 50/50 Beijing carries 62.5 % of 22000 and 37.5 % of 6000, 16000 of its 24000; the
    // whole move (Beijing 100 first from Beijing, 50 % of the rest from Shanghai) puts
    // 22000 + 3000 on it: only the last step overflows, and no way back does.
    assert!(
        err.contains(
            "step 5 (100 % of the move) overflows web/beijing: load 25000 over capacity 24000"
        ),
        "{err}"
    );
    assert!(!err.contains("step 4 "), "{err}");
    assert!(!err.contains("way back"), "{err}");
    assert!(out.contains("OVER web/beijing"), "{out}");

    // Towards Shanghai, which every node sees down: refused, naming the nodes.
    cfg.set_ratio("web/beijing", 10.0);
    fleet.rewrite(&cfg);
    // Each node's registry entry says web/shanghai is down once the node has written it.
    let (mut code, mut out, mut err) = (None, String::new(), String::new());
    wait("every entry saying web/shanghai is down", || {
        (code, out, err) = ramp(&["--steps", "10,100"]);
        fleet.nodes.iter().all(|n| {
            out.lines().any(|l| {
                l.starts_with("node ") && l.contains(&format!("({}): down web/shanghai", n.region))
            })
        })
    });
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("web/shanghai receives traffic"), "{err}");
    assert!(err.contains("unhealthy now"), "{err}");
    assert!(out.contains("in 2 steps"), "{out}");

    // Nothing was published by any of them: the next push is revision 2.
    let published = push(&cluster, &fleet.config);
    assert!(
        published.starts_with("published revision 2 "),
        "{published}"
    );
}
