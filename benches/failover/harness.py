"""What the failover benchmarks (l4_blackhole.py, udp_restart.py, lying_endpoint.py) share: the
arguments, one gtd node started in its own process group and stopped by it, its admin API, and
the Markdown tables they print."""

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def arguments(only, describe=None):
    """The parser of `--gtd PATH` (default: the shipped build) and `--only A,B`; `describe`
    adds a script's own arguments to it. Exits when there is no gtd at the path."""
    ap = argparse.ArgumentParser()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    # The shipped build, as the other benchmarks use (cargo build --profile dist --bin gtd).
    ap.add_argument("--gtd", default=os.path.join(target, "dist", "gtd"))
    ap.add_argument("--only", default=only)
    if describe:
        describe(ap)
    args = ap.parse_args()
    if not os.access(args.gtd, os.X_OK):
        sys.exit(f"no gtd at {args.gtd}: cargo build --profile dist --bin gtd, or --gtd PATH")
    return args


class Node:
    """`gtd run --config` of `config` (written to TMP/VARIANT.toml, its log beside it) on
    127.0.0.1, in a process group of its own: started and waited for (`/healthz`) on entry,
    stopped by that group on exit (SIGTERM, then SIGKILL after 10 s), also on error."""

    def __init__(self, gtd, config, tmp, variant, admin_port):
        self.gtd, self.config, self.admin_port = gtd, config, admin_port
        self.path = os.path.join(tmp, f"{variant}.toml")
        self.log_path = os.path.join(tmp, f"{variant}.log")

    def __enter__(self):
        with open(self.path, "w") as f:
            f.write(self.config)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [self.gtd, "run", "--config", self.path, "--region", "cn-beijing",
             "--bind", "127.0.0.1"],
            stdout=self.log, stderr=self.log, start_new_session=True,
            env=dict(os.environ, RUST_LOG="info", NO_COLOR="1"),
        )
        for _ in range(100):
            try:
                self.admin("/healthz")
                break
            except OSError:
                time.sleep(0.1)
        return self

    def admin(self, path):
        return admin(self.admin_port, path)

    def __exit__(self, *_):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        return False


def admin(port, path):
    """The answer of the admin API on 127.0.0.1:PORT to `GET path`, as text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def table(keys, rows):
    """A Markdown table of `rows` under `keys` (None printed as —), then a blank line."""
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join("—" if v is None else str(v) for v in r) + " |")
    print()
