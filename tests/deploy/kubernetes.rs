//! deploy/kubernetes: the manifests of both modes.

use super::*;

/// Every document of a manifest file.
fn documents(rel: &str) -> Vec<Yaml> {
    let docs = YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(!docs.is_empty(), "{rel}: no document");
    docs
}

fn s<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {y:?}"))
}

fn int(y: &Yaml, what: &str) -> i64 {
    y.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {y:?}"))
}

fn list<'a>(y: &'a Yaml, what: &str) -> &'a [Yaml] {
    y.as_vec()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("{what}: not a list: {y:?}"))
}

fn map(y: &Yaml, what: &str) -> BTreeMap<String, String> {
    y.as_hash()
        .unwrap_or_else(|| panic!("{what}: not a map: {y:?}"))
        .iter()
        .map(|(k, v)| (s(k, what).to_owned(), s(v, what).to_owned()))
        .collect()
}

fn kind(doc: &Yaml) -> &str {
    s(&doc["kind"], "kind")
}

fn name(doc: &Yaml) -> &str {
    s(&doc["metadata"]["name"], "metadata.name")
}

/// Each document has its apiVersion for its kind, a name and (but the Namespace) the namespace.
fn check_identity(rel: &str, docs: &[Yaml]) {
    for d in docs {
        let api = match kind(d) {
            "Namespace" | "Service" | "ConfigMap" => "v1",
            "Deployment" | "DaemonSet" => "apps/v1",
            other => panic!("{rel}: unexpected kind {other}"),
        };
        assert_eq!(s(&d["apiVersion"], "apiVersion"), api, "{rel}: {}", kind(d));
        assert!(!name(d).is_empty());
        if kind(d) != "Namespace" {
            assert_eq!(
                d["metadata"]["namespace"].as_str(),
                Some("gtd"),
                "{rel}: {} {}",
                kind(d),
                name(d)
            );
        }
    }
}

/// The acceleration regions of a config and the ports its listeners need, as
/// (port, "TCP"/"UDP").
fn regions_and_ports(config: &Path) -> (BTreeSet<String>, BTreeSet<(i64, String)>) {
    let cfg =
        gtd::config::load(config, None).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    let regions = cfg
        .listeners
        .iter()
        .flat_map(|l| l.regions.clone())
        .collect();
    let ports = cfg
        .listeners
        .iter()
        .map(|l| {
            let proto = match l.protocol {
                gtd::config::Protocol::Udp => "UDP",
                _ => "TCP",
            };
            (i64::from(l.port), proto.to_owned())
        })
        .collect();
    (regions, ports)
}

/// What each mode's Deployments are checked against.
struct Mode<'a> {
    file: &'a str,
    /// The config the nodes serve (for the regions and ports).
    config: PathBuf,
    /// The longest drain a stop must outlast.
    drain: Duration,
    fleet: bool,
}

/// A Deployment's pods as its Service sees them.
struct Pods {
    labels: BTreeMap<String, String>,
    /// Container ports by name: (port, protocol).
    ports: BTreeMap<String, (i64, String)>,
}

/// Checks one Deployment and returns its region and pods.
fn check_deployment(mode: &Mode, d: &Yaml, docs: &[Yaml]) -> (String, Pods) {
    let what = format!("{}: Deployment {}", mode.file, name(d));
    let spec = &d["spec"];
    let labels = map(&spec["template"]["metadata"]["labels"], &what);
    for (k, v) in map(&spec["selector"]["matchLabels"], &what) {
        assert_eq!(
            labels.get(&k),
            Some(&v),
            "{what}: the selector picks its pods"
        );
    }
    // Old pods keep serving while a new one cannot start (etcd down, empty cache).
    assert_eq!(
        int(&spec["strategy"]["rollingUpdate"]["maxUnavailable"], &what),
        0,
        "{what}"
    );
    let pod = &spec["template"]["spec"];
    let containers = list(&pod["containers"], &what);
    assert_eq!(containers.len(), 1, "{what}: one container");
    let c = &containers[0];
    let args: Vec<String> = list(&c["args"], &what)
        .iter()
        .map(|a| s(a, &what).to_owned())
        .collect();
    assert!(
        c["command"].is_badvalue(),
        "{what}: the image's ENTRYPOINT runs gtd"
    );
    gtd_accepts(&args, &format!("{what} args"));

    // Pinned to its region's machines, serving that region.
    let region = flag(&args, "--region").expect("--region").to_owned();
    assert_eq!(
        s(&pod["nodeSelector"]["topology.kubernetes.io/region"], &what),
        region,
        "{what}: nodeSelector"
    );
    assert_eq!(labels.get("gtd/region"), Some(&region), "{what}: label");
    assert_eq!(
        flag(&args, "--etcd").is_some(),
        mode.fleet,
        "{what}: --etcd"
    );

    // Ports: the admin port and one per listener of the config.
    let ports: BTreeMap<String, (i64, String)> = list(&c["ports"], &what)
        .iter()
        .map(|p| {
            (
                s(&p["name"], &what).to_owned(),
                (
                    int(&p["containerPort"], &what),
                    s(&p["protocol"], &what).to_owned(),
                ),
            )
        })
        .collect();
    let admin: std::net::SocketAddr = flag(&args, "--admin")
        .expect("--admin")
        .parse()
        .expect("--admin IP:PORT");
    assert!(
        !admin.ip().is_loopback(),
        "{what}: the kubelet probes the pod's address, not its loopback"
    );
    let port_of = |y: &Yaml, probe: &str| -> i64 {
        match y.as_str() {
            Some(n) => {
                ports
                    .get(n)
                    .unwrap_or_else(|| panic!("{what}: {probe} port {n}"))
                    .0
            }
            None => int(y, probe),
        }
    };
    let (_, listener_ports) = regions_and_ports(&mode.config);
    let declared: BTreeSet<(i64, String)> = ports
        .values()
        .filter(|(p, _)| *p != i64::from(admin.port()))
        .cloned()
        .collect();
    assert_eq!(
        declared, listener_ports,
        "{what}: container ports = the config's listeners"
    );
    assert_eq!(
        ports.values().find(|(p, _)| *p == i64::from(admin.port())),
        Some(&(i64::from(admin.port()), "TCP".to_owned())),
        "{what}: the admin port is declared"
    );

    // Probes: GET /healthz on the admin port; liveness outlasts a drain (503 meanwhile).
    let drain = mode.drain;
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        let p = &c[probe];
        if probe == "startupProbe" && p.is_badvalue() {
            continue;
        }
        assert_eq!(
            s(&p["httpGet"]["path"], probe),
            "/healthz",
            "{what}: {probe}"
        );
        assert_eq!(
            port_of(&p["httpGet"]["port"], probe),
            i64::from(admin.port()),
            "{what}: {probe} port = --admin's"
        );
    }
    let live = &c["livenessProbe"];
    let live_window = int(&live["periodSeconds"], "periodSeconds")
        * int(&live["failureThreshold"], "failureThreshold");
    assert!(
        Duration::from_secs(live_window.unsigned_abs()) > drain,
        "{what}: liveness ({live_window} s) would kill a draining pod ({drain:?})"
    );
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap_or(0);
    let grace = int(&pod["terminationGracePeriodSeconds"], &what);
    assert!(
        Duration::from_secs((grace - pre_stop).unsigned_abs()) > drain + Duration::from_secs(5)
            && grace > pre_stop,
        "{what}: terminationGracePeriodSeconds {grace} is not above preStop {pre_stop} s + drain {drain:?}"
    );

    // Resources and security.
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                !c["resources"][k][r].is_badvalue(),
                "{what}: resources.{k}.{r}"
            );
        }
    }
    let psc = &pod["securityContext"];
    let sc = &c["securityContext"];
    assert!(
        psc["runAsNonRoot"].as_bool() == Some(true) || sc["runAsNonRoot"].as_bool() == Some(true),
        "{what}: runAsNonRoot"
    );
    let uid = sc["runAsUser"].as_i64().or(psc["runAsUser"].as_i64());
    assert!(uid.is_some_and(|u| u > 0), "{what}: runAsUser");
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{what}");
    assert_eq!(
        sc["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{what}"
    );
    let drop: Vec<&str> = list(&sc["capabilities"]["drop"], &what)
        .iter()
        .map(|v| s(v, &what))
        .collect();
    assert_eq!(drop, ["ALL"], "{what}");
    let add: Vec<&str> = sc["capabilities"]["add"]
        .as_vec()
        .map(|v| v.iter().map(|c| s(c, &what)).collect())
        .unwrap_or_default();
    let low_port = ports.values().any(|(p, _)| *p < 1024);
    assert_eq!(
        add,
        if low_port {
            vec!["NET_BIND_SERVICE"]
        } else {
            vec![]
        },
        "{what}: NET_BIND_SERVICE exactly when a port is below 1024"
    );

    // Where the node reads and writes: the mounted volumes.
    let mounts: BTreeMap<String, String> = list(&c["volumeMounts"], &what)
        .iter()
        .map(|m| {
            (
                s(&m["mountPath"], &what).to_owned(),
                s(&m["name"], &what).to_owned(),
            )
        })
        .collect();
    let volume = |vname: &str| -> &Yaml {
        list(&pod["volumes"], &what)
            .iter()
            .find(|v| v["name"].as_str() == Some(vname))
            .unwrap_or_else(|| panic!("{what}: volume {vname}"))
    };
    let mounted = |path: &str| -> (String, &Yaml) {
        let (dir, vname) = mounts
            .iter()
            .find(|(dir, _)| Path::new(path).starts_with(dir))
            .unwrap_or_else(|| panic!("{what}: {path} is on the read-only root"));
        (dir.clone(), volume(vname))
    };
    if mode.fleet {
        let cache = flag(&args, "--cache").expect("--cache: the root filesystem is read-only");
        let (_, v) = mounted(cache);
        assert!(
            !v["emptyDir"].is_badvalue(),
            "{what}: the cache is on an emptyDir"
        );
    } else {
        let config = flag(&args, "--config").expect("--config");
        let (dir, v) = mounted(config);
        let cm_name = s(&v["configMap"]["name"], &what);
        let cm = docs
            .iter()
            .find(|d| kind(d) == "ConfigMap" && name(d) == cm_name)
            .unwrap_or_else(|| panic!("{what}: ConfigMap {cm_name} in {}", mode.file));
        // The files the volume shows, which must be the ones the test checked as the config.
        let shown: BTreeMap<String, String> = list(&v["configMap"]["items"], &what)
            .iter()
            .map(|i| {
                (
                    s(&i["path"], &what).to_owned(),
                    s(&i["key"], &what).to_owned(),
                )
            })
            .collect();
        let rel = Path::new(config)
            .strip_prefix(&dir)
            .expect("under the mount");
        let key = shown
            .get(rel.to_str().expect("UTF-8"))
            .unwrap_or_else(|| panic!("{what}: {config} is not an item of the volume"));
        assert!(!cm["data"][key.as_str()].is_badvalue(), "{what}: key {key}");
    }
    (region, Pods { labels, ports })
}

/// Writes a ConfigMap's files as its volume shows them (items: key -> path) under `dir`.
fn materialise(cm: &Yaml, deployment: &Yaml, dir: &Path) {
    let volumes = list(
        &deployment["spec"]["template"]["spec"]["volumes"],
        "volumes",
    );
    let v = volumes
        .iter()
        .find(|v| v["configMap"]["name"].as_str() == Some(name(cm)))
        .expect("the ConfigMap's volume");
    for item in list(&v["configMap"]["items"], "items") {
        let path = dir.join(s(&item["path"], "path"));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, s(&cm["data"][s(&item["key"], "key")], "data")).expect("write");
    }
}

/// Checks one mode's file: its Deployments, one per region of the config, and the Services in
/// front of them.
fn check_mode(mode: &Mode, docs: &[Yaml]) {
    let deployments: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "Deployment").collect();
    let mut by_region = BTreeMap::new();
    for d in &deployments {
        let (region, pods) = check_deployment(mode, d, docs);
        assert!(
            by_region.insert(region.clone(), pods).is_none(),
            "{}: two Deployments for {region}",
            mode.file
        );
    }
    let (regions, _) = regions_and_ports(&mode.config);
    assert_eq!(
        by_region.keys().cloned().collect::<BTreeSet<_>>(),
        regions,
        "{}: one Deployment per acceleration region of the config",
        mode.file
    );
    let image: BTreeSet<&str> = deployments
        .iter()
        .map(|d| {
            s(
                &d["spec"]["template"]["spec"]["containers"][0]["image"],
                "image",
            )
        })
        .collect();
    assert_eq!(image.len(), 1, "{}: one image", mode.file);

    // Each region's Service selects exactly its region's pods and targets their ports.
    let services = documents("deploy/kubernetes/services.yaml");
    check_identity("services.yaml", &services);
    let mut served = BTreeSet::new();
    for svc in &services {
        let what = format!("Service {} over {}", name(svc), mode.file);
        assert_eq!(kind(svc), "Service");
        let sel = map(&svc["spec"]["selector"], &what);
        let matching: Vec<(&String, &Pods)> = by_region
            .iter()
            .filter(|(_, pods)| sel.iter().all(|(k, v)| pods.labels.get(k) == Some(v)))
            .collect();
        assert_eq!(matching.len(), 1, "{what}: selects one region's pods");
        let (region, Pods { ports, .. }) = matching[0];
        served.insert(region.clone());
        // The client's own address reaches gtd (ip_hash, affinity, geoip).
        assert_eq!(s(&svc["spec"]["externalTrafficPolicy"], &what), "Local");
        let mut targeted = BTreeSet::new();
        for p in list(&svc["spec"]["ports"], &what) {
            let target = s(&p["targetPort"], &what);
            let (num, proto) = ports
                .get(target)
                .unwrap_or_else(|| panic!("{what}: targetPort {target} is no container port"));
            assert_eq!(s(&p["protocol"], &what), proto, "{what}: {target}");
            assert_ne!(target, "admin", "{what}: the admin port is not for clients");
            targeted.insert((*num, proto.clone()));
        }
        let (_, listener_ports) = regions_and_ports(&mode.config);
        assert_eq!(targeted, listener_ports, "{what}: one port per listener");
    }
    assert_eq!(served, regions, "a Service per region");
}

#[test]
fn kubernetes_namespace() {
    let docs = documents("deploy/kubernetes/namespace.yaml");
    check_identity("namespace.yaml", &docs);
    assert_eq!(docs.len(), 1);
    assert_eq!((kind(&docs[0]), name(&docs[0])), ("Namespace", "gtd"));
}

#[test]
fn kubernetes_fleet_mode() {
    let docs = documents("deploy/kubernetes/fleet.yaml");
    check_identity("fleet.yaml", &docs);
    assert!(
        docs.iter().all(|d| kind(d) == "Deployment"),
        "fleet.yaml: Deployments only"
    );
    // The nodes serve what is pushed: checked against the shipped config (its regions, its
    // ports, the default drain).
    let mode = Mode {
        file: "fleet.yaml",
        config: root().join("config.toml"),
        drain: fleet_drain(),
        fleet: true,
    };
    check_mode(&mode, &docs);
}

#[test]
fn kubernetes_file_mode() {
    let docs = documents("deploy/kubernetes/file-mode.yaml");
    check_identity("file-mode.yaml", &docs);
    let cms: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "ConfigMap").collect();
    assert_eq!(cms.len(), 1, "file-mode.yaml: one ConfigMap");
    let deployments: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "Deployment").collect();
    assert_eq!(
        cms.len() + deployments.len(),
        docs.len(),
        "file-mode.yaml: kinds"
    );
    // The ConfigMap's files as a pod sees them, validated as `gtd check` does, for the region
    // of every Deployment, and with the admin token that --admin beyond loopback needs.
    let dir = tempfile::tempdir().expect("temp dir");
    materialise(cms[0], deployments[0], dir.path());
    let config = dir.path().join("config.toml");
    let cfg =
        gtd::config::load(&config, None).unwrap_or_else(|e| panic!("the ConfigMap's config: {e}"));
    for d in &deployments {
        let args: Vec<String> = list(
            &d["spec"]["template"]["spec"]["containers"][0]["args"],
            "args",
        )
        .iter()
        .map(|a| s(a, "args").to_owned())
        .collect();
        let region = flag(&args, "--region").expect("--region");
        let out = Command::new(GTD)
            .args(["check", "--config"])
            .arg(&config)
            .args(["--region", region])
            .output()
            .expect("gtd check");
        assert!(
            out.status.success(),
            "gtd check of the ConfigMap for {region}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let admin = flag(&args, "--admin")
            .expect("--admin")
            .parse()
            .expect("IP:PORT");
        assert!(
            !cfg.admin.exposed(admin),
            "{region}: the ConfigMap's [admin] has no token for --admin {admin}: the node would refuse to start"
        );
    }
    let mode = Mode {
        file: "file-mode.yaml",
        drain: longest_drain(&config),
        config,
        fleet: false,
    };
    check_mode(&mode, &docs);
}
