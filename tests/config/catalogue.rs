//! The region catalogue: the shipped one, overrides, mistakes, where it is found.

use super::*;

#[test]
fn the_shipped_catalogue_has_the_required_regions() {
    let c = catalog();
    let required = [
        ("cn-beijing", "China (Beijing)"),
        ("cn-shanghai", "China (Shanghai)"),
        ("cn-hangzhou", "China (Hangzhou)"),
        ("cn-shenzhen", "China (Shenzhen)"),
        ("cn-hongkong", "China (Hong Kong)"),
        ("ap-southeast-1", "Singapore"),
        ("ap-northeast-1", "Japan (Tokyo)"),
        ("ap-northeast-2", "South Korea (Seoul)"),
        ("ap-south-1", "India (Mumbai)"),
        ("ap-southeast-2", "Australia (Sydney)"),
        ("ap-southeast-3", "Malaysia (Kuala Lumpur)"),
        ("ap-southeast-5", "Indonesia (Jakarta)"),
        ("us-east-1", "US (Virginia)"),
        ("us-west-1", "US (Silicon Valley)"),
        ("us-west-2", "US (Oregon)"),
        ("ca-central-1", "Canada (Montreal)"),
        ("eu-central-1", "Germany (Frankfurt)"),
        ("eu-west-1", "UK (London)"),
        ("eu-west-3", "France (Paris)"),
        ("eu-north-1", "Sweden (Stockholm)"),
        ("me-east-1", "UAE (Dubai)"),
        ("me-central-1", "Saudi Arabia (Riyadh)"),
        ("sa-east-1", "Brazil (São Paulo)"),
        ("af-south-1", "South Africa (Cape Town)"),
    ];
    for (id, name) in required {
        let r = c.get(id).unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(r.name, name);
    }
    assert!(c.regions.len() >= 24);
    assert_eq!(c.route_factor, 1.5);
    // No override for Beijing/Shanghai: the shipped example uses the estimate (about 17 ms).
    assert!(c.rtt.is_empty());
    let ms = c.rtt_ms("cn-beijing", "cn-shanghai").unwrap();
    assert!((ms - 17.0).abs() < 0.5, "{ms}");
    // Southern hemisphere and western longitudes are signed.
    assert!(c.get("sa-east-1").unwrap().lat < 0.0 && c.get("sa-east-1").unwrap().lon < 0.0);
    assert!(c.get("ap-southeast-2").unwrap().lat < 0.0);
}

#[test]
fn catalogue_rtt_overrides_and_route_factor() {
    let text = r#"route_factor = 2
[[region]]
id = "a"
name = "A"
lat = 0
lon = 0
[[region]]
id = "b"
name = "B"
lat = 0.0
lon = 1.0
[rtt]
"b/a" = 42.5
"#;
    let c = config::parse_catalog(text, Path::new("cat.toml")).unwrap();
    assert_eq!(c.route_factor, 2.0);
    assert_eq!(c.rtt_ms("a", "b"), Some(42.5));
    assert_eq!(c.rtt_ms("b", "a"), Some(42.5));
    assert_eq!(c.rtt.get(&gtd::regions::pair_key("a", "b")), Some(&42.5));
    // Whether a time is the listed one or the estimate (what `rtt_source` reports).
    assert_eq!(c.rtt_override("b", "a"), Some(42.5));
    assert_eq!(c.rtt_override("a", "a"), None);
}

#[test]
fn catalogue_mistakes() {
    let text = r#"route_factor = 0
[[region]]
id = "cn-beijing"
name = "China (Beijing)"
lat = 39.9
lon = 116.4
[[region]]
id = "cn-beijing"
name = "Beijing again"
lat = 95
lon = 200
[[region]]
id = "cn-shanghai"
nmae = "China (Shanghai)"
lat = 31.2
lon = 121.5
[rtt]
"cn-beijing/cn-shanghai" = 20
"cn-shanghai/cn-beijing" = 21
"cn-beijing/cn-shangai" = 20
"cn-beijing" = 5
"cn-beijing/cn-beijing" = 1
"#;
    let e: Vec<String> = config::parse_catalog(text, Path::new("cat.toml"))
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        e,
        [
            "cat.toml:1:16: route_factor 0 must be a number greater than 0",
            r#"cat.toml:8:6: region "cn-beijing": duplicate region id "cn-beijing" (first defined at line 3)"#,
            r#"cat.toml:10:7: region "cn-beijing": lat 95 is out of range -90..=90"#,
            r#"cat.toml:11:7: region "cn-beijing": lon 200 is out of range -180..=180"#,
            r#"cat.toml:12:1: region "cn-shanghai": missing required key "name""#,
            r#"cat.toml:14:1: region "cn-shanghai": unknown key "nmae"; did you mean "name"?"#,
            r#"cat.toml:19:1: rtt: rtt key "cn-shanghai/cn-beijing" repeats "cn-beijing/cn-shanghai" (the table is symmetric)"#,
            r#"cat.toml:20:1: rtt: rtt key "cn-beijing/cn-shangai" names unknown region "cn-shangai"; did you mean "cn-shanghai"?"#,
            r#"cat.toml:21:1: rtt: rtt key "cn-beijing" must name two regions as "a/b""#,
            r#"cat.toml:22:1: rtt: rtt key "cn-beijing/cn-beijing" names the same region twice"#,
        ]
    );
}

#[test]
fn the_catalogue_is_found_next_to_the_config_by_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("regions")).unwrap();
    std::fs::copy(catalog_path(), dir.path().join("regions/catalog.toml")).unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        EXAMPLE.replace("catalog = \"regions/catalog.toml\"\n", ""),
    )
    .unwrap();
    let c = config::load(&file, None).unwrap();
    assert_eq!(c.catalog, catalog());

    // A catalog key that names a missing file is reported at its value.
    std::fs::write(
        &file,
        EXAMPLE.replace("regions/catalog.toml", "nowhere.toml"),
    )
    .unwrap();
    let e = config::load(&file, None).unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!((e.0[0].line, e.0[0].column), (1, 11));
    assert!(
        e.0[0].message.starts_with("cannot read region catalogue "),
        "{e}"
    );

    // --regions overrides the key; errors inside the catalogue name the catalogue file.
    let bad = dir.path().join("bad-catalog.toml");
    std::fs::write(
        &bad,
        "[[region]]\nid = \"x\"\nname = \"X\"\nlat = 0\nlon = 0\n[rtt]\n\"x/y\" = 1\n",
    )
    .unwrap();
    let e = config::load(&file, Some(&bad)).unwrap_err();
    assert_eq!(e.0[0].file, bad);
    assert_eq!((e.0[0].line, e.0[0].column), (7, 1));
}
