#!/usr/bin/env python3
"""Figures of benches/failover/run.sh.

    analyze.py RUN_DIR                                one run: one JSON object (a results.jsonl line)
    analyze.py --summary RESULTS.jsonl [--commit C]   the Markdown table of every run

Times are seconds from the fault (t_fault) or from the restore (t_restore), taken from:
  * the backends' own request logs (backend.py logs every request head when it arrives), for
    the last request the faulty endpoint received and for failback; health-check requests
    (path /health) are left out;
  * gtd's /metrics scraped every 100 ms (observer.py): a killed backend cannot log the
    attempts on it, so for `kill` the last attempt is the last change of
    gtd_connect_failures_total for it (seen at the next scrape) or the last passive mark;
  * gtd's log (RUST_LOG=info): "endpoint out of rotation after max_fails" (passive checks),
    "health checks: endpoint unhealthy" / "healthy" (active checks);
  * wrk (count.lua) and the open-loop probes (observer.py) for what clients got.
"""

import argparse
import datetime
import json
import os
import re
import sys

SHIPPED_UNHEALTHY_STATUS = "502,503,504"  # config.toml's HTTP listener
FAIL_TIMEOUT = 10.0  # the endpoint default, which run.sh keeps


def read_events(d):
    ev = {}
    with open(os.path.join(d, "events")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            ev[k] = v
    for k in ("t_start", "t_fault", "t_restore"):
        ev[k] = float(ev[k])
    return ev


def traffic(path):
    """(t, path, outcome) of every client request a backend logged (health checks left out)."""
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[1] != "#mode" and not parts[1].startswith("/health"):
                    out.append((float(parts[0]), parts[1], parts[2]))
    return out


LOG_KINDS = (
    ("endpoint out of rotation after max_fails", "passive"),
    ("endpoint back in rotation", "back"),
    ("health checks: endpoint unhealthy", "unhealthy"),
    ("health checks: endpoint healthy", "healthy"),
)


def gtd_log(d):
    """(t, kind, endpoint, line) of the lines of gtd's log that matter here."""
    out = []
    p = os.path.join(d, "gtd.log")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                for text, kind in LOG_KINDS:
                    if text in line:
                        ts = line.split()[0].replace("Z", "+00:00")
                        t = datetime.datetime.fromisoformat(ts).timestamp()
                        m = re.search(r"endpoint=(\S+)", line)
                        out.append((t, kind, m.group(1) if m else "?", line.strip()))
    return out


def metrics(d):
    """series -> [(t, value)]: every change the observer saw, the first value included."""
    out = {}
    p = os.path.join(d, "metrics.tsv")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                t, series, value = line.rstrip("\n").split(" ")
                out.setdefault(series, []).append((float(t), float(value)))
    return out


def series(m, name, **labels):
    want = ['%s="%s"' % kv for kv in labels.items()]
    for s, v in m.items():
        if s.startswith(name + "{") and all(w in s for w in want):
            return v
    return []


def wrk_counts(d):
    res = {}
    p = os.path.join(d, "wrk.log")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                if line.startswith("failover-count "):
                    for kv in line.split()[1:]:
                        k, _, v = kv.partition("=")
                        res[k] = v
                elif line.startswith("Requests/sec:"):
                    res["rps"] = float(line.split()[1])
    for k in ("sent", "received", "non2xx", "connect_errors", "read_errors", "write_errors", "timeouts"):
        if k in res:
            res[k] = int(res[k])
    if "max_latency_ms" in res:
        res["max_latency_ms"] = float(res["max_latency_ms"])
    return res


def probes(d):
    rows = []
    p = os.path.join(d, "probes.tsv")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                _, sent, done, status, backend = line.split()
                rows.append((float(sent), None if done == "-" else float(done), status, backend))
    return rows


def rnd(x, n=2):
    return None if x is None else round(x, n)


def analyze(d):
    ev = read_events(d)
    tf, tr = ev["t_fault"], ev["t_restore"]
    addr = ev["faulty_address"]
    setting = ev["setting"]
    interval, threshold = (5.0, 3) if setting == "shipped" else (1.0, 2)
    check_timeout = min(interval, 30.0)  # the default: min(interval, 30 s)
    goal = threshold * interval + check_timeout

    def rel(t, base):
        return rnd(None if t is None else t - base)

    a1 = traffic(os.path.join(d, "a1.requests"))
    a2 = traffic(os.path.join(d, "a2.requests"))
    b1 = traffic(os.path.join(d, "b1.requests"))
    during = [r for r in a1 if tf <= r[0] < tr]
    last_received = max((r[0] for r in during), default=None)
    after = [r for r in a1 if r[0] >= tr]

    m = metrics(d)
    cf = series(m, "gtd_connect_failures_total", endpoint=addr)
    cf_times = [t for t, _ in cf[1:] if tf <= t < tr]
    base = [v for t, v in cf if t < tf]
    upto = [v for t, v in cf if t < tr]
    connect_failures = int(upto[-1] - base[-1]) if base and upto else None
    gh = series(m, "gtd_group_healthy", group="primary")
    group_down = next((t for t, v in gh if t >= tf and v == 0), None)

    log = [(t, k, line) for t, k, e, line in gtd_log(d) if e == addr]
    passive = [t for t, k, _ in log if k == "passive" and tf <= t < tr]
    unhealthy = next((t for t, k, _ in log if k == "unhealthy" and t >= tf), None)
    healthy = next((t for t, k, _ in log if k == "healthy" and unhealthy and t > unhealthy), None)
    back = next((t for t, k, _ in log if k == "back" and t >= tr), None)
    passive_causes = sorted({re.search(r"cause=(.*?) max_fails=", ln).group(1)
                             for t, k, ln in log if k == "passive" and tf <= t < tr
                             and "cause=" in ln})

    if ev["fault"] == "kill":
        last_routed = max(cf_times + passive, default=None)
        source = "connect failures (100 ms scrapes) and passive marks"
    else:
        last_routed = last_received
        source = "backend log"

    # Traffic that reached the faulty endpoint while its verdict said unhealthy: requests it
    # logged more than 10 ms after the verdict's log line (a request picked just before the
    # change is still on its way for a fraction of a millisecond), and for a killed one the
    # connects gtd tried on it (seen by a scrape more than 100 ms after the verdict).
    after_verdict = None
    if unhealthy is not None:
        end = healthy if healthy is not None else float("inf")
        after_verdict = sum(1 for r in a1 if unhealthy + 0.01 <= r[0] < end) + sum(
            1 for t in cf_times if unhealthy + 0.1 < t < end
        )

    # Failback means something when the endpoint was out at the restore: the active verdict
    # had flipped, or a passive mark still held.
    out_at_restore = (unhealthy is not None and unhealthy < tr) or any(
        tr - FAIL_TIMEOUT < t < tr for t in passive
    )

    w = wrk_counts(d)
    wrk_failed = None
    if "non2xx" in w:
        wrk_failed = w["non2xx"] + w["connect_errors"] + w["read_errors"] + w["write_errors"]

    pr = probes(d)
    failed = [p for p in pr if p[2] != "pending" and not p[2].startswith("2")]
    pending = [p for p in pr if p[2] == "pending"]
    lat = [p[1] - p[0] for p in pr if p[1] is not None]
    statuses = {}
    for p in failed:
        statuses[p[2]] = statuses.get(p[2], 0) + 1
    failed_lat = [p[1] - p[0] for p in failed]

    res = {
        "setting": setting,
        "fault": ev["fault"],
        "primary": int(ev["primary"]),
        "interval_s": interval,
        "unhealthy_threshold": threshold,
        "goal_s": goal,
        "fault_secs": int(ev["fault_secs"]),
        "recover_secs": int(ev["recover_secs"]),
        "linger_s": int(ev.get("linger", "0")),
        "unhealthy_status": ev.get("unhealthy_status", ""),
        "last_routed_s": rel(last_routed, tf),
        "last_routed_source": source,
        "last_received_s": rel(last_received, tf),
        "received_during_fault": len(during),
        "held_during_fault": sum(1 for r in during if r[2] == "held"),
        "answered_502_during_fault": sum(1 for r in during if r[2] == "502"),
        "connect_failures_during_fault": connect_failures,
        "last_connect_failure_s": rel(max(cf_times, default=None), tf),
        "passive_first_s": rel(min(passive, default=None), tf),
        "passive_marks_s": [rel(t, tf) for t in passive],
        "passive_causes": passive_causes,
        "active_unhealthy_s": rel(unhealthy, tf),
        "active_flipped_during_fault": unhealthy is not None and unhealthy < tr,
        "active_healthy_again_s": rel(healthy, tr),
        "passive_back_s": rel(back, tr),
        "primary_group_down_s": rel(group_down, tf),
        "requests_after_verdict": after_verdict,
        "secondary_first_s": rel(next((r[0] for r in b1 if r[0] >= tf), None), tf),
        "secondary_requests": sum(1 for r in b1 if tf <= r[0]),
        "other_primary_requests_during_fault": sum(1 for r in a2 if tf <= r[0] < tr),
        "out_at_restore": out_at_restore,
        "failback_s": rel(min((r[0] for r in after), default=None), tr) if out_at_restore else None,
        "wrk": w,
        "wrk_failed": wrk_failed,
        "wrk_unanswered_at_end": (w["sent"] - w["received"]) if "sent" in w else None,
        "probes": len(pr),
        "probes_failed": len(failed),
        "probes_failed_statuses": statuses,
        "probes_failed_latency_s": [rnd(min(failed_lat, default=None)), rnd(max(failed_lat, default=None))],
        "probes_pending_at_end": len(pending),
        "probe_max_latency_s": rnd(max(lat, default=None), 3),
        "probes_over_1s": sum(1 for x in lat if x > 1.0),
        "load": [ev.get("load_at_restore", ""), ev.get("load_end", "")],
    }
    in_time = last_routed is None or last_routed - tf <= goal
    res["goal_met"] = bool(in_time and (wrk_failed or 0) == 0 and not failed and not pending)
    return res


def secs(x):
    return "—" if x is None else "%.1f" % x


def summary(path, commit):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    loads = [float(x.split()[0]) for r in runs for x in r.get("load", []) if x]
    out = [
        "## Failover (gtd %s, %s)"
        % (commit, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        "",
        "%d runs; 1-minute load average during them %s on %d CPUs (the machine is shared: "
        "timings move with it)."
        % (
            len(runs),
            "%.1f–%.1f" % (min(loads), max(loads)) if loads else "?",
            os.cpu_count() or 0,
        ),
        "",
        "Seconds from the fault, or from the restore for failback. *Last to it*: the last client "
        "request the faulty endpoint received (its own log), for `kill` the last connect gtd "
        "tried on it (gtd_connect_failures_total scraped every 100 ms, or a passive mark). "
        "*Passive*: \"endpoint out of rotation after max_fails\" (each mark). *Active*: \"health "
        "checks: endpoint unhealthy\". *Goal*: unhealthy_threshold × interval + one check "
        "timeout, and no failed request. *Failed*: non-2xx and socket errors, of wrk's requests "
        "and of the open-loop probes (every request a GET). *Held*: requests gtd sent into the "
        "black hole; *pending*: probes unanswered when the run ended. *Failback*: the first client "
        "request the endpoint received after the restore (— when it was never out).",
        "",
        "| setting | fault | primary endpoints | last to it | passive | active | goal | failed wrk | "
        "failed probes | held / pending | failback |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        w = r.get("wrk", {})
        setting = r["setting"]
        if r["unhealthy_status"] != SHIPPED_UNHEALTHY_STATUS:
            setting += ", unhealthy_status [%s]" % r["unhealthy_status"].replace(",", ", ")
        passive = ", ".join(secs(t) for t in r["passive_marks_s"]) or "—"
        active = secs(r["active_unhealthy_s"])
        if r["active_unhealthy_s"] is not None and not r["active_flipped_during_fault"]:
            active += " (after the restore)"
        failed_probes = "%d of %d" % (r["probes_failed"], r["probes"])
        if r["probes_failed_statuses"]:
            failed_probes += " (%s)" % ", ".join(
                "%s×%d" % kv for kv in sorted(r["probes_failed_statuses"].items())
            )
        out.append(
            "| %s | %s | %d | %s | %s | %s | %s %s | %s of %s | %s | %d / %d | %s |"
            % (
                setting,
                r["fault"],
                r["primary"],
                secs(r["last_routed_s"]),
                passive,
                active,
                secs(r["goal_s"]),
                "met" if r["goal_met"] else "missed",
                r["wrk_failed"] if r["wrk_failed"] is not None else "—",
                w.get("sent", "—"),
                failed_probes,
                r["held_during_fault"],
                r["probes_pending_at_end"],
                secs(r["failback_s"]),
            )
        )
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", nargs="?")
    ap.add_argument("--summary")
    ap.add_argument("--commit", default="?")
    a = ap.parse_args()
    if a.summary:
        sys.stdout.write(summary(a.summary, a.commit))
    elif a.run_dir:
        print(json.dumps(analyze(a.run_dir), sort_keys=True))
    else:
        ap.error("RUN_DIR or --summary")


if __name__ == "__main__":
    main()
