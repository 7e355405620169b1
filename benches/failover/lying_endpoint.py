#!/usr/bin/env python3
"""The lying endpoint, on an HTTP listener: three endpoints (round robin) whose /health all
answer 200, one of which (c) answers 503 to every other real request (every Nth with
--lie-every N). Its checks pass all along, so only what real requests get can take it out:
outlier detection (consecutive_5xx and consecutive_gateway_failures, 5 each by default).
Open-loop requests (a GET on a new connection every 10 ms, 5 s at most, 30 s) measure the 503s
clients got per 5 s bucket, the share of requests that reached c after the first 5 s (as the
endpoints counted them: retries included), and when
/status first said c was ejected, under two configurations of the group:

  default   every outlier key at its default (detection on)
  off       consecutive_5xx = 0 and consecutive_gateway_failures = 0 (detection off)
  status    default, and unhealthy_status = [503] on the listener (a 503 is a failed attempt:
            retried on another endpoint, and a passive mark)

Everything runs on 127.0.0.1 (gtd 18550, admin 18559, endpoints 18551-18553): the endpoints
(http.server threads answering "ok NAME", or "503 NAME" when c lies) and the requests are
threads of this script; gtd is one child process in its own process group, stopped by that
group when each run ends (also on error). A benchmark, not a test: it prints its figures and
never fails on one.

  benches/failover/lying_endpoint.py [--gtd PATH] [--only default,off,status] [--lie-every N]
"""

import http.client
import http.server
import json
import os
import sys
import tempfile
import threading
import time

import harness

REPO = harness.REPO
GTD_PORT, ADMIN_PORT = 18550, 18559
ENDPOINTS = {"a": 18551, "b": 18552, "c": 18553}
LIAR, DURATION, RATE, BUCKET, REQ_TIMEOUT = "c", 30.0, 100, 5.0, 5.0


class Endpoint:
    """An HTTP/1.1 server thread; /health is 200; when `lie_every`, every Nth other request 503."""

    def __init__(self, name, port, lie_every):
        self.name, self.lie_every, self.count, self.lock = name, lie_every, 0, threading.Lock()
        self.seen = []  # arrival times of real requests (retries included)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                status = 200
                if self.path != "/health":
                    outer.seen.append(time.time())
                if self.path != "/health" and outer.lie_every:
                    with outer.lock:
                        outer.count += 1
                        if outer.count % outer.lie_every == 0:
                            status = 503
                body = (b"ok " if status == 200 else b"503 ") + outer.name.encode() + b"\n"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # gtd closing or resetting a pooled connection is no news here

        self.server = Server(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.1,),
                                       daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(2)


def request(n, out):
    t0 = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", GTD_PORT, timeout=REQ_TIMEOUT)
        c.request("GET", f"/r/{n}", headers={"Connection": "close"})
        r = c.getresponse()
        body = r.read().decode(errors="replace").split()
        c.close()
        out.append((t0, r.status, body[1] if len(body) > 1 and r.status in (200, 503) else "?"))
    except (OSError, http.client.HTTPException) as e:
        out.append((t0, "error:" + e.__class__.__name__, "?"))


def admin(path):
    return harness.admin(ADMIN_PORT, path)


def watch(until, start, out):
    """Every 200 ms, the liar's `ejected` in /status; keeps (seconds after start, state) on a
    change."""
    last = None
    while time.time() < until:
        try:
            doc = json.loads(admin("/status"))
            for e in doc["listeners"][0]["groups"][0]["endpoints"]:
                if e["address"].endswith(str(ENDPOINTS[LIAR])):
                    state = bool(e.get("ejected"))
                    if state != last:
                        out.append((round(time.time() - start, 2), state))
                        last = state
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.2)


def config(variant):
    outlier, listener = "", ""
    if variant == "status":
        listener = "unhealthy_status = [503]\n"
    if variant == "off":
        outlier = "  consecutive_5xx = 0\n  consecutive_gateway_failures = 0\n"
    endpoints = "".join(f'    [[listener.group.endpoint]]\n    address = "127.0.0.1:{p}"\n'
                        for p in ENDPOINTS.values())
    return f"""catalog = "{REPO}/regions/catalog.toml"
[admin]
bind = "127.0.0.1:{ADMIN_PORT}"

[[listener]]
name = "web"
protocol = "http"
port = {GTD_PORT}
regions = ["cn-beijing"]
{listener}
  [[listener.group]]
  name = "g"
  region = "cn-beijing"
{outlier}
    [listener.group.health_check]
    protocol = "http"
    path = "/health"

{endpoints}"""


def run(gtd, variant, lie_every, tmp):
    eps = [Endpoint(name, port, lie_every if name == LIAR else 0)
           for name, port in ENDPOINTS.items()]
    answers, states, threads = [], [], []
    with harness.Node(gtd, config(variant), tmp, variant, ADMIN_PORT):
        try:
            start = time.time()
            end = start + DURATION
            watcher = threading.Thread(target=watch, args=(end + 1, start, states), daemon=True)
            watcher.start()
            n = 0
            while time.time() < end:
                t = threading.Thread(target=request, args=(n, answers), daemon=True)
                t.start()
                threads.append(t)
                n += 1
                time.sleep(max(0.0, start + n / RATE - time.time()))
            for t in threads:
                t.join(REQ_TIMEOUT + 1)
            watcher.join(3)
            metrics = admin("/metrics")
        finally:
            for e in eps:
                e.stop()
    ejections = sum(float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
                    if l.startswith("gtd_outlier_ejections_total")
                    and str(ENDPOINTS[LIAR]) in l)
    buckets = {}
    for t0, status, _ in answers:
        k = int((t0 - start) // BUCKET)
        buckets.setdefault(k, [0, 0])
        buckets[k][0] += 1
        buckets[k][1] += status != 200
    # What reached c: the requests each endpoint received (retries included) after the first 5 s.
    later = {e.name: sum(t - start >= BUCKET for t in e.seen) for e in eps}
    first = next((t for t, s in states if s), None)
    return {
        "summary": {
            "variant": variant,
            "requests": len(answers),
            "not 200": sum(s != 200 for _, s, _ in answers),
            "reached c after 5 s (%)": round(100 * later[LIAR] / max(1, sum(later.values())), 1),
            "first ejected (s)": first,
            "ejections (metric)": int(ejections),
        },
        "buckets": {k: v for k, v in sorted(buckets.items())},
        "states": states,
    }


def main():
    def more(ap):
        ap.add_argument("--lie-every", type=int, default=2,
                        help="c answers 503 to every Nth real request (1: all of them)")

    args = harness.arguments("default,off", more)
    if args.lie_every < 1:
        sys.exit("--lie-every: 1 or more")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in args.only.split(","):
            runs.append(run(args.gtd, v, args.lie_every, tmp))
            print(json.dumps(runs[-1]["summary"]), file=sys.stderr)
            print(f"{v}: c's ejected by seconds after start: {runs[-1]['states']}",
                  file=sys.stderr)
    keys = list(runs[0]["summary"])
    harness.table(keys, [[r["summary"][k] for k in keys] for r in runs])
    ks = sorted(set().union(*(r["buckets"] for r in runs)))
    head = ["s after start"] + [f"{r['summary']['variant']}: not 200 / requests" for r in runs]
    rows = []
    for k in ks:
        row = [f"{int(k * BUCKET)}–{int((k + 1) * BUCKET)}"]
        for r in runs:
            n, bad = r["buckets"].get(k, (0, 0))
            row.append(f"{bad} / {n}")
        rows.append(row)
    harness.table(head, rows)


if __name__ == "__main__":
    main()
