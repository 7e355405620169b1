//! Valid configs parsed into the model, defaults applied.

use super::*;

#[test]
fn the_example_config_validates_with_defaults_applied() {
    let c = valid(EXAMPLE);
    assert_eq!(c.source, Path::new("config.toml"));
    assert_eq!(
        c.admin.bind,
        "127.0.0.1:9100".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(c.admin.token, None);
    assert_eq!(c.node.source_ip, None);
    let names: Vec<_> = c
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.protocol, l.port))
        .collect();
    assert_eq!(
        names,
        [
            ("web", Protocol::Http, 8080),
            ("game", Protocol::Tcp, 7000),
            ("voice", Protocol::Udp, 7000)
        ]
    );

    let web = &c.listeners[0];
    assert_eq!(web.regions, ["cn-beijing", "cn-shanghai"]);
    assert_eq!(web.failover, FailoverMode::NextPriority);
    assert!(!web.fail_open);
    assert_eq!(web.affinity, Affinity::None);
    assert_eq!(web.connect_timeout, Duration::from_secs(5));
    assert_eq!(web.idle_timeout, Duration::from_secs(60));
    assert_eq!(web.drain_timeout, Duration::from_secs(30));
    assert_eq!(web.max_connections, 100_000);
    assert_eq!(web.proxy_protocol, None);
    assert_eq!(web.header_timeout, Duration::from_secs(10));
    assert_eq!(web.upstream_timeout, Duration::from_secs(60));
    assert!(web.retry);
    assert_eq!(web.tries, 3);
    assert_eq!(web.retry_timeout, Duration::from_secs(10));
    assert!(!web.retry_non_idempotent);
    assert!(web.unhealthy_status.is_empty());
    assert_eq!(web.sticky, None);
    assert_eq!(web.udp_max_flows, 65_536);
    assert_eq!(web.tls, None);
    assert!(web.routes.is_empty());

    let bj = &web.groups[0];
    assert_eq!(
        (bj.name.as_str(), bj.region.as_str(), bj.ratio),
        ("beijing", "cn-beijing", 50.0)
    );
    assert_eq!(bj.priority, None);
    assert_eq!(bj.balance, Balance::RoundRobin);
    assert_eq!(bj.min_healthy, 1);
    assert_eq!(bj.health_check, None);
    assert_eq!(bj.path_prefix, None);
    assert_eq!(bj.keepalive, 32);
    assert_eq!(bj.tls, None);
    let eps: Vec<_> = bj
        .endpoints
        .iter()
        .map(|e| (e.address.text.as_str(), e.weight))
        .collect();
    assert_eq!(eps, [("127.0.0.1:9001", 1), ("127.0.0.1:9002", 1)]);
    let e = &bj.endpoints[1];
    assert_eq!(e.address.host, Host::Ip("127.0.0.1".parse().unwrap()));
    assert_eq!(e.address.port, 9002);
    assert_eq!(e.max_conns, None);
    assert!(!e.backup && !e.down && !e.drain && e.enabled);
    assert_eq!(e.slow_start, None);
    assert_eq!(e.max_fails, 1);
    assert_eq!(e.fail_timeout, Duration::from_secs(10));
    assert_eq!(web.groups[1].ratio, 50.0);

    let game = &c.listeners[1];
    assert_eq!(game.idle_timeout, Duration::from_secs(300));
    assert_eq!(game.groups[0].ratio, 100.0);

    let voice = &c.listeners[2];
    assert_eq!(voice.idle_timeout, Duration::from_secs(30));
    let Balance::Hash { key, consistent } = &voice.groups[0].balance else {
        panic!()
    };
    assert_eq!(key.parts, [KeyPart::RemoteAddr]);
    assert!(!consistent);
    let hc = voice.groups[0].health_check.as_ref().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Tcp);
    assert_eq!(hc.port, Some(9020));
    assert_eq!(hc.interval, Duration::from_secs(5));
    assert_eq!(hc.timeout, Duration::from_secs(5));
    assert_eq!(hc.connect_timeout, Duration::from_secs(5));
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (2, 3));
    assert_eq!(hc.method, CheckMethod::Get);
    assert_eq!(hc.path, "/");
    assert_eq!(hc.expect_status, StatusSet(vec![200..=200]));
    assert!(!hc.id_header && !hc.essential && !hc.explicit);
}

#[test]
fn a_config_using_every_field() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(&dir.path().join("certs"));
    let text = format!(
        r#"catalog = "{catalog}"

[node]
source_ip = "127.0.0.2"

[admin]
bind = "[::1]:9200"
token = "s3cret"

[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing", "cn-shanghai"]
failover = "recompute"
fail_open = true
affinity = "source-ip"
connect_timeout = "2s"
idle_timeout = "90s"
drain_timeout = "0s"
max_connections = 5000
header_timeout = "5s"
upstream_timeout = "2m"
retry = false
tries = 5
retry_timeout = "15s"
retry_non_idempotent = true
unhealthy_status = [500, "502-504"]
sticky = {{ cookie = "gtd_route" }}
tls = {{ certs = [{{ cert = "certs/site.pem", key = "certs/site.key" }}, {{ cert = "certs/other.pem", key = "certs/other.key" }}] }}

  [[listener.route]]
  host = "*.example.com"
  path_prefix = ["/v2/", "/api/"]
  header = {{ name = "X-Canary", value = "1" }}
  groups = ["beijing"]

  [[listener.route]]
  path_prefix = "/static/"
  groups = ["shanghai", "beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 62.5
  priority = {{ cn-beijing = 1, cn-shanghai = 2 }}
  balance = "hash"
  hash_key = "${{http_X_User}}:$cookie_sid:$request_uri"
  consistent = true
  min_healthy = 2
  path_prefix = "/test"
  keepalive = 0
  tls = {{ enabled = true, sni = "api.example.com", ca = "certs/ca.pem", client_cert = "certs/client.pem", client_key = "certs/client.key", insecure_skip_verify = false, min_version = "1.3" }}

    [listener.group.health_check]
    protocol = "https"
    port = 8081
    interval = "10s"
    connect_timeout = "2s"
    read_timeout = "3s"
    healthy_threshold = 1
    unhealthy_threshold = 5
    method = "POST"
    path = "/health"
    host = "health.example.com"
    headers = {{ X-Check = "1", Accept = "text/plain" }}
    body = "ping"
    expect_status = [200, "204-299"]
    expect_headers = {{ X-Ok = "yes" }}
    expect_body = "pong"
    id_header = true
    essential = true
    explicit = true

    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
    weight = 7
    max_conns = 100
    down = true
    drain = true
    enabled = false
    max_fails = 0
    fail_timeout = "30s"

    [[listener.group.endpoint]]
    address = "[2001:db8::1]:443"

    [[listener.group.endpoint]]
    address = "api.internal:443"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 0
  priority = {{ cn-beijing = 2, cn-shanghai = 1 }}
  balance = "least_time"
  measure = "last_byte"
  factor = 0.5
    [listener.group.health_check]
    protocol = "http"
    interval = "3s"
    [[listener.group.endpoint]]
    address = "10.0.1.1:443"
    backup = true
    slow_start = "1m"

  [[listener.group]]
  name = "hangzhou"
  region = "cn-hangzhou"
  priority = {{ cn-beijing = 3, cn-shanghai = 3 }}
  balance = "feedback"
  feedback_header = "X-Capacity"
  inverse = true
    [[listener.group.endpoint]]
    address = "10.0.2.1:443"
    weight = 1000
    slow_start = "250ms"

[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]
proxy_protocol = "v2"

  [[listener.group]]
  name = "rr"
  region = "cn-beijing"
  balance = "Weighted"
  priority = 2
    [listener.group.health_check]
    timeout = "1s"
    [[listener.group.endpoint]]
    address = "10.0.3.1:7000"

  [[listener.group]]
  name = "lc"
  region = "cn-beijing"
  balance = "LeastConnections"
  priority = 1
    [listener.group.health_check]
    interval = "2m"
    [[listener.group.endpoint]]
    address = "10.0.3.2:7000"

  [[listener.group]]
  name = "rand"
  region = "cn-beijing"
  balance = "random"
  two = true
  priority = 3
    [[listener.group.endpoint]]
    address = "10.0.3.3:7000"

  [[listener.group]]
  name = "lt"
  region = "cn-beijing"
  balance = "least_time"
  priority = 4
    [[listener.group.endpoint]]
    address = "10.0.3.4:7000"

[[listener]]
name = "voice"
protocol = "udp"
port = 7000
regions = ["cn-beijing"]
udp_max_flows = 1024

  [[listener.group]]
  name = "ip"
  region = "cn-beijing"
  balance = "RoundRobin"
    [[listener.group.endpoint]]
    address = "10.0.4.1:5000"

[[listener]]
name = "plain"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "iphash"
  region = "cn-beijing"
  balance = "ip_hash"
    [[listener.group.endpoint]]
    address = "10.0.5.1:80"
"#,
        catalog = catalog_path().display()
    );
    let file = dir.path().join("gtd.toml");
    std::fs::write(&file, &text).unwrap();
    let c = config::load(&file, None).unwrap_or_else(|e| panic!("{e}"));
    let certs = dir.path().join("certs");

    assert_eq!(
        c.node.source_ip,
        Some("127.0.0.2".parse::<IpAddr>().unwrap())
    );
    assert_eq!(c.admin.bind, "[::1]:9200".parse::<SocketAddr>().unwrap());
    assert_eq!(c.admin.token.as_deref(), Some("s3cret"));
    assert_eq!(c.catalog, catalog());

    let site = &c.listeners[0];
    assert_eq!((site.protocol, site.port), (Protocol::Https, 8443));
    assert_eq!(site.failover, FailoverMode::Recompute);
    assert!(site.fail_open);
    assert_eq!(site.affinity, Affinity::SourceIp);
    assert_eq!(site.connect_timeout, Duration::from_secs(2));
    assert_eq!(site.idle_timeout, Duration::from_secs(90));
    assert_eq!(site.drain_timeout, Duration::ZERO);
    assert_eq!(site.max_connections, 5000);
    assert_eq!(site.header_timeout, Duration::from_secs(5));
    assert_eq!(site.upstream_timeout, Duration::from_secs(120));
    assert!(!site.retry);
    assert_eq!(site.tries, 5);
    assert_eq!(site.retry_timeout, Duration::from_secs(15));
    assert!(site.retry_non_idempotent);
    assert_eq!(site.unhealthy_status, StatusSet(vec![500..=500, 502..=504]));
    assert!(site.unhealthy_status.contains(503) && !site.unhealthy_status.contains(501));
    assert_eq!(site.sticky.as_ref().unwrap().cookie, "gtd_route");
    let tls = site.tls.as_ref().unwrap();
    assert_eq!(tls.certs.len(), 2);
    assert_eq!(tls.certs[0].cert, certs.join("site.pem"));
    assert_eq!(tls.certs[1].key, certs.join("other.key"));

    assert_eq!(site.routes.len(), 2);
    let r = &site.routes[0];
    assert_eq!(r.host.as_deref(), Some("*.example.com"));
    assert_eq!(r.path_prefix, ["/v2/", "/api/"]);
    let h = r.header.as_ref().unwrap();
    assert_eq!((h.name.as_str(), h.value.as_str()), ("X-Canary", "1"));
    assert_eq!(r.groups, ["beijing"]);
    assert_eq!(site.routes[1].host, None);
    assert_eq!(site.routes[1].path_prefix, ["/static/"]);
    assert_eq!(site.routes[1].groups, ["shanghai", "beijing"]);

    let bj = &site.groups[0];
    assert_eq!(bj.ratio, 62.5);
    let per_region = BTreeMap::from([("cn-beijing".to_owned(), 1), ("cn-shanghai".to_owned(), 2)]);
    assert_eq!(bj.priority, Some(Priority::PerRegion(per_region)));
    assert_eq!(
        bj.priority.as_ref().unwrap().for_region("cn-shanghai"),
        Some(2)
    );
    let Balance::Hash { key, consistent } = &bj.balance else {
        panic!("{:?}", bj.balance)
    };
    assert!(consistent);
    assert_eq!(key.text, "${http_X_User}:$cookie_sid:$request_uri");
    assert_eq!(
        key.parts,
        [
            KeyPart::Header("x-user".into()),
            KeyPart::Literal(":".into()),
            KeyPart::Cookie("sid".into()),
            KeyPart::Literal(":".into()),
            KeyPart::RequestUri,
        ]
    );
    assert_eq!(bj.min_healthy, 2);
    assert_eq!(bj.path_prefix.as_deref(), Some("/test"));
    assert_eq!(bj.keepalive, 0);
    let up = bj.tls.as_ref().unwrap();
    assert!(up.enabled && !up.insecure_skip_verify);
    assert_eq!(up.sni.as_deref(), Some("api.example.com"));
    assert_eq!(up.ca.as_deref(), Some(certs.join("ca.pem").as_path()));
    assert_eq!(
        up.client_cert.as_deref(),
        Some(certs.join("client.pem").as_path())
    );
    assert_eq!(
        up.client_key.as_deref(),
        Some(certs.join("client.key").as_path())
    );
    assert_eq!(up.min_version, TlsVersion::V1_3);

    let hc = bj.health_check.as_ref().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Https);
    assert_eq!(hc.port, Some(8081));
    assert_eq!(hc.interval, Duration::from_secs(10));
    assert_eq!(hc.connect_timeout, Duration::from_secs(2));
    assert_eq!(hc.read_timeout, Duration::from_secs(3));
    assert_eq!(hc.timeout, Duration::from_secs(5));
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (1, 5));
    assert_eq!(hc.method, CheckMethod::Post);
    assert_eq!(hc.path, "/health");
    assert_eq!(hc.host.as_deref(), Some("health.example.com"));
    let headers: Vec<_> = hc
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(headers, [("Accept", "text/plain"), ("X-Check", "1")]);
    assert_eq!(hc.body.as_deref(), Some("ping"));
    assert_eq!(hc.expect_status, StatusSet(vec![200..=200, 204..=299]));
    assert_eq!(
        hc.expect_headers.get("X-Ok").map(String::as_str),
        Some("yes")
    );
    assert_eq!(hc.expect_body.as_deref(), Some("pong"));
    assert!(hc.id_header && hc.essential && hc.explicit);

    let e = &bj.endpoints[0];
    assert_eq!(e.weight, 7);
    assert_eq!(e.max_conns, Some(100));
    assert!(e.down && e.drain && !e.enabled && !e.backup);
    assert_eq!(e.max_fails, 0);
    assert_eq!(e.fail_timeout, Duration::from_secs(30));
    assert_eq!(
        bj.endpoints[1].address.host,
        Host::Ip("2001:db8::1".parse().unwrap())
    );
    assert_eq!(bj.endpoints[1].address.text, "[2001:db8::1]:443");
    assert_eq!(
        bj.endpoints[2].address.host,
        Host::Name("api.internal".into())
    );

    let sh = &site.groups[1];
    assert_eq!(sh.ratio, 0.0);
    assert_eq!(
        sh.balance,
        Balance::LeastTime {
            measure: Measure::LastByte,
            factor: 0.5
        }
    );
    let hc = sh.health_check.as_ref().unwrap();
    assert_eq!(
        (hc.interval, hc.timeout),
        (Duration::from_secs(3), Duration::from_secs(3))
    );
    assert!(sh.endpoints[0].backup);
    assert_eq!(sh.endpoints[0].slow_start, Some(Duration::from_secs(60)));

    let hz = &site.groups[2];
    assert_eq!(hz.ratio, 100.0);
    assert_eq!(
        hz.balance,
        Balance::Feedback {
            header: "X-Capacity".into(),
            inverse: true,
            factor: 0.9
        }
    );
    assert_eq!(hz.endpoints[0].weight, 1000);
    assert_eq!(hz.endpoints[0].slow_start, Some(Duration::from_millis(250)));

    let game = &c.listeners[1];
    assert_eq!(game.proxy_protocol, Some(ProxyProtocol::V2));
    let methods: Vec<_> = game.groups.iter().map(|g| g.balance.clone()).collect();
    assert_eq!(
        methods,
        [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::Random { two: true },
            Balance::LeastTime {
                measure: Measure::Connect,
                factor: 0.9
            },
        ]
    );
    let ranks: Vec<_> = game.groups.iter().map(|g| g.priority.clone()).collect();
    assert_eq!(
        ranks,
        [
            Some(Priority::Fixed(2)),
            Some(Priority::Fixed(1)),
            Some(Priority::Fixed(3)),
            Some(Priority::Fixed(4))
        ]
    );
    let hc = game.groups[0].health_check.as_ref().unwrap();
    assert_eq!(
        (hc.timeout, hc.connect_timeout),
        (Duration::from_secs(1), Duration::from_secs(1))
    );
    // The default timeout is min(interval, 30s).
    let hc = game.groups[1].health_check.as_ref().unwrap();
    assert_eq!(
        (hc.interval, hc.timeout),
        (Duration::from_secs(120), Duration::from_secs(30))
    );

    let voice = &c.listeners[2];
    assert_eq!(voice.udp_max_flows, 1024);
    assert_eq!(voice.groups[0].balance, Balance::RoundRobin);
    assert_eq!(c.listeners[3].groups[0].balance, Balance::IpHash);
}
