#!/usr/bin/env python3
"""The UDP restart: one of two endpoints of a UDP listener dies (its socket closes, so its port
answers ICMP "port unreachable") for 10 s and comes back. Open-loop new flows (a new client
socket every 20 ms sending one datagram "n", then the reply, 1 s at most) and four long-lived
flows (one datagram every 100 ms each, on one socket for the whole run) measure, per second,
the share of new flows endpoint b gets, the flows lost, and how long after b's restart its share
of new flows is back above 40 %, under two configurations of the group:

  checks    a udp check (send 'PING', expect 'PONG'; interval 1 s, thresholds 2, timeout 500 ms)
            and the default passive marks (max_fails 1, fail_timeout 10s)
  passive   no active check, fail_timeout = "2s" on both endpoints

Everything runs on 127.0.0.1 (gtd 18570/udp, admin 18579, endpoints 18571 and 18572): the
endpoints (echo threads answering "PONG NAME <datagram>") and the flows are threads of this
script; gtd is one child process in its own process group, stopped by that group when each run
ends (also on error). A benchmark, not a test: it prints its figures and never fails on one.

  benches/failover/udp_restart.py [--gtd PATH] [--only checks,passive]
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
GTD_PORT, ADMIN_PORT, A, B = 18570, 18579, 18571, 18572
WARMUP, FAULT, AFTER, RATE, FLOW_TIMEOUT = 5.0, 10.0, 15.0, 50, 1.0
LONG_FLOWS, LONG_EVERY = 4, 0.1


class Echo:
    """Answers 'PONG NAME <datagram>' to each datagram until stopped; stop() closes the socket."""

    def __init__(self, name, port):
        self.name, self.halt = name, False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            while not self.halt:
                try:
                    data, peer = self.sock.recvfrom(2048)
                except socket.timeout:
                    continue
                except OSError:
                    continue
                try:
                    self.sock.sendto(b"PONG " + self.name.encode() + b" " + data, peer)
                except OSError:
                    pass
        finally:
            self.sock.close()

    def stop(self):
        self.halt = True
        self.thread.join(2)


def who(reply):
    parts = reply.split(b" ")
    return parts[1].decode() if len(parts) > 1 and parts[0] == b"PONG" else "garbled"


def flow(n, out):
    """One new flow: a new socket, one datagram, the reply or FLOW_TIMEOUT."""
    t0 = time.time()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(FLOW_TIMEOUT)
    try:
        s.sendto(b"%d" % n, ("127.0.0.1", GTD_PORT))
        while True:
            data = s.recv(2048)
            if data.endswith(b" %d" % n):
                out.append((t0, who(data)))
                return
    except socket.timeout:
        out.append((t0, "lost"))
    except OSError as e:
        out.append((t0, "error:" + e.__class__.__name__))
    finally:
        s.close()


def long_flow(i, until, out):
    """One long-lived flow: a datagram every LONG_EVERY on one socket; (sent at, endpoint|lost)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(LONG_EVERY)
    seq = 0
    try:
        while time.time() < until:
            t0 = time.time()
            tag = b"L%d-%d" % (i, seq)
            seq += 1
            try:
                s.sendto(tag, ("127.0.0.1", GTD_PORT))
            except OSError:
                out.append((i, t0, "lost"))
                time.sleep(LONG_EVERY)
                continue
            got = "lost"
            while time.time() - t0 < LONG_EVERY:
                try:
                    s.settimeout(max(0.001, LONG_EVERY - (time.time() - t0)))
                    data = s.recv(2048)
                except (socket.timeout, OSError):
                    break
                if data.endswith(b" " + tag):
                    got = who(data)
            out.append((i, t0, got))
            time.sleep(max(0.0, t0 + LONG_EVERY - time.time()))
    finally:
        s.close()


def admin(path):
    return harness.admin(ADMIN_PORT, path)


def watch(until, t_ref, out):
    """Every 100 ms, b's state in /status; keeps (seconds after the fault, state) on a change."""
    last = None
    while time.time() < until:
        try:
            doc = json.loads(admin("/status"))
            for e in doc["listeners"][0]["groups"][0]["endpoints"]:
                if e["address"].endswith(str(B)):
                    check = e.get("check") or {}
                    state = (check.get("healthy"), e.get("passive_down"))
                    if state != last:
                        out.append((round(time.time() - t_ref[0], 2), state))
                        last = state
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.1)


def config(variant):
    if variant == "checks":
        check = """    [listener.group.health_check]
    protocol = "udp"
    send = 'PING'
    expect = 'PONG'
    interval = "1s"
    timeout = "500ms"
    unhealthy_threshold = 2
    healthy_threshold = 2
"""
        endpoint = ""
    else:
        check, endpoint = "", '    fail_timeout = "2s"\n'
    return f"""catalog = "{REPO}/regions/catalog.toml"
[admin]
bind = "127.0.0.1:{ADMIN_PORT}"

[[listener]]
name = "game"
protocol = "udp"
port = {GTD_PORT}
regions = ["cn-beijing"]

  [[listener.group]]
  name = "g"
  region = "cn-beijing"
{check}
    [[listener.group.endpoint]]
    address = "127.0.0.1:{A}"
{endpoint}
    [[listener.group.endpoint]]
    address = "127.0.0.1:{B}"
{endpoint}"""


def run(gtd, variant, tmp):
    a, b = Echo("a", A), Echo("b", B)
    flows, longs, states, threads = [], [], [], []
    t_ref = [time.time() + 3600]
    with harness.Node(gtd, config(variant), tmp, variant, ADMIN_PORT):
        try:
            start = time.time()
            t_fault = start + WARMUP
            t_restore = t_fault + FAULT
            end = t_restore + AFTER
            t_ref[0] = t_fault
            side = [threading.Thread(target=watch, args=(end, t_ref, states), daemon=True)]
            side += [threading.Thread(target=long_flow, args=(i, end, longs), daemon=True)
                     for i in range(LONG_FLOWS)]
            for t in side:
                t.start()
            n = 0
            while time.time() < end:
                now = time.time()
                if b is not None and t_fault <= now < t_restore:
                    b.stop()
                    b = None
                    t_fault = time.time()
                    t_ref[0] = t_fault
                if b is None and now >= t_restore:
                    b = Echo("b", B)
                    t_restore = time.time()
                t = threading.Thread(target=flow, args=(n, flows), daemon=True)
                t.start()
                threads.append(t)
                n += 1
                time.sleep(max(0.0, start + n / RATE - time.time()))
            for t in threads + side:
                t.join(FLOW_TIMEOUT + 2)
        finally:
            a.stop()
            if b is not None:
                b.stop()
    return figures(variant, flows, longs, states, start, t_fault, t_restore, end)


def figures(variant, flows, longs, states, start, t_fault, t_restore, end):
    # Per 1 s bucket, from the fault: b's share of new flows (of those answered) and flows lost.
    buckets = {}
    for t0, got in flows:
        k = int((t0 - t_fault) // 1)
        if k < -WARMUP:
            continue  # the fault starts a little after WARMUP (b's thread stopping)
        buckets.setdefault(k, []).append(got)
    per_second = {}
    for k in sorted(buckets):
        got = buckets[k]
        answered = [g for g in got if g in ("a", "b")]
        share = 100 * sum(g == "b" for g in answered) / len(answered) if answered else None
        per_second[k] = (share, sum(g not in ("a", "b") for g in got))
    # Back above 40 %: the first 1 s window [t, t+1) with t >= the restore, stepped by 100 ms,
    # in which b had more than 40 % of the answered new flows.
    back = None
    t = t_restore
    while t + 1 <= end and back is None:
        win = [g for t0, g in flows if t <= t0 < t + 1 and g in ("a", "b")]
        if win and sum(g == "b" for g in win) / len(win) > 0.4:
            back = round(t + 1 - t_restore, 1)
        t += 0.1
    first_b = min((t0 for t0, g in flows if t0 >= t_restore and g == "b"), default=None)
    fault = [g for t0, g in flows if t_fault <= t0 < t_restore]
    after = [g for t0, g in flows if t0 >= t_restore]
    ok = ("a", "b")
    long_rows = []
    for i in range(LONG_FLOWS):
        mine = [(t0, g) for j, t0, g in longs if j == i]
        on = sorted({g for t0, g in mine if t0 < t_fault and g in ok})
        long_rows.append({
            "flow": i,
            "on": "/".join(on) or "?",
            "lost in the fault": sum(g not in ok for t0, g in mine if t_fault <= t0 < t_restore),
            "lost after the restore": sum(g not in ok for t0, g in mine if t0 >= t_restore),
            "answered after the restore by": "/".join(sorted({g for t0, g in mine
                                                              if t0 >= t_restore and g in ok})),
        })
    return {
        "summary": {
            "variant": variant,
            "new flows in the fault": len(fault),
            "lost in the fault": sum(g not in ok for g in fault),
            "lost after the restore": sum(g not in ok for g in after),
            "b share after the restore (%)": round(100 * after.count("b") / max(1, len(after)), 1),
            "first new flow on b after the restore (s)":
                None if first_b is None else round(first_b - t_restore, 2),
            "b back above 40 % after the restore (s)": back,
        },
        "per_second": per_second,
        "long": long_rows,
        "states": states,
        "restore": round(t_restore - t_fault, 2),
    }


def main():
    args = harness.arguments("checks,passive")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in args.only.split(","):
            runs.append(run(args.gtd, v, tmp))
            print(json.dumps(runs[-1]["summary"]), file=sys.stderr)
            print(f"{v}: b's state (check healthy, passive_down) by seconds after the fault: "
                  f"{runs[-1]['states']}", file=sys.stderr)
    keys = list(runs[0]["summary"])
    harness.table(keys, [[r["summary"][k] for k in keys] for r in runs])
    # Per second from the fault (restore at +10 s): b's share of new flows, lost flows.
    secs = sorted(set().union(*(r["per_second"] for r in runs)))
    head = ["s after the fault"]
    for r in runs:
        head += [f"{r['summary']['variant']}: b share %", f"{r['summary']['variant']}: lost"]
    rows = []
    for k in secs:
        row = [k]
        for r in runs:
            share, lost = r["per_second"].get(k, (None, None))
            row += [None if share is None else round(share), lost]
        rows.append(row)
    harness.table(head, rows)
    long_keys = ["variant"] + list(runs[0]["long"][0])
    harness.table(long_keys, [[r["summary"]["variant"]] + list(l.values()) for r in runs for l in r["long"]])


if __name__ == "__main__":
    main()
