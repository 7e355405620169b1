#!/usr/bin/env python3
"""gtd's reliability scorecard: the hardening trials of docs/reliability.md, re-runnable.

    benches/reliability/run.py [--quick] [--only NAME,...] [--gtd PATH] [--soak SECONDS]

Each trial starts a dist-profile gtd node and the embedded backends of `gtd demo --backends-only`
on 127.0.0.1 (ports 18680-18699), puts load or bad input on it and prints what it saw: a
table at the end, also written to target/bench/reliability/summary.md (and results.json).
Trials: reloads, bad-reloads, drain, slowloris, headers, h2-floods, udp-flood, overload,
admin, configs, soak. It is a benchmark, not a test: it reports figures, it never fails on one
(the exit status is 0 unless the harness itself broke).

Needs python3 (standard library only), wrk, and cargo (it builds gtd once, or --gtd PATH).
Every process it starts runs in its own session and is stopped by its process group, also on
error and Ctrl-C; every client loop is bounded by a count or a deadline.
"""

import argparse
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HOST = "127.0.0.1"
WEB, SMALL, TCP, UDP, ADMIN = 18680, 18685, 18690, 18695, 18699
TOKEN = "reliability-token"
PROCS = []


def log(msg):
    print(time.strftime("[%H:%M:%S] ") + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes


def start(name, args, run_dir, env=None):
    out = open(os.path.join(run_dir, name + ".log"), "wb")
    p = subprocess.Popen(
        args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, env=env,
    )
    PROCS.append(p)
    return p


def stop(p, sig=signal.SIGTERM, wait=30):
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if p in PROCS:
        PROCS.remove(p)


def stop_all():
    for p in list(PROCS):
        stop(p, signal.SIGKILL, 5)


def wait_port(port, deadline_s=60):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            socket.create_connection((HOST, port), 0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {HOST}:{port} after {deadline_s} s")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- configs


def config_text(ratio=50, extra_web=""):
    """The node's config: an HTTP listener with two groups and HTTP checks, a small HTTP
    listener (max_connections = 100), a TCP and a UDP listener; admin with a token."""
    return f"""catalog = "{REPO}/regions/catalog.toml"

[admin]
bind = "{HOST}:{ADMIN}"
token = "{TOKEN}"

[[listener]]
name = "web"
protocol = "http"
port = {WEB}
regions = ["cn-beijing"]
header_timeout = "5s"
{extra_web}
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = {ratio}
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "2s"
    [[listener.group.endpoint]]
    address = "{HOST}:18681"
    [[listener.group.endpoint]]
    address = "{HOST}:18682"
  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "2s"
    [[listener.group.endpoint]]
    address = "{HOST}:18683"

[[listener]]
name = "small"
protocol = "http"
port = {SMALL}
regions = ["cn-beijing"]
max_connections = 100
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 100
    [[listener.group.endpoint]]
    address = "{HOST}:18681"

[[listener]]
name = "tcp"
protocol = "tcp"
port = {TCP}
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 100
    [[listener.group.endpoint]]
    address = "{HOST}:18691"

[[listener]]
name = "udp"
protocol = "udp"
port = {UDP}
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 100
    [[listener.group.endpoint]]
    address = "{HOST}:18696"
"""


class Node:
    """A gtd node on the harness config, and the demo backends behind it."""

    def __init__(self, gtd, run_dir, name):
        self.gtd, self.dir, self.name = gtd, run_dir, name
        self.cfg = os.path.join(run_dir, name + ".toml")
        self.write(config_text())
        self.backends = start(
            name + "-backends",
            [gtd, "demo", "--config", self.cfg, "--backends-only"], run_dir,
        )
        wait_port(18681)
        self.proc = start(
            name + "-gtd",
            [gtd, "run", "--config", self.cfg, "--region", "cn-beijing"], run_dir,
            env=dict(os.environ, RUST_LOG="info,rustls=error"),
        )
        wait_port(WEB)
        wait_port(ADMIN)

    def write(self, text):
        tmp = self.cfg + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.cfg)

    def admin(self, method, path, token=TOKEN):
        req = urllib.request.Request(f"http://{HOST}:{ADMIN}{path}", method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def metric(self, name, *fragments):
        _, text = self.admin("GET", "/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and all(f in line for f in fragments):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log_text(self):
        with open(os.path.join(self.dir, self.name + "-gtd.log"), errors="replace") as f:
            return f.read()

    def close(self):
        stop(self.proc)
        stop(self.backends)


# ---------------------------------------------------------------- clients


def wrk(url, seconds, conns=32, threads=1):
    """wrk's requests, non-2xx/3xx and socket errors; the output kept."""
    out = subprocess.run(
        ["timeout", str(seconds + 30), "wrk", f"-t{threads}", f"-c{conns}",
         f"-d{seconds}s", "--latency", url],
        capture_output=True, text=True,
    ).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1)) if "requests in" in out else 0
    non2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    errors = 0
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        errors = sum(int(x) for x in m.groups())
    p99 = m.group(1) if (m := re.search(r"99%\s+(\S+)", out)) else "?"
    return {"requests": reqs, "non2xx": non2xx, "socket_errors": errors, "p99": p99, "out": out}


def in_background(fn, *args):
    box = {}
    t = threading.Thread(target=lambda: box.update(result=fn(*args)), daemon=True)
    t.start()
    return t, box


def http_get(port, path="/", timeout=10, extra=b""):
    """One HTTP/1.1 request on a new connection; the status (0: no answer)."""
    try:
        with socket.create_connection((HOST, port), timeout) as s:
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra +
                      b"Connection: close\r\n\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
            return int(m.group(1)) if m else 0
    except OSError:
        return 0


def tcp_holders(n):
    """n TCP connections through the TCP listener, each having read the endpoint's name."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((HOST, TCP), 10)
        s.settimeout(10)
        line = s.recv(64)
        assert line.endswith(b"\n"), line
        socks.append(s)
    return socks


def cut(socks):
    """How many of `socks` were closed by the other side (each is written to, then looked
    at: an endpoint that sinks bytes never answers, so a readable socket is a closed one)."""
    n = 0
    for s in socks:
        try:
            s.sendall(b"still here\n")
            r, _, _ = select.select([s], [], [], 0.2)
            if r and s.recv(64) == b"":
                n += 1
        except OSError:
            n += 1
    return n


# ---------------------------------------------------------------- trials


def trial_reloads(gtd, run, quick):
    node = Node(gtd, run, "reloads")
    try:
        holders = tcp_holders(20)
        count = 25 if quick else 101
        seconds = 20 if quick else 60
        t, box = in_background(wrk, f"http://{HOST}:{WEB}/", seconds)
        time.sleep(1)
        refused = 0
        for i in range(count):
            node.write(config_text(ratio=50 + (i % 2) * 10))
            if i % 2:
                os.kill(node.proc.pid, signal.SIGHUP)
            else:
                status, _ = node.admin("POST", "/reload")
                refused += status != 200
            time.sleep((seconds - 4) / count)
        t.join()
        w = box["result"]
        reloads = node.metric("gtd_config_reloads_total", 'result="ok"')
        tcp_cut = cut(holders)
        for h in holders:
            h.close()
        return {
            "what": f"{count} reloads (SIGHUP and POST /reload) under wrk -c32 {seconds}s, "
                    "20 TCP connections held across them",
            "requests": w["requests"], "non2xx": w["non2xx"],
            "socket_errors": w["socket_errors"], "reloads_ok": int(reloads),
            "reloads_refused": refused, "tcp_connections_cut": tcp_cut,
        }
    finally:
        node.close()


BAD_CONFIGS = [
    ("unknown key", lambda t: t.replace('header_timeout = "5s"', 'header_timeout = "5s"\nbogus = 1')),
    ("bad duration", lambda t: t.replace('header_timeout = "5s"', 'header_timeout = "5 parsecs"')),
    ("ratio out of range", lambda t: t.replace("ratio = 50", "ratio = 150", 1)),
    ("missing catalogue", lambda t: t.replace("regions/catalog.toml", "regions/nope.toml")),
    ("catalogue is a directory", lambda t: t.replace("regions/catalog.toml", "regions")),
    ("catalogue is /dev/zero", lambda t: re.sub(r'catalog = ".*"', 'catalog = "/dev/zero"', t)),
    ("port taken by another listener", lambda t: t.replace(f"port = {SMALL}", f"port = {WEB}")),
    ("truncated", lambda t: t[: len(t) // 2]),
    ("invalid UTF-8", lambda t: t.replace("beijing", "bei\udcffjing", 1)),
    ("unknown region", lambda t: t.replace('region = "cn-shanghai"', 'region = "mars-1"')),
    ("no endpoint", lambda t: re.sub(r'    \[\[listener.group.endpoint\]\]\n    address = "127.0.0.1:18683"\n', "", t)),
    ("duplicate listener name", lambda t: t.replace('name = "small"', 'name = "web"')),
]


def trial_bad_reloads(gtd, run, quick):
    node = Node(gtd, run, "bad-reloads")
    try:
        holders = tcp_holders(10)
        rounds = 1 if quick else 3
        seconds = 15 if quick else 40
        t, box = in_background(wrk, f"http://{HOST}:{WEB}/", seconds)
        time.sleep(1)
        good = config_text()
        refused, accepted, named = 0, 0, 0
        for _ in range(rounds):
            for _, mutate in BAD_CONFIGS:
                text = mutate(good)
                with open(node.cfg + ".tmp", "wb") as f:
                    f.write(text.encode("utf-8", "surrogateescape"))
                os.replace(node.cfg + ".tmp", node.cfg)
                status, body = node.admin("POST", "/reload")
                if status == 422:
                    refused += 1
                    named += node.cfg in body or "catalog" in body
                else:
                    accepted += 1
                time.sleep((seconds - 4) / (rounds * len(BAD_CONFIGS)))
        node.write(good)
        t.join()
        w = box["result"]
        tcp_cut = cut(holders)
        for h in holders:
            h.close()
        return {
            "what": f"{rounds * len(BAD_CONFIGS)} bad configs ({len(BAD_CONFIGS)} kinds) "
                    f"reloaded under wrk -c32 {seconds}s",
            "requests": w["requests"], "non2xx": w["non2xx"],
            "socket_errors": w["socket_errors"], "refused": refused,
            "refusals_naming_the_file": named, "accepted": accepted,
            "tcp_connections_cut": tcp_cut,
        }
    finally:
        node.close()


def keepalive_client(stop_at, stats, lock):
    """Requests in a loop on one kept-alive connection; a request written on an open
    connection that gets no answer is lost (a connection refused at connect is not)."""
    s = None
    while time.time() < stop_at:
        if s is None:
            try:
                s = socket.create_connection((HOST, WEB), 5)
                s.settimeout(10)
            except OSError:
                with lock:
                    stats["refused"] += 1
                time.sleep(0.05)
                continue
        try:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                data += chunk
            head, rest = data.split(b"\r\n\r\n", 1)
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            need = int(m.group(1)) if m else 0
            while len(rest) < need:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed mid-body")
                rest += chunk
            with lock:
                stats["answered"] += 1
                if re.search(rb"(?i)connection: *close", head):
                    stats["told_to_close"] += 1
            if re.search(rb"(?i)connection: *close", head):
                s.close()
                s = None
        except OSError:
            with lock:
                stats["lost"] += 1
            s.close()
            s = None


def trial_drain(gtd, run, quick):
    node = Node(gtd, run, "drain")
    try:
        stats = {"answered": 0, "lost": 0, "refused": 0, "told_to_close": 0}
        lock = threading.Lock()
        stop_at = time.time() + 8
        threads = [threading.Thread(target=keepalive_client, args=(stop_at, stats, lock),
                                    daemon=True) for _ in range(16)]
        for th in threads:
            th.start()
        time.sleep(3)
        t0 = time.time()
        os.kill(node.proc.pid, signal.SIGTERM)
        node.proc.wait(60)
        exited = time.time() - t0
        for th in threads:
            th.join()
        return {
            "what": "SIGTERM under 16 kept-alive clients sending back to back "
                    "(drain_timeout 30s)",
            "answered": stats["answered"], "lost": stats["lost"],
            "told_connection_close": stats["told_to_close"],
            "refused_new_connections": stats["refused"],
            "exit_s": round(exited, 2), "exit_status": node.proc.returncode,
        }
    finally:
        node.close()


def trial_slowloris(gtd, run, quick):
    node = Node(gtd, run, "slowloris")
    try:
        n = 200 if quick else 1000
        socks = []
        for _ in range(n):
            s = socket.create_connection((HOST, WEB), 10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        opened = time.time()
        t, box = in_background(wrk, f"http://{HOST}:{WEB}/", 10, 16)
        cut_at = {}
        end = opened + 30
        while len(cut_at) < n and time.time() < end:
            for i, s in enumerate(socks):
                if i in cut_at:
                    continue
                try:
                    s.sendall(b"X")
                    r, _, _ = select.select([s], [], [], 0)
                    if r and s.recv(4096) is not None:
                        cut_at[i] = time.time() - opened
                except OSError:
                    cut_at[i] = time.time() - opened
            time.sleep(1)
        for s in socks:
            s.close()
        t.join()
        w = box["result"]
        return {
            "what": f"{n} slowloris connections (a header byte a second; header_timeout 5s) "
                    "beside wrk -c16 10s",
            "cut": len(cut_at), "cut_after_max_s": round(max(cut_at.values(), default=0), 1),
            "wrk_requests": w["requests"], "wrk_errors": w["socket_errors"] + w["non2xx"],
            "wrk_p99": w["p99"],
        }
    finally:
        node.close()


def trial_headers(gtd, run, quick):
    node = Node(gtd, run, "headers")
    try:
        cases = {
            "one 70 KiB header": b"X-Big: " + b"a" * 70 * 1024 + b"\r\n",
            "101 headers": b"".join(b"X-H%d: v\r\n" % i for i in range(101)),
            "99 headers": b"".join(b"X-H%d: v\r\n" % i for i in range(96)),
            "8 KiB path": None,
        }
        out = {"what": "request heads at and over the limits (64 KiB, 100 fields)"}
        for name, extra in cases.items():
            if extra is None:
                out[name] = http_get(WEB, "/" + "p" * 8192)
            else:
                out[name] = http_get(WEB, "/", extra=extra)
        out["healthz_after"] = node.admin("GET", "/healthz")[0]
        return out
    finally:
        node.close()


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# :method GET, :scheme http, :path /, :authority 127.0.0.1 (static-table HPACK only).
H2_HEADERS = bytes([0x82, 0x86, 0x84, 0x01, 9]) + b"127.0.0.1"


H2_ERRORS = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
             6: "FRAME_SIZE_ERROR", 9: "COMPRESSION_ERROR", 11: "ENHANCE_YOUR_CALM"}


def h2_flood(frames, after_s=8):
    """Sends the preface, SETTINGS and `frames` (an iterator of bytes) on h2c prior
    knowledge, reading as it goes, then waits up to `after_s` for the node's word: what the
    node did (its GOAWAY and error code, a close, or nothing) and how many responses came."""
    s = socket.create_connection((HOST, WEB), 10)
    s.setblocking(False)
    pending = bytearray(H2_PREFACE + h2_frame(4, 0, 0))
    got = bytearray()
    goaway, closed, answered, sent = None, False, 0, 0
    frames = iter(frames)
    done_sending = False
    t0 = time.time()
    quiet_until = None
    while goaway is None and not closed:
        while not done_sending and len(pending) < 1 << 16:
            try:
                pending += next(frames)
                sent += 1
            except StopIteration:
                done_sending = True
                quiet_until = time.time() + after_s
        if quiet_until and time.time() > quiet_until or time.time() - t0 > 120:
            break
        r, w, _ = select.select([s], [s] if pending else [], [], 0.5)
        # Read before writing, and read what is left after a failed write: the node's GOAWAY
        # sits in the socket before the reset its close causes (a flood leaves bytes unread).
        try:
            if r:
                chunk = s.recv(1 << 16)
                closed = not chunk
                got += chunk
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            closed = True
        try:
            if w and not closed:
                del pending[: s.send(pending)]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pending.clear()
            done_sending = True
            quiet_until = quiet_until or time.time() + 1
        while len(got) >= 9:
            length = int.from_bytes(got[:3], "big")
            if len(got) < 9 + length:
                break
            if got[3] == 7:
                code = int.from_bytes(got[9 + 4: 9 + 8], "big")
                goaway = H2_ERRORS.get(code, str(code))
            answered += got[3] == 1
            del got[: 9 + length]
    took = round(time.time() - t0, 1)
    s.close()
    if goaway:
        how = f"GOAWAY {goaway}"
    elif closed:
        how = "closed without GOAWAY"
    else:
        how = f"still open {after_s} s after the flood"
    return f"{how} after {took} s; {sent} frames sent, {answered} responses"


def trial_h2_floods(gtd, run, quick):
    node = Node(gtd, run, "h2-floods")
    n = 20_000 if quick else 100_000

    def rapid_reset():
        for i in range(n):
            sid = 2 * i + 1
            yield h2_frame(1, 0x5, sid, H2_HEADERS) + h2_frame(3, 0, sid, b"\0\0\0\x08")

    def pings():
        for _ in range(n):
            yield h2_frame(6, 0, 0, b"12345678")

    def settings():
        for _ in range(n):
            yield h2_frame(4, 0, 0, b"\x00\x03\x00\x00\x00\x64")

    def continuation():
        yield h2_frame(1, 0x1, 1, H2_HEADERS)
        for _ in range(n):
            yield h2_frame(9, 0, 1, b"\x40\x01a\x01b")

    def empty_data():
        yield h2_frame(1, 0x4, 1, H2_HEADERS)
        for _ in range(n):
            yield h2_frame(0, 0, 1, b"")

    try:
        out = {"what": f"HTTP/2 floods on h2c, {n} frames each (header_timeout 5s): "
                       "what the node did"}
        for name, gen in [("rapid reset", rapid_reset), ("PING flood", pings),
                          ("SETTINGS flood", settings), ("CONTINUATION flood", continuation),
                          ("empty DATA flood", empty_data)]:
            out[name] = h2_flood(gen())
        # Malformed frames: the GOAWAY code RFC 9113 asks, and the one the node sends.
        big = h2_frame(0, 0, 1, b"x" * 20000)
        for name, want, frames in [
            ("frame over 16 KiB", "FRAME_SIZE_ERROR", [h2_frame(1, 4, 1, H2_HEADERS), big]),
            ("PING of 7 bytes", "FRAME_SIZE_ERROR", [h2_frame(6, 0, 0, b"1234567")]),
            ("window overflow", "FLOW_CONTROL_ERROR",
             [h2_frame(8, 0, 0, b"\x7f\xff\xff\xff")] * 2),
            ("bad HPACK index", "COMPRESSION_ERROR", [h2_frame(1, 5, 1, b"\xff\xff\xff\x7f")]),
            ("DATA on a closed stream", "STREAM_CLOSED",
             [h2_frame(1, 5, 1, H2_HEADERS), h2_frame(0, 0, 1, b"late")]),
        ]:
            got = h2_flood(iter(frames), after_s=3)
            out["error: " + name] = f"RFC 9113: {want}; node: {got.split(' after')[0]}"
        out["healthz_after"] = node.admin("GET", "/healthz")[0]
        out["request_after"] = http_get(WEB)
        out["rss_mb_after"] = round(rss_kb(node.proc.pid) / 1024, 1)
        return out
    finally:
        node.close()


def trial_udp_flood(gtd, run, quick):
    node = Node(gtd, run, "udp-flood")
    try:
        seconds = 5 if quick else 15
        sent = [0]

        def flood(k):
            socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
            for s in socks:
                s.setblocking(False)
            payload = b"x" * 1200
            end = time.time() + seconds
            while time.time() < end:
                for s in socks:
                    try:
                        s.sendto(payload, (HOST, UDP))
                        sent[0] += 1
                    except BlockingIOError:
                        pass
            for s in socks:
                s.close()

        threads = [threading.Thread(target=flood, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        time.sleep(1)
        return {
            "what": f"UDP flood: 2 threads x 8 sockets, 1200-byte datagrams for {seconds}s",
            "datagrams_sent": sent[0],
            "counted_dropped_by_kernel": int(node.metric("gtd_udp_datagrams_dropped_total")),
            "flows_active": int(node.metric("gtd_udp_flows_active")),
            "healthz_after": node.admin("GET", "/healthz")[0],
            "rss_mb_after": round(rss_kb(node.proc.pid) / 1024, 1),
        }
    finally:
        node.close()


def trial_overload(gtd, run, quick):
    node = Node(gtd, run, "overload")
    try:
        n = 1000 if quick else 3000
        held = []
        statuses = {}
        for _ in range(n):
            try:
                s = socket.create_connection((HOST, SMALL), 10)
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                held.append(s)
            except OSError:
                statuses["connect failed"] = statuses.get("connect failed", 0) + 1
        for s in held:
            s.settimeout(10)
            try:
                data = s.recv(4096)
                m = re.match(rb"HTTP/1\.1 (\d{3})", data)
                key = m.group(1).decode() if m else "closed"
            except OSError:
                key = "reset"
            statuses[key] = statuses.get(key, 0) + 1
        for s in held:
            s.close()
        time.sleep(0.5)
        warns = node.log_text().count("max_connections")
        return {
            "what": f"{n} connections at once on a listener with max_connections = 100",
            "answers": statuses,
            "refused_counted": int(node.metric("gtd_connections_refused_total",
                                               'listener="small"')),
            "warning_lines": warns,
        }
    finally:
        node.close()


def trial_admin(gtd, run, quick):
    node = Node(gtd, run, "admin")
    try:
        paths = ["/status", "/metrics", "/healthz", "/nope", "/endpoints/web/beijing/%ZZ/disable",
                 "/endpoints/web/beijing/" + "9" * 5000 + "/disable",
                 "/endpoints/../../etc/passwd", "/endpoints/web/nope/127.0.0.1:1/disable",
                 "/reload?x=" + "%" * 100, "//", "/%00"]
        seen = {}
        for p in paths:
            for method in ("GET", "POST", "DELETE"):
                status, _ = node.admin(method, urllib.parse.quote(p, safe="/%?=.:"))
                seen[status] = seen.get(status, 0) + 1
        no_token = node.admin("POST", "/reload", token=None)[0]
        wrong = node.admin("POST", "/reload", token="wrong")[0]
        open_cfg = os.path.join(run, "open-admin.toml")
        with open(open_cfg, "w") as f:
            f.write(config_text().replace(f'bind = "{HOST}:{ADMIN}"\ntoken = "{TOKEN}"',
                                          'bind = "0.0.0.0:18698"'))
        check = subprocess.run([gtd, "check", "--config", open_cfg], capture_output=True,
                               text=True, timeout=30)
        return {
            "what": f"{len(paths) * 3} odd admin requests; POST without/with a wrong token; "
                    "an admin bound to 0.0.0.0 without a token",
            "statuses": seen, "post_without_token": no_token, "post_wrong_token": wrong,
            "open_bind_check_exit": check.returncode,
            "open_bind_error": (check.stdout + check.stderr).strip().splitlines()[0][:160],
            "node_alive": node.proc.poll() is None,
        }
    finally:
        node.close()


def mutations(text, k, rng):
    """`k` malformed variants of `text`: lines dropped, duplicated, cut, values replaced by
    other types, bytes flipped, invalid UTF-8, huge names."""
    lines = text.splitlines(keepends=True)
    values = ['"x"', "-1", "1e999", "[]", "{}", "true", '"999999999s"', '""', "0", "1.5",
              '"' + "n" * 70000 + '"', "[[1]]", '"/dev/zero"', '"\\u0000"']
    out = []
    for _ in range(k):
        kind = rng.randrange(7)
        ls = list(lines)
        i = rng.randrange(len(ls))
        if kind == 0:
            del ls[i]
        elif kind == 1:
            ls.insert(i, ls[i])
        elif kind == 2:
            ls = ls[:i] + [ls[i][: rng.randrange(len(ls[i]) + 1)]]
        elif kind == 3 and "=" in ls[i]:
            ls[i] = ls[i].split("=", 1)[0] + "= " + rng.choice(values) + "\n"
        elif kind == 4:
            b = bytearray("".join(ls).encode())
            b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
            continue
        elif kind == 5:
            b = "".join(ls).encode()
            j = rng.randrange(len(b))
            out.append(b[:j] + b"\xff\xfe" + b[j:])
            continue
        else:
            ls.insert(i, rng.choice(["[[listener]]\n", "[admin]\n", "[[listener.group]]\n",
                                     "name = \"" + "L" * 65536 + "\"\n", "port = 70000\n"]))
        out.append("".join(ls).encode())
    return out


def trial_configs(gtd, run, quick):
    rng = random.Random(18)
    base = open(os.path.join(REPO, "config.toml")).read().replace(
        'catalog = "regions/catalog.toml"', f'catalog = "{REPO}/regions/catalog.toml"')
    variants = mutations(base, 106 if quick else 1000, rng)
    exits, named, slow, unchanged = {}, 0, 0.0, 0
    d = tempfile.mkdtemp(dir=run)
    for i, v in enumerate(variants):
        path = os.path.join(d, f"c{i}.toml")
        with open(path, "wb") as f:
            f.write(v)
        t0 = time.time()
        try:
            r = subprocess.run([gtd, "check", "--config", path], capture_output=True,
                               timeout=20)
            code = r.returncode
            text = (r.stdout + r.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired:
            code, text = "hang", ""
        slow = max(slow, time.time() - t0)
        exits[str(code)] = exits.get(str(code), 0) + 1
        if code not in (0, "hang") and re.search(re.escape(path) + r":\d+:\d+", text):
            named += 1
        if code == 0:
            unchanged += 1
        os.remove(path)
    return {
        "what": f"{len(variants)} mutated copies of config.toml through gtd check",
        "exit_codes": exits, "errors_naming_file_line_col": named,
        "accepted_as_valid": unchanged, "slowest_s": round(slow, 2),
        "panics_101": exits.get("101", 0), "hangs": exits.get("hang", 0),
    }


def trial_soak(gtd, run, quick, seconds):
    node = Node(gtd, run, "soak")
    try:
        samples = []
        t, box = in_background(wrk, f"http://{HOST}:{WEB}/", seconds, 64)
        end = time.time() + seconds
        while time.time() < end:
            samples.append(rss_kb(node.proc.pid))
            time.sleep(min(5, max(0.1, end - time.time())))
        t.join()
        w = box["result"]
        return {
            "what": f"soak: wrk -c64 for {seconds}s, RSS sampled every 5 s",
            "requests": w["requests"], "non2xx": w["non2xx"],
            "socket_errors": w["socket_errors"], "p99": w["p99"],
            "rss_mb_first": round(samples[0] / 1024, 1),
            "rss_mb_last": round(samples[-1] / 1024, 1),
            "rss_mb_max": round(max(samples) / 1024, 1),
        }
    finally:
        node.close()


TRIALS = ["reloads", "bad-reloads", "drain", "slowloris", "headers", "h2-floods", "udp-flood",
          "overload", "admin", "configs", "soak"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts, about 3 minutes")
    ap.add_argument("--only", default="", help="comma-separated trials: " + ",".join(TRIALS))
    ap.add_argument("--gtd", help="this gtd binary (no build)")
    ap.add_argument("--soak", type=int, default=300, help="soak seconds [300; --quick: 30]")
    ap.add_argument("--results", default=os.path.join(REPO, "target/bench/reliability"))
    args = ap.parse_args()
    only = [t for t in args.only.split(",") if t] or TRIALS
    for t in only:
        if t not in TRIALS:
            ap.error(f"unknown trial {t!r}")
    gtd = args.gtd
    if not gtd:
        log("building gtd (dist profile)")
        subprocess.run(["cargo", "build", "--profile", "dist", "--bin", "gtd"], cwd=REPO, check=True)
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
        gtd = os.path.join(target, "dist", "gtd")
    run = os.path.join(args.results, "run")
    os.makedirs(run, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    results = {}
    signal.signal(signal.SIGINT, lambda *_: (stop_all(), sys.exit(130)))
    try:
        for name in only:
            log(f"trial {name}")
            fn = globals()["trial_" + name.replace("-", "_")]
            t0 = time.time()
            if name == "soak":
                r = fn(gtd, run, args.quick, 30 if args.quick and args.soak == 300 else args.soak)
            else:
                r = fn(gtd, run, args.quick)
            r["took_s"] = round(time.time() - t0, 1)
            results[name] = r
            log(json.dumps(r))
    finally:
        stop_all()
    lines = [f"# reliability scorecard (commit {commit}, {time.strftime('%Y-%m-%d')}, "
             f"{'quick' if args.quick else 'full'})", ""]
    for name, r in results.items():
        lines.append(f"## {name}: {r.pop('what')}")
        lines.append("")
        for k, v in r.items():
            lines.append(f"- {k}: {json.dumps(v) if isinstance(v, dict) else v}")
        lines.append("")
    text = "\n".join(lines)
    with open(os.path.join(args.results, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.results, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
