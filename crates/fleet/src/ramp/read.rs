//! Reading a node for the ramp's gates: its own counters from its admin server — `/status`
//! (decisions, each endpoint's served, each group's measured RTT) and `/metrics` (attempts,
//! errors, the upstream response-time histograms) — with no metrics store in between.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::gates::{Counts, Latency, Timing};

/// One node's reading: its [`Counts`] per `LISTENER/GROUP`, and its [`Timing`].
pub type Reading = (BTreeMap<String, Counts>, Timing);

/// Why a node could not be read: the ramp leaves it out of its gates and says so in its log.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No TCP connection to its admin server.
    #[error("connecting to {admin}: {error}")]
    Connect {
        /// The admin address asked.
        admin: String,
        /// Why not.
        error: std::io::Error,
    },
    /// The request or the answer broke off.
    #[error("asking {admin}{path}: {error}")]
    Io {
        /// The admin address asked.
        admin: String,
        /// `/status` or `/metrics`.
        path: &'static str,
        /// Why.
        error: std::io::Error,
    },
    /// Something answered, not with a 200 of HTTP.
    #[error("{admin}{path}: {answer}")]
    Answer {
        /// The admin address asked.
        admin: String,
        /// `/status` or `/metrics`.
        path: &'static str,
        /// Its status line, or "no HTTP answer".
        answer: String,
    },
    /// No whole answer within [`ANSWER_LIMIT`].
    #[error("{admin}{path}: no answer in {} s", ANSWER_LIMIT.as_secs())]
    Timeout {
        /// The admin address asked.
        admin: String,
        /// `/status` or `/metrics`.
        path: &'static str,
    },
    /// `/status` is not the JSON a node writes.
    #[error("{admin}/status: {error}")]
    Json {
        /// The admin address asked.
        admin: String,
        /// serde's reason.
        error: serde_json::Error,
    },
    /// Another node answers at the address the registry gives for this one: two nodes
    /// whose admin servers are bound to `127.0.0.1:9100` on two hosts both register that
    /// address, and the driver would read its own counters as the other node's.
    #[error("{admin} answers as {}, not as {expected}", answered.as_deref().unwrap_or("a node outside the fleet"))]
    NotThatNode {
        /// The admin address asked.
        admin: String,
        /// The node the registry says is there.
        expected: String,
        /// The registry id `/status` gives (none: a node that follows no fleet).
        answered: Option<String>,
    },
}

/// How long one admin request may take.
const ANSWER_LIMIT: Duration = Duration::from_secs(5);

/// The [`Reading`] of the node registered as `id`, from the admin server at `admin` (as
/// [`reach`] gives it): its counters per `LISTENER/GROUP` — decisions from `/status`
/// (`served`), attempts and errors from `/metrics` (`gtd_requests_total`,
/// `gtd_connect_failures_total`) — and its [`Timing`]: each group's `rtt_ms` and each
/// endpoint's `served` (`/status`), each group's `gtd_upstream_response_seconds` histogram
/// (`/metrics`; HTTP listeners only). Refused unless `/status` names `id` as the node.
pub async fn reading(admin: &str, id: &str) -> Result<Reading, ReadError> {
    let status = get(admin, "/status").await?;
    let doc: serde_json::Value =
        serde_json::from_str(&status).map_err(|error| ReadError::Json {
            admin: admin.to_owned(),
            error,
        })?;
    let answered = doc["fleet"]["id"].as_str();
    if answered != Some(id) {
        return Err(ReadError::NotThatNode {
            admin: admin.to_owned(),
            expected: id.to_owned(),
            answered: answered.map(str::to_owned),
        });
    }
    let mut out: BTreeMap<String, Counts> = BTreeMap::new();
    let mut timing = Timing::default();
    for l in doc["listeners"].as_array().into_iter().flatten() {
        let ln = l["name"].as_str().unwrap_or_default();
        for g in l["groups"].as_array().into_iter().flatten() {
            let gn = g["name"].as_str().unwrap_or_default();
            let name = format!("{ln}/{gn}");
            out.entry(name.clone()).or_default().decisions = g["served"].as_u64().unwrap_or(0);
            if let Some(r) = g["rtt_ms"].as_f64() {
                timing.rtt_ms.insert(name.clone(), r);
            }
            for e in g["endpoints"].as_array().into_iter().flatten() {
                if let (Some(a), Some(s)) = (e["address"].as_str(), e["served"].as_u64()) {
                    // A name's addresses are one row each, under the name's text.
                    *timing.served.entry(format!("{name}/{a}")).or_default() += s;
                }
            }
        }
    }
    let metrics = get(admin, "/metrics").await?;
    metrics_of(&metrics, &mut out, &mut timing);
    Ok((out, timing))
}

/// What `/metrics` adds: attempts, errors and the response-time histograms.
fn metrics_of(metrics: &str, out: &mut BTreeMap<String, Counts>, timing: &mut Timing) {
    let mut seen_attempts: BTreeMap<String, bool> = BTreeMap::new();
    for line in metrics.lines() {
        let (requests, connect, bucket) = (
            line.starts_with("gtd_requests_total{"),
            line.starts_with("gtd_connect_failures_total{"),
            line.starts_with("gtd_upstream_response_seconds_bucket{"),
        );
        if !requests && !connect && !bucket {
            continue;
        }
        let Some((labels, value)) = line.split_once("} ") else {
            continue;
        };
        let labels = parse_labels(labels.split_once('{').map_or("", |x| x.1));
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        let (Some(l), Some(g)) = (labels.get("listener"), labels.get("group")) else {
            continue;
        };
        if g.is_empty() {
            continue;
        }
        let name = format!("{l}/{g}");
        if bucket {
            let h = timing.latency.entry(name).or_default();
            match labels.get("le").map(String::as_str) {
                Some("+Inf") => h.count = value as u64,
                Some(le) => {
                    if let Ok(le) = le.parse::<f64>() {
                        h.buckets.push((le, value as u64));
                    }
                }
                None => {}
            }
            continue;
        }
        let c = out.entry(name.clone()).or_default();
        seen_attempts.insert(name, true);
        c.attempts += value as u64;
        if connect || labels.get("code_class").is_some_and(|c| c == "5xx") {
            c.errors += value as u64;
        }
    }
    for (g, c) in out.iter_mut() {
        if !seen_attempts.contains_key(g) {
            c.attempts = c.decisions;
        }
    }
    for h in timing.latency.values_mut() {
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    timing.latency.retain(|_, h: &mut Latency| h.count > 0);
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((k, v)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = v.char_indices();
        let mut end = v.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(k.trim_start_matches(',').trim().to_owned(), value);
        rest = &v[end..];
    }
    out
}

/// Where another node reaches `admin` (a registry entry's): an admin server bound to every
/// address (`0.0.0.0:9100`) is asked at its host's name, from the node's id
/// (`REGION@HOST:PORT`), when the id has one.
pub fn reach(admin: &str, id: &str) -> String {
    match admin.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => id
            .split_once('@')
            .and_then(|(_, rest)| rest.rsplit_once(':'))
            .map_or_else(
                || admin.to_owned(),
                |(host, _)| format!("{host}:{}", a.port()),
            ),
        _ => admin.to_owned(),
    }
}

/// An HTTP/1.0 GET to an admin server: the body of a 200.
async fn get(admin: &str, path: &'static str) -> Result<String, ReadError> {
    let io = |error| ReadError::Io {
        admin: admin.to_owned(),
        path,
        error,
    };
    let work = async {
        let mut s = tokio::net::TcpStream::connect(admin)
            .await
            .map_err(|error| ReadError::Connect {
                admin: admin.to_owned(),
                error,
            })?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
            .await
            .map_err(io)?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(io)?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let answer = |answer: &str| ReadError::Answer {
            admin: admin.to_owned(),
            path,
            answer: answer.to_owned(),
        };
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| answer("no HTTP answer"))?;
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            return Err(answer(head.lines().next().unwrap_or_default()));
        }
        Ok(body.to_owned())
    };
    tokio::time::timeout(ANSWER_LIMIT, work)
        .await
        .map_err(|_| ReadError::Timeout {
            admin: admin.to_owned(),
            path,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_bound_everywhere_is_reached_at_its_host() {
        assert_eq!(
            reach("0.0.0.0:9100", "cn-beijing@edge-1:9100"),
            "edge-1:9100"
        );
        assert_eq!(
            reach("10.0.0.5:9100", "cn-beijing@edge-1:9100"),
            "10.0.0.5:9100"
        );
        assert_eq!(reach("0.0.0.0:9100", "custom"), "0.0.0.0:9100");
    }

    #[test]
    fn labels_are_read() {
        let l = parse_labels(r#"listener="web",group="a",endpoint="1.2.3.4:5",code_class="5xx""#);
        assert_eq!(l["listener"], "web");
        assert_eq!(l["group"], "a");
        assert_eq!(l["endpoint"], "1.2.3.4:5");
        assert_eq!(l["code_class"], "5xx");
    }

    #[test]
    fn the_metrics_give_attempts_errors_and_histograms() {
        let text = "\
gtd_requests_total{listener=\"web\",group=\"a\",endpoint=\"x:1\",code_class=\"2xx\"} 90
gtd_requests_total{listener=\"web\",group=\"a\",endpoint=\"x:1\",code_class=\"5xx\"} 10
gtd_requests_total{listener=\"web\",group=\"\",endpoint=\"\",code_class=\"5xx\"} 7
gtd_upstream_response_seconds_bucket{listener=\"web\",group=\"a\",le=\"0.05\"} 95
gtd_upstream_response_seconds_bucket{listener=\"web\",group=\"a\",le=\"0.001\"} 40
gtd_upstream_response_seconds_bucket{listener=\"web\",group=\"a\",le=\"+Inf\"} 100
gtd_upstream_response_seconds_sum{listener=\"web\",group=\"a\"} 1.5
gtd_upstream_response_seconds_count{listener=\"web\",group=\"a\"} 100
";
        let mut out = BTreeMap::new();
        out.insert(
            "web/b".to_owned(),
            Counts {
                decisions: 3,
                ..Counts::default()
            },
        );
        let mut timing = Timing::default();
        metrics_of(text, &mut out, &mut timing);
        assert_eq!((out["web/a"].attempts, out["web/a"].errors), (100, 10));
        // A group with no HTTP answers counted: its decisions are its attempts.
        assert_eq!(out["web/b"].attempts, 3);
        assert_eq!(
            timing.latency["web/a"],
            Latency {
                buckets: vec![(0.001, 40), (0.05, 95)],
                count: 100
            }
        );
    }
}
