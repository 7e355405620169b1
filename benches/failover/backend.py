#!/usr/bin/env python3
"""A benchmark HTTP/1.1 backend whose failure mode is switched by signals.

    backend.py --name NAME --port PORT --log FILE [--slow-ms 200]

Modes (the process starts in "ok"):
  ok         answers 200 "ok NAME" (keep-alive; closes after a request that asks it to)
  blackhole  SIGUSR1: keeps accepting connections and reading requests, never answers one
             (the socket stays open: a hung process, not a dead one)
  slow502    SIGUSR2: answers 502 after --slow-ms milliseconds
SIGHUP goes back to "ok" (requests held by the blackhole stay unanswered, as a hung
process's would). SIGTERM/SIGINT end it; SIGKILL is what run.sh uses for "killed".

Every request head received is logged at once (one write(2) each, so a SIGKILL loses
nothing already received), one line: "EPOCH_SECONDS PATH OUTCOME" with OUTCOME 200, 502 or
held. Mode changes are logged as "EPOCH_SECONDS #mode MODE". Every response carries
"X-Backend: NAME". Listens on 127.0.0.1 only.
"""

import argparse
import asyncio
import os
import signal
import time

MAX_HEAD = 65536


class State:
    mode = "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--slow-ms", type=int, default=200)
    a = ap.parse_args()

    fd = os.open(a.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    name = a.name.encode()
    body_ok = b"ok " + name + b"\n"
    body_502 = b"bad gateway from " + name + b"\n"

    def response(code, reason, body, close):
        return b"".join(
            [
                b"HTTP/1.1 %d %s\r\n" % (code, reason),
                b"Content-Type: text/plain\r\nX-Backend: " + name + b"\r\n",
                b"Content-Length: %d\r\n" % len(body),
                b"Connection: close\r\n" if close else b"",
                b"\r\n",
                body,
            ]
        )

    r200 = {c: response(200, b"OK", body_ok, c) for c in (False, True)}
    r502 = {c: response(502, b"Bad Gateway", body_502, c) for c in (False, True)}
    slow = a.slow_ms / 1000.0

    def log(path, outcome):
        os.write(fd, b"%.6f %s %s\n" % (time.time(), path, outcome))

    class Http(asyncio.Protocol):
        def connection_made(self, transport):
            self.t = transport
            self.buf = b""
            self.skip = 0  # request body bytes still to discard

        def data_received(self, data):
            if self.skip:
                n = min(self.skip, len(data))
                self.skip -= n
                data = data[n:]
            self.buf += data
            while not self.t.is_closing():
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > MAX_HEAD:
                        self.t.close()
                    return
                head, self.buf = self.buf[:end], self.buf[end + 4 :]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                path = parts[1] if len(parts) > 2 else b"-"
                close = parts[-1] == b"HTTP/1.0"
                length = 0
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    k = k.strip().lower()
                    if k == b"connection":
                        close = b"close" in v.lower()
                    elif k == b"content-length":
                        length = int(v.strip() or 0)
                n = min(length, len(self.buf))
                self.buf = self.buf[n:]
                self.skip = length - n
                self.request(path, close)

        def request(self, path, close):
            mode = State.mode
            if mode == "ok":
                log(path, b"200")
                self.t.write(r200[close])
                if close:
                    self.t.close()
            elif mode == "slow502":
                log(path, b"502")
                asyncio.get_running_loop().call_later(slow, self.late_502, close)
            else:
                log(path, b"held")

        def late_502(self, close):
            if not self.t.is_closing():
                self.t.write(r502[close])
                if close:
                    self.t.close()

    loop = asyncio.new_event_loop()

    def switch(mode):
        State.mode = mode
        os.write(fd, b"%.6f #mode %s\n" % (time.time(), mode.encode()))

    loop.add_signal_handler(signal.SIGUSR1, switch, "blackhole")
    loop.add_signal_handler(signal.SIGUSR2, switch, "slow502")
    loop.add_signal_handler(signal.SIGHUP, switch, "ok")
    stop = loop.create_future()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, lambda: stop.done() or stop.set_result(None))

    server = loop.run_until_complete(
        loop.create_server(Http, "127.0.0.1", a.port, reuse_address=True, backlog=1024)
    )
    os.write(fd, b"%.6f #mode ok\n" % time.time())
    try:
        loop.run_until_complete(stop)
    finally:
        server.close()
        os.close(fd)


if __name__ == "__main__":
    main()
