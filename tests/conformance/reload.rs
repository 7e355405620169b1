//! A ratio edited in the TOML and reloaded: the shipped config (ports replaced) measured, then
//! its file rewritten with new ratios for every listener and reloaded — SIGHUP to the Beijing
//! node, `POST /reload` to the Shanghai node — and measured again against `sim` for the new
//! file. A bad edit is refused (422) and changes nothing.

use crate::common::metric_at;
use crate::fleet::*;

#[test]
fn a_ratio_edited_and_reloaded_changes_the_split_to_sims_for_the_new_file() {
    let mut cfg = Cfg::shipped();
    let mut fleet = Fleet::start(&cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    fleet.conforms(&fleet.sim(&[]));

    cfg.set_ratio("web/shanghai", 10.0);
    cfg.set_ratio("game/beijing", 60.0);
    cfg.set_ratio("voice/shanghai", 40.0);
    fleet.rewrite(&cfg);
    let new = fleet.sim(&[]);
    // Shanghai's web clients: 10, then half of 90, leftover 45 split: 32.5 / 67.5.
    assert_eq!(shares(&new, "web", "cn-shanghai")["shanghai"], 32.5);

    let beijing = fleet.node("cn-beijing");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &beijing.child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let shanghai = fleet.node("cn-shanghai");
    let (code, body) = http(shanghai.admin, "POST", "/reload").unwrap();
    assert_eq!(code, 200, "{body}");
    for node in &fleet.nodes {
        wait(&format!("{} reloaded", node.region), || {
            metric_at(node.admin, "gtd_config_reloads_total", &["ok"]) == 1.0
        });
        assert_eq!(
            metric_at(node.admin, "gtd_config_reloads_total", &["error"]),
            0.0
        );
    }
    fleet.conforms(&new);

    // A ratio out of range: refused, the running split stays the new file's.
    let mut bad = cfg.clone();
    bad.set_ratio("web/beijing", 150.0);
    bad.write(&fleet.config);
    let (code, body) = http(shanghai.admin, "POST", "/reload").unwrap();
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("ratio 150 is out of range"), "{body}");
    fleet.rewrite(&cfg);
    fleet.conforms(&new);
}
