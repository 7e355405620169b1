#!/usr/bin/env python3
"""etcd's leader killed under a fleet: which nodes lose their session, and how late a revision
pushed during the election reaches them.

Starts a three-member etcd cluster and N `gtd run --etcd` nodes on loopback (as run.py does),
pushes revision 1 and waits until every node serves it. Then, ROUNDS times: finds the leader,
kills it (SIGKILL), pushes a new ratio at once (the push waits out the election), notes when a
surviving member names a new leader, and polls every node until it serves the new split. It
restarts the killed member before the next round. Per round it prints how many nodes logged a
lost session (`etcd: not following`) after the kill, and the time from the new leader to the
last node serving the revision.

    benches/fleet/leader_loss.py [--nodes 6] [--rounds 3] [--gtd target/dist/gtd]

Everything listens on 127.0.0.x; every process started is stopped by its PID at the end.
Needs `etcd` (Debian: etcd-server) and a gtd build.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import CONFIG, ROOT, Procs, require, etcd_cluster, free_port, get, serves, wait  # noqa: E402


def member_status(client):
    """(this member's id, the leader it knows) from etcd's JSON gateway, or None."""
    req = urllib.request.Request(f"http://127.0.0.1:{client}/v3/maintenance/status", data=b"{}",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=0.5) as r:
            s = json.load(r)
        return s["header"]["member_id"], s.get("leader", "0")
    except Exception:
        return None


def lost_sessions(logs):
    """How many times each node has logged a lost session so far."""
    return [open(p, errors="replace").read().count("etcd: not following") for p in logs]


def reasons(logs, before):
    """The distinct errors of the sessions lost since `before`."""
    out = set()
    for p, b in zip(logs, before):
        lines = [l for l in open(p, errors="replace") if "etcd: not following" in l][b:]
        for l in lines:
            at = l.find("error=")
            out.add(l[at:].strip()[:200] if at >= 0 else l.strip()[:200])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gtd", default=os.path.join(ROOT, "target", "dist", "gtd"))
    args = ap.parse_args()
    require(args.gtd)
    procs = Procs()
    with tempfile.TemporaryDirectory(prefix="gtd-leader-loss-") as d:
        try:
            members = []
            endpoints = etcd_cluster(procs, d, members)
            config = os.path.join(d, "config.toml")
            port = free_port()
            catalog = os.path.join(ROOT, "regions", "catalog.toml")

            def push(ratio):
                with open(config, "w") as f:
                    f.write(CONFIG.format(catalog=catalog, port=port, ratio=ratio))
                out = subprocess.run([args.gtd, "push", "--etcd", endpoints, "--config", config],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"gtd push failed: {out.stderr}")

            push(50)
            admins, logs = [], []
            for i in range(args.nodes):
                ip = f"127.0.0.{2 + i}"
                admin = f"{ip}:{free_port()}"
                log = os.path.join(d, f"node-{i}.log")
                procs.start([args.gtd, "run", "--etcd", endpoints,
                             "--region", "cn-beijing" if i % 2 == 0 else "cn-shanghai",
                             "--bind", ip, "--admin", admin, "--node-id", f"node-{i}",
                             "--cache", os.path.join(d, f"cache-{i}.json")], log)
                admins.append(admin)
                logs.append(log)

            def serving(a, revision, ratio):
                code, body = get(f"http://{a}/status", timeout=1.0)
                return code == 200 and serves(json.loads(body), revision, ratio)

            wait("every node serving revision 1",
                 lambda: all(serving(a, 1, 50) for a in admins))
            print(f"{args.nodes} nodes, 3 etcd members")
            for k in range(args.rounds):
                time.sleep(3)
                leader, leader_id = None, None
                for i, (name, client, p) in enumerate(members):
                    s = member_status(client)
                    if s and s[0] == s[1]:
                        leader, leader_id = i, s[0]
                if leader is None:
                    sys.exit("no leader found")
                name, client, p = members[leader]
                before = lost_sessions(logs)
                p.send_signal(signal.SIGKILL)
                p.wait()
                killed = time.monotonic()
                revision, ratio = k + 2, 10 + 10 * k
                with open(config, "w") as f:
                    f.write(CONFIG.format(catalog=catalog, port=port, ratio=ratio))
                pusher = subprocess.Popen([args.gtd, "push", "--etcd", endpoints, "--config",
                                           config], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
                others = [m for j, m in enumerate(members) if j != leader]
                elected = pushed = None
                pending = set(admins)
                while pending or elected is None or pushed is None:
                    now = time.monotonic()
                    if pushed is None and pusher.poll() is not None:
                        pushed = now
                    if elected is None:
                        for _, c, _ in others:
                            s = member_status(c)
                            if s and s[1] not in ("0", leader_id):
                                elected = now
                                break
                    for a in list(pending):
                        if serving(a, revision, ratio):
                            pending.discard(a)
                    if now - killed > 60:
                        sys.exit(f"round {k + 1}: {len(pending)} nodes never served it")
                    time.sleep(0.01)
                done = time.monotonic()
                if pusher.wait() != 0:
                    sys.exit(f"gtd push failed: {pusher.stderr.read()}")
                time.sleep(1)
                lost = sum(1 for b, a in zip(before, lost_sessions(logs)) if a > b)
                print(f"  round {k + 1}: leader {name} killed; new leader after "
                      f"{(elected - killed) * 1000:6.0f} ms; {lost} of {args.nodes} nodes lost "
                      f"their session; every node serving the revision "
                      f"{(done - elected) * 1000:6.0f} ms after the new leader "
                      f"(the push returned {(pushed - elected) * 1000:.0f} ms after it)",
                      flush=True)
                for why in sorted(reasons(logs, before)):
                    print(f"    {why}")
                # The member back, as a restarted machine would be.
                members[leader] = (name, client, procs.start(
                    p.args, os.path.join(d, f"{name}.log")))
                wait("etcd healthy", lambda: b"true" in get(f"http://127.0.0.1:{client}/health")[1])
        finally:
            procs.stop()


if __name__ == "__main__":
    main()
