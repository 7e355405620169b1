#!/usr/bin/env python3
"""etcd's database under a fleet: how fast it grows while N nodes keep their registry entries.

Starts one etcd member (its flags as given with --etcd-flag, e.g. the auto-compaction that
deploy/ sets) and N `gtd run --etcd` nodes on loopback (127.0.0.2 and up, half in each region of
a two-group config), pushes one revision, then for --seconds samples etcd's status each minute:
the database file's size (what etcd's quota counts), the part of it in use, and the store's
revision (one per write). It prints each sample as it comes, then the growth per hour and how
long the default 2 GiB quota would last at that rate.

    benches/fleet/etcd_size.py [--nodes 20] [--seconds 3600] [--gtd target/dist/gtd]
                               [--etcd-flag=--auto-compaction-mode=periodic ...]

Everything listens on 127.0.0.x; every process started is stopped by its PID at the end.
Needs `etcd` (Debian: etcd-server) and a gtd build.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import CONFIG, ROOT, Procs, require, free_port, get, wait  # noqa: E402

QUOTA = 2 * 1024 ** 3


def status(client):
    """etcd's maintenance status through its JSON gateway: (db size, db in use, revision); asked
    up to three times (a busy machine can keep etcd from answering one in time)."""
    req = urllib.request.Request(f"http://127.0.0.1:{client}/v3/maintenance/status", data=b"{}",
                                 headers={"content-type": "application/json"})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                s = json.load(r)
            break
        except OSError:
            if attempt == 2:
                raise
            time.sleep(1)
    return int(s["dbSize"]), int(s.get("dbSizeInUse", s["dbSize"])), int(s["header"]["revision"])


def mb(n):
    return f"{n / 1e6:8.2f} MB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--sample", type=int, default=60, help="seconds between samples")
    ap.add_argument("--gtd", default=os.path.join(ROOT, "target", "dist", "gtd"))
    ap.add_argument("--etcd-flag", action="append", default=[],
                    help="an extra flag for etcd (repeat); write it --etcd-flag=--name=value")
    args = ap.parse_args()
    require(args.gtd)
    procs = Procs()
    with tempfile.TemporaryDirectory(prefix="gtd-etcd-size-") as d:
        try:
            client, peer = free_port(), free_port()
            procs.start(["etcd", "--name", "m1", "--data-dir", os.path.join(d, "m1"),
                         "--listen-client-urls", f"http://127.0.0.1:{client}",
                         "--advertise-client-urls", f"http://127.0.0.1:{client}",
                         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-cluster", f"m1=http://127.0.0.1:{peer}", *args.etcd_flag],
                        os.path.join(d, "etcd.log"))
            wait("etcd healthy", lambda: b"true" in get(f"http://127.0.0.1:{client}/health")[1])
            endpoints = f"http://127.0.0.1:{client}"
            config = os.path.join(d, "config.toml")
            with open(config, "w") as f:
                f.write(CONFIG.format(catalog=os.path.join(ROOT, "regions", "catalog.toml"),
                                      port=free_port(), ratio=50))
            pushed = subprocess.run([args.gtd, "push", "--etcd", endpoints, "--config", config],
                                    stdout=subprocess.DEVNULL)
            if pushed.returncode != 0:
                sys.exit("gtd push failed")
            admins = []
            for i in range(args.nodes):
                ip = f"127.0.0.{2 + i}"
                admin = f"{ip}:{free_port()}"
                procs.start([args.gtd, "run", "--etcd", endpoints,
                             "--region", "cn-beijing" if i % 2 == 0 else "cn-shanghai",
                             "--bind", ip, "--admin", admin, "--node-id", f"node-{i}",
                             "--cache", os.path.join(d, f"cache-{i}.json")],
                            os.path.join(d, f"node-{i}.log"))
                admins.append(admin)
            wait("every node up", lambda: all(get(f"http://{a}/healthz")[0] == 200 for a in admins))
            time.sleep(5)
            start = time.monotonic()
            first = status(client)
            print(f"{args.nodes} nodes, etcd {' '.join(args.etcd_flag) or '(defaults)'}")
            print("     t   db size        in use      revision")
            print(f"{0:>5}s {mb(first[0])} {mb(first[1])} {first[2]:>10}", flush=True)
            last = first
            while time.monotonic() - start < args.seconds:
                time.sleep(min(args.sample, max(0.0, args.seconds - (time.monotonic() - start))))
                last = status(client)
                t = time.monotonic() - start
                print(f"{t:>5.0f}s {mb(last[0])} {mb(last[1])} {last[2]:>10}", flush=True)
            hours = (time.monotonic() - start) / 3600
            grew = last[0] - first[0]
            print()
            print(f"over {hours * 60:.1f} min: db size {mb(first[0]).strip()} -> "
                  f"{mb(last[0]).strip()} ({grew / hours / 1e6:.1f} MB/hour), in use "
                  f"{mb(first[1]).strip()} -> {mb(last[1]).strip()}, "
                  f"{(last[2] - first[2]) / hours:.0f} writes/hour")
            if grew > 0:
                days = (QUOTA - last[0]) / (grew / hours) / 24
                print(f"at that rate the default 2 GiB quota is reached in {days:.1f} days")
            else:
                print("the database did not grow")
        finally:
            procs.stop()


if __name__ == "__main__":
    main()
