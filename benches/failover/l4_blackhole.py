#!/usr/bin/env python3
"""The L4 blackhole, on a TCP listener: one of two endpoints keeps accepting connections and
reading what clients send, and never answers (a hung process). Open-loop probes (a new
connection every 20 ms: "PING n\\n", then the answer, 5 s at most) measure what clients get
under three configurations of the same group:

  connect  a tcp check that only connects (what could be configured before issue 29)
  talk     the check sends 'PING\\r\\n' and expects '+PONG' (read_timeout 500ms)
  fbt      talk, and first_byte_timeout = "300ms" on the listener

Everything runs on 127.0.0.1 (gtd 18560, admin 18569, endpoints 18561 and 18562): the backends
and the probes are threads of this script; gtd is one child process in its own process group,
stopped by that group when each run ends (also on error). A benchmark, not a test: it prints
its figures and never fails on one.

  benches/failover/l4_blackhole.py [--gtd PATH] [--only connect,talk,fbt]
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time

import harness

REPO = harness.REPO
GTD_PORT, ADMIN_PORT, A1, A2 = 18560, 18569, 18561, 18562
WARMUP, FAULT, AFTER, RATE, PROBE_TIMEOUT = 3.0, 10.0, 4.0, 50, 5.0


class Backend:
    """Answers '+PONG NAME <line>' to each line; while `hung`, reads and never answers."""

    def __init__(self, name, port):
        self.name, self.hung, self.stop = name, False, False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(1024)
        self.sock.settimeout(0.2)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()
        self.sock.close()

    def serve(self, c):
        c.settimeout(30)
        try:
            buf = b""
            while not self.stop:
                data = c.recv(4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not self.hung:
                        c.sendall(b"+PONG " + self.name.encode() + b" " + line + b"\n")
        except OSError:
            pass
        finally:
            c.close()


def probe(n, out):
    t0 = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", GTD_PORT), timeout=PROBE_TIMEOUT)
        s.settimeout(max(0.01, PROBE_TIMEOUT - (time.time() - t0)))
        s.sendall(b"PING %d\n" % n)
        answer = b""
        while b"\n" not in answer:
            d = s.recv(4096)
            if not d:
                break
            answer += d
        s.close()
        who = answer.split(b" ")[1].decode() if answer.startswith(b"+PONG") else None
        out.append((t0, who or "closed", time.time() - t0))
    except socket.timeout:
        out.append((t0, "timeout", time.time() - t0))
    except OSError as e:
        out.append((t0, "error:" + e.__class__.__name__, time.time() - t0))


def admin(path):
    return harness.admin(ADMIN_PORT, path)


def config(variant):
    check = 'interval = "1s"\nunhealthy_threshold = 2\nhealthy_threshold = 2\n'
    if variant in ("talk", "fbt"):
        check += "send = 'PING\\r\\n'\nexpect = '+PONG'\n"
        check += 'connect_timeout = "500ms"\nread_timeout = "500ms"\n'
    extra = 'first_byte_timeout = "300ms"\n' if variant == "fbt" else ""
    return f"""catalog = "{REPO}/regions/catalog.toml"
[admin]
bind = "127.0.0.1:{ADMIN_PORT}"

[[listener]]
name = "game"
protocol = "tcp"
port = {GTD_PORT}
regions = ["cn-beijing"]
{extra}
  [[listener.group]]
  name = "g"
  region = "cn-beijing"
    [listener.group.health_check]
{check}
    [[listener.group.endpoint]]
    address = "127.0.0.1:{A1}"
    [[listener.group.endpoint]]
    address = "127.0.0.1:{A2}"
"""


def run(gtd, variant, tmp):
    a1, a2 = Backend("a1", A1), Backend("a2", A2)
    probes, threads, verdict = [], [], None
    with harness.Node(gtd, config(variant), tmp, variant, ADMIN_PORT):
        try:
            start = time.time()
            t_fault = start + WARMUP
            t_restore = t_fault + FAULT
            end = t_restore + AFTER
            n = 0
            while time.time() < end:
                now = time.time()
                if not a1.hung and t_fault <= now < t_restore:
                    a1.hung = True
                if a1.hung and now >= t_restore:
                    a1.hung = False
                if verdict is None and a1.hung and n % 5 == 0:
                    doc = json.loads(admin("/status"))
                    for e in doc["listeners"][0]["groups"][0]["endpoints"]:
                        if e["address"].endswith(str(A1)) and e["check"] and not e["check"]["healthy"]:
                            verdict = now - t_fault
                t = threading.Thread(target=probe, args=(n, probes), daemon=True)
                t.start()
                threads.append(t)
                n += 1
                time.sleep(max(0.0, start + n / RATE - time.time()))
            for t in threads:
                t.join(PROBE_TIMEOUT + 1)
            metrics = admin("/metrics")
        finally:
            a1.stop = a2.stop = True
            time.sleep(0.3)
    window = [p for p in probes if t_fault <= p[0] < t_restore]
    failed = [p for p in window if p[1] not in ("a1", "a2")]
    slow = sorted(p[2] for p in window if p[1] in ("a1", "a2"))

    def series(name):
        return sum(float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
                   if l.startswith(name) and f"{A1}" in l)

    return {
        "variant": variant,
        "probes in the fault": len(window),
        "failed": len(failed),
        "last failed after fault (s)": round(max((p[0] - t_fault for p in failed), default=0), 2),
        "check verdict after fault (s)": None if verdict is None else round(verdict, 1),
        "answered p99 (ms)": round(1000 * slow[int(0.99 * (len(slow) - 1))], 1) if slow else None,
        "connect failures on a1": int(series("gtd_connect_failures_total")),
    }


def main():
    args = harness.arguments("connect,talk,fbt")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in args.only.split(","):
            rows.append(run(args.gtd, v, tmp))
            print(json.dumps(rows[-1]), file=sys.stderr)
    keys = list(rows[0])
    harness.table(keys, [[r[k] for k in keys] for r in rows])


if __name__ == "__main__":
    main()
