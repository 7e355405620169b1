#!/usr/bin/env python3
"""Fleet convergence benchmark: time from `gtd push` to every node serving the new split.

Starts a three-member etcd cluster and N `gtd run --etcd` nodes on loopback (127.0.0.2 and up,
half in each acceleration region of a two-group config, no health checks so the split is the
cascade's), pushes revision 1 and waits until every node serves it; then, ROUNDS times, edits
a ratio, runs `gtd push` and polls every node's `/status` until each one serves the new
revision *and* shows the new share. Reports, per round, the time `gtd push` took and the time
from the push's start until the last node served the new split; then the median, p90 and max.

    benches/fleet/run.py [--nodes 3,20] [--rounds 10] [--gtd target/dist/gtd]

Everything listens on 127.0.0.x; every process started is stopped by its PID at the end.
Needs `etcd` (Debian: etcd-server) and a dist build (`cargo build --profile dist --bin gtd --bin sim`).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """\
catalog = "{catalog}"

[[listener]]
name = "web"
protocol = "tcp"
port = {port}
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = {ratio}
    [[listener.group.endpoint]]
    address = "127.0.0.1:1"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50
    [[listener.group.endpoint]]
    address = "127.0.0.1:2"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except Exception:
        return None, b""


def wait(what, cond, cap=60.0):
    deadline = time.monotonic() + cap
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.02)


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, args, log):
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(log, "ab"))
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def etcd_cluster(procs, d, started=None):
    """Three etcd members; their client URLs, comma-separated. `started`, a list, receives
    each member's (name, client port, process)."""
    members = [(f"m{i}", free_port(), free_port()) for i in range(1, 4)]
    initial = ",".join(f"{n}=http://127.0.0.1:{peer}" for n, _, peer in members)
    for n, client, peer in members:
        p = procs.start(["etcd", "--name", n, "--data-dir", os.path.join(d, n),
                         "--listen-client-urls", f"http://127.0.0.1:{client}",
                         "--advertise-client-urls", f"http://127.0.0.1:{client}",
                         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-cluster", initial, "--initial-cluster-token", "gtd-bench"],
                        os.path.join(d, f"{n}.log"))
        if started is not None:
            started.append((n, client, p))
    for _, client, _ in members:
        wait("etcd healthy", lambda: b"true" in get(f"http://127.0.0.1:{client}/health")[1])
    return ",".join(f"http://127.0.0.1:{c}" for _, c, _ in members)


def serves(status, revision, ratio):
    """The node serves `revision` and its split is the one of Beijing at `ratio`."""
    fleet = status.get("fleet", {})
    if fleet.get("applied") != revision:
        return False
    web = next(l for l in status["listeners"] if l["name"] == "web")
    beijing = next(g for g in web["groups"] if g["name"] == "beijing")
    return beijing["ratio"] == ratio


def run(n_nodes, rounds, gtd, d):
    procs = Procs()
    try:
        endpoints = etcd_cluster(procs, d)
        config = os.path.join(d, "config.toml")
        catalog = os.path.join(ROOT, "regions", "catalog.toml")
        port = free_port()

        def write(ratio):
            with open(config, "w") as f:
                f.write(CONFIG.format(catalog=catalog, port=port, ratio=ratio))

        def push():
            t = time.monotonic()
            out = subprocess.run([gtd, "push", "--etcd", endpoints, "--config", config],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"gtd push failed: {out.stderr}")
            return t, time.monotonic() - t

        write(50)
        push()
        admins = []
        for i in range(n_nodes):
            ip = f"127.0.0.{2 + i}"
            region = "cn-beijing" if i % 2 == 0 else "cn-shanghai"
            admin = f"{ip}:{free_port()}"
            procs.start([gtd, "run", "--etcd", endpoints, "--region", region, "--bind", ip,
                         "--admin", admin, "--node-id", f"node-{i}",
                         "--cache", os.path.join(d, f"cache-{i}.json")],
                        os.path.join(d, f"node-{i}.log"))
            admins.append(admin)

        def all_serve(revision, ratio):
            for a in admins:
                code, body = get(f"http://{a}/status", timeout=1.0)
                if code != 200 or not serves(json.loads(body), revision, ratio):
                    return False
            return True

        wait("every node serving revision 1", lambda: all_serve(1, 50))
        pushes, converged = [], []
        for k in range(rounds):
            ratio = 10 + 10 * (k % 8)
            if ratio == 50:
                ratio = 95
            write(ratio)
            revision = k + 2
            started, took = push()
            pending = set(admins)
            while pending:
                for a in list(pending):
                    code, body = get(f"http://{a}/status", timeout=1.0)
                    if code == 200 and serves(json.loads(body), revision, ratio):
                        pending.discard(a)
                if time.monotonic() - started > 60:
                    sys.exit(f"round {k}: {len(pending)} nodes never served revision {revision}")
            done = time.monotonic() - started
            pushes.append(took)
            converged.append(done)
            print(f"  {n_nodes:>2} nodes round {k + 1:>2}: push {took * 1000:7.1f} ms, "
                  f"every node serving {done * 1000:7.1f} ms", flush=True)
            # The next change after the registry entries settled (they are rewritten every 2 s
            # and after each revision): rounds do not overlap.
            time.sleep(0.5)
        return pushes, converged
    finally:
        procs.stop()


def require(gtd):
    """Exits, saying what to install or build, without etcd or without a gtd at `gtd`."""
    if not shutil.which("etcd"):
        sys.exit("etcd not found (Debian: apt-get install etcd-server)")
    if not os.path.exists(gtd):
        sys.exit(f"{gtd} not found: cargo build --profile dist --bin gtd")


def summary(xs):
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return f"median {statistics.median(xs) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="3,20")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--gtd", default=os.path.join(ROOT, "target", "dist", "gtd"))
    args = ap.parse_args()
    require(args.gtd)
    results = []
    for n in [int(x) for x in args.nodes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="gtd-fleet-bench-") as d:
            pushes, converged = run(n, args.rounds, args.gtd, d)
        results.append((n, pushes, converged))
    print()
    for n, pushes, converged in results:
        print(f"{n:>2} nodes: gtd push {summary(pushes)}; push start to every node serving "
              f"the new split {summary(converged)}")


if __name__ == "__main__":
    main()
