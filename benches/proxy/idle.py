#!/usr/bin/env python3
"""Resident memory per idle client connection of a running proxy.

    idle.py --mode http1|h2|tcp --port PORT --pid PID [--conns N] [--settle S]
            [--pause S --batch B]

Reads the resident memory (VmRSS) of PID and every process below it, opens N connections to
127.0.0.1:PORT one after another, has each carry one exchange to its end, then leaves them all
open and idle (with --pause, waiting S seconds after every B connections: clients that arrive
over time rather than in one burst), waits S seconds for the proxy to settle, reads the resident memory again and
prints one line of JSON: the mode, the connection count, both readings and the growth per
connection in bytes. Then it closes every connection and exits.

  http1  one HTTP/1.1 keep-alive request (GET /), its whole response read; the connection stays
         open for the next request, which never comes.
  h2     HTTP/2 with prior knowledge (h2c): the preface, SETTINGS (and the ACK of the server's),
         one GET on stream 1, its whole response read; the connection stays open.
  tcp    a TCP relay with both sides connected: one HTTP/1.1 request written through the relay
         to the HTTP backend behind it and its response read, so the proxy has opened its
         endpoint connection and carried bytes both ways; both sockets then stay open.

Only loopback is ever connected to. The count is bounded by --conns; the open files limit is
raised to fit it. Kernel socket buffers are not the proxy's resident memory and are not counted.
"""

import argparse
import json
import os
import resource
import socket
import struct
import sys
import time


def rss_kib(root: int) -> int:
    """VmRSS of `root` and all its descendants, in KiB."""
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def recv_http1(s: socket.socket) -> None:
    """Reads one HTTP/1.1 response with a Content-Length (or chunked, to its last chunk)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    length = None
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        while not body.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed inside a chunked body")
            body += chunk
        return
    while length is not None and len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside the body")
        body += chunk


REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: idle.py\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def h2_exchange(s: socket.socket) -> None:
    # :method GET (2), :scheme http (6), :path / (4), :authority "bench" (literal, name 1).
    block = bytes([0x82, 0x86, 0x84, 0x41, 5]) + b"bench"
    s.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + frame(4, 0, 0)  # SETTINGS
        + frame(1, 0x5, 1, block)  # HEADERS, END_STREAM | END_HEADERS
    )
    buf = b""
    acked = False
    while True:
        while len(buf) < 9:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the response")
            buf += chunk
        length = int.from_bytes(buf[:3], "big")
        while len(buf) < 9 + length:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed inside a frame")
            buf += chunk
        kind, flags = buf[3], buf[4]
        stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        buf = buf[9 + length :]
        if kind == 4 and not flags & 1 and not acked:
            s.sendall(frame(4, 1, 0))  # SETTINGS ACK
            acked = True
        if kind == 7:
            raise ConnectionError("GOAWAY")
        if stream == 1 and kind in (0, 1) and flags & 1:
            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["http1", "h2", "tcp"], required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the proxy's process (its children are counted too)")
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds between the last exchange and the reading")
    ap.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds to wait after every --batch connections (clients that arrive over time, not in one burst)",
    )
    ap.add_argument("--batch", type=int, default=100)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.conns + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    # One exchange first, so that what the proxy sets up once (pools, lazy statics) is not
    # counted as the connections' memory.
    warm = socket.create_connection(("127.0.0.1", a.port), timeout=10)
    exchange(a.mode, warm)
    warm.close()
    time.sleep(a.settle)
    before = rss_kib(a.pid)
    socks = []
    try:
        for i in range(a.conns):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            try:
                exchange(a.mode, s)
            except (OSError, ConnectionError) as e:
                print(f"idle.py: connection {i + 1} of {a.conns}: {e}", file=sys.stderr)
                s.close()
                return 1
            socks.append(s)
            if a.pause > 0 and (i + 1) % a.batch == 0:
                time.sleep(a.pause)
        time.sleep(a.settle)
        after = rss_kib(a.pid)
        # Still open: a proxy that closed them (an idle timeout shorter than the run) would
        # make the figure meaningless.
        for s in socks[:10]:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    print("idle.py: the proxy closed idle connections before the reading", file=sys.stderr)
                    return 1
            except BlockingIOError:
                pass
    finally:
        for s in socks:
            s.close()
    print(
        json.dumps(
            {
                "mode": a.mode,
                "conns": a.conns,
                "paced": f"{a.batch} every {a.pause} s" if a.pause > 0 else "burst",
                "rss_before_kib": before,
                "rss_after_kib": after,
                "bytes_per_conn": round((after - before) * 1024 / a.conns),
            }
        )
    )
    return 0


def exchange(mode: str, s: socket.socket) -> None:
    if mode == "h2":
        h2_exchange(s)
    else:
        s.sendall(REQUEST)
        recv_http1(s)


if __name__ == "__main__":
    sys.exit(main())
