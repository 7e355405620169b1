#!/usr/bin/env python3
"""Watches one failover run from outside gtd, for benches/failover/run.sh.

    observer.py --url URL --metrics URL --seconds S --out DIR [--rate 50] [--scrape-ms 100]
                [--linger 2]

Two things at once, for S seconds:
  * an open-loop prober: a GET of URL?probe=N every 1/rate s on a new connection, whatever
    happened to the earlier ones (wrk is closed-loop: when every one of its connections waits
    on a hung backend it sends nothing, and the moment traffic would have moved is not seen).
    DIR/probes.tsv: "N SENT DONE STATUS BACKEND" (DONE "-" and STATUS "pending" when no answer
    came by the end: S + linger seconds; STATUS "error:..." when the connection broke);
  * gtd's /metrics every scrape-ms: DIR/metrics.tsv, "EPOCH_SECONDS SERIES VALUE", a line
    each time a series of interest changes (first values included).
Times are epoch seconds (time.time()), as backend.py and run.sh write theirs.
"""

import argparse
import asyncio
import time
import urllib.parse

KEEP = (
    "gtd_connect_failures_total",
    "gtd_requests_total",
    "gtd_endpoint_healthy",
    "gtd_group_healthy",
    "gtd_group_share",
    "gtd_retries_total",
    "gtd_no_route_total",
    "gtd_failovers_total",
    "gtd_health_checks_total",
)


async def http_get(host, port, target, timeout):
    """One GET on a fresh connection: (status, x-backend), or raises."""

    async def go():
        r, w = await asyncio.open_connection(host, port)
        try:
            w.write(
                b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n"
                % (target.encode(), host.encode(), port)
            )
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = lines[0].split(" ")[1]
            backend = "-"
            length = None
            for line in lines[1:]:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if k == "x-backend":
                    backend = v.strip()
                elif k == "content-length":
                    length = int(v.strip())
            body = await (r.readexactly(length) if length is not None else r.read())
            return status, backend, body
        finally:
            w.close()

    return await asyncio.wait_for(go(), timeout)


async def prober(a, out):
    u = urllib.parse.urlsplit(a.url)
    host, port = u.hostname, u.port or 80
    path = u.path or "/"
    rows = {}
    tasks = []
    period = 1.0 / a.rate
    start = time.monotonic()
    end = start + a.seconds
    horizon = end + a.linger

    async def one(n):
        sent = time.time()
        rows[n] = [sent, None, "pending", "-"]
        try:
            status, backend, _ = await http_get(
                host, port, "%s?probe=%d" % (path, n), max(0.1, horizon - time.monotonic())
            )
            rows[n][1:] = [time.time(), status, backend]
        except asyncio.TimeoutError:
            pass
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
            rows[n][1:] = [time.time(), "error:" + type(e).__name__, "-"]

    n = 0
    while True:
        due = start + n * period
        if due >= end:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(n)))
        n += 1
    remaining = horizon - time.monotonic()
    if tasks:
        await asyncio.wait(tasks, timeout=max(0.0, remaining))
    for t in tasks:
        t.cancel()
    with open(out + "/probes.tsv", "w") as f:
        for k in sorted(rows):
            sent, done, status, backend = rows[k]
            f.write(
                "%d %.6f %s %s %s\n"
                % (k, sent, "-" if done is None else "%.6f" % done, status, backend)
            )


async def scraper(a, out):
    u = urllib.parse.urlsplit(a.metrics)
    host, port = u.hostname, u.port or 80
    last = {}
    deadline = time.monotonic() + a.seconds + a.linger
    with open(out + "/metrics.tsv", "w") as f:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                _, _, body = await http_get(host, port, u.path or "/metrics", 2.0)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
                body = b""
            now = time.time()
            for line in body.decode("utf-8", "replace").splitlines():
                if not line.startswith(KEEP):
                    continue
                series, _, value = line.rpartition(" ")
                if last.get(series) != value:
                    last[series] = value
                    f.write("%.6f %s %s\n" % (now, series, value))
            f.flush()
            await asyncio.sleep(max(0.0, a.scrape_ms / 1000.0 - (time.monotonic() - t0)))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--scrape-ms", type=float, default=100.0)
    ap.add_argument("--linger", type=float, default=2.0)
    a = ap.parse_args()
    await asyncio.gather(prober(a, a.out), scraper(a, a.out))


if __name__ == "__main__":
    asyncio.run(main())
