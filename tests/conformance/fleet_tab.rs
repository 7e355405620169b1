//! The dashboard's fleet tab against a real fleet: a three-member etcd cluster, two
//! `gtd run --etcd` nodes, a revision the Shanghai node refuses, and headless Chromium on the
//! Beijing node's admin server reading the tab that `GET /fleet` feeds.

use crate::cdp::{Browser, chromium_or_skip};
use crate::etcd::*;
use crate::fleet::*;

#[test]
fn the_dashboards_fleet_tab_shows_the_fleet_from_etcd() {
    let Some(exe) = chromium_or_skip("the_dashboards_fleet_tab_shows_the_fleet_from_etcd") else {
        return;
    };
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    // Real backends: without them every group's checks fail, and the shares the tab shows
    // depend on how far the checks got.
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);

    // Revision 2 moves the game listener to a port held on Shanghai's address only.
    let (_squatter, port) = port_taken_on(&mut cfg, "game", fleet.node("cn-shanghai").ip);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    let beijing = fleet.node("cn-beijing");
    wait_fleet(beijing, "serving revision 2", |f| f.applied == 2);
    wait("the refusal in the registry", || {
        fleet_json(&cluster)["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["region"] == "cn-shanghai" && n["refused"]["revision"] == 2)
    });
    wait("Beijing's groups healthy in its registry entry", || {
        fleet_json(&cluster)["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| {
                n["region"] == "cn-beijing"
                    && n["applied"] == 2
                    && n["listeners"].as_array().is_some_and(|ls| {
                        ls.iter().all(|l| {
                            l["groups"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .all(|g| g["healthy"] == true)
                        })
                    })
            })
    });
    let ids: Vec<String> = fleet_json(&cluster)["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect();

    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.navigate(&format!("http://{}/", beijing.admin));
    page.wait_for("the fleet tab", "!document.getElementById('tabs').hidden");
    page.click("#tab-fleet");
    page.wait_for(
        "both nodes in the fleet tab",
        "document.querySelectorAll('#fleet tr[data-node]').length === 2",
    );
    let rows = page.eval(
        "[...document.querySelectorAll('#fleet tr[data-node]')].map(r => [...r.children].map(c => c.textContent))",
    );
    let rows = rows.as_array().unwrap();
    let row = |region: &str| {
        rows.iter()
            .find(|r| r[0].as_str().unwrap().starts_with(region))
            .unwrap_or_else(|| panic!("no row for {region}: {rows:?}"))
    };
    assert_eq!(row("cn-beijing")[2], "2", "{rows:?}");
    assert_eq!(row("cn-shanghai")[2], "1 (latest 2)", "{rows:?}");
    let refusal = row("cn-shanghai")[3].as_str().unwrap();
    assert!(
        refusal.starts_with("refused revision 2:") && refusal.contains(&port.to_string()),
        "{refusal}"
    );
    assert!(
        row("cn-beijing")[5]
            .as_str()
            .unwrap()
            .contains("beijing 62.50 %"),
        "{rows:?}"
    );
    let text = page.eval("document.getElementById('fleet').textContent");
    let text = text.as_str().unwrap();
    assert!(text.contains("not every node runs it"), "{text}");
    for id in &ids {
        assert!(text.contains(id.as_str()), "{id} not in {text}");
    }
    let png = page.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard-fleet-etcd.png");
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
    assert!(page.problems.is_empty(), "{:#?}", page.problems);
}
