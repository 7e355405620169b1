#!/usr/bin/env bash
# Memory per slow reader: how much resident memory each client that reads a large response
# slowly costs gtd, nginx and HAProxy, side by side, on loopback (a benchmark, not a test).
#
#   benches/proxy/slow_readers.sh [options]
#
# Options:
#   --readers N       slow clients at once                                         [100]
#   --size-mb M       the response they ask for (a file the backend serves)        [16]
#   --read-kb K       the most each reads every 100 ms (its socket buffer too)    [64]
#   --hold S          seconds the readers read before the proxy's memory is taken  [10]
#   --targets "LIST"  in this order, any of: nginx haproxy gtd        [nginx haproxy gtd]
#   --results DIR     where summary.md and run/ go                  [target/bench/slow]
#   --gtd PATH        this gtd binary (else target/release/gtd, built if missing)
#   -h, --help
#
# One nginx serves the file (127.0.0.1:18481). The proxies run with the configurations
# run.sh uses for its HTTP benchmark (nginx: upstream keepalive, proxy_http_version 1.1, its
# default proxy_buffering; HAProxy: mode http, http-reuse always; gtd: gtd-bench-config.sh),
# on 18490 (nginx), 18491 (HAProxy), 18480 (gtd). For each target in turn: one whole download
# first (so that its allocator has seen a response), its resident memory (VmRSS summed over
# its process group), then N clients that ask for the file and read it slowly; after --hold
# seconds the resident memory again (the highest of 5 samples over a second). The growth
# divided by N is the cost of one slow reader. Kernel socket buffers are not resident memory
# of the process and are not counted, for any of the three.
#
# Every process this script starts gets its own process group (setsid) and is stopped by that
# group id at the end, on error and on Ctrl-C. Nothing is stopped by name.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
log() { printf '[%(%H:%M:%S)T] slow_readers.sh: %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

readers=100 size_mb=16 read_kb=64 hold=10 targets="nginx haproxy gtd"
results="$repo/target/bench/slow" gtd=""
while (($#)); do
  case "$1" in
    --readers) readers="${2:?}"; shift 2 ;;
    --size-mb) size_mb="${2:?}"; shift 2 ;;
    --read-kb) read_kb="${2:?}"; shift 2 ;;
    --hold) hold="${2:?}"; shift 2 ;;
    --targets) targets="${2:?}"; shift 2 ;;
    --results) results="${2:?}"; shift 2 ;;
    --gtd) gtd="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
for n in "$readers" "$size_mb" "$read_kb" "$hold"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer"
done
for t in $targets; do [[ "$t" =~ ^(nginx|haproxy|gtd)$ ]] || die "unknown target '$t'"; done
for c in nginx haproxy curl python3 setsid ss timeout; do
  command -v "$c" >/dev/null || die "missing '$c'"
done
[[ "$results" == /* ]] || results="$PWD/$results"
if [[ -z "$gtd" ]]; then
  gtd="${CARGO_TARGET_DIR:-$repo/target}/release/gtd"
  [[ -x "$gtd" ]] || (cd "$repo" && cargo build --release --bin gtd)
fi
[[ -x "$gtd" ]] || die "no gtd binary at $gtd"

run_dir="$(mktemp -d -t gtd-slow.XXXXXX)"
chmod 755 "$run_dir" # nginx's workers serve the file from it
declare -A PGID=()
start_bg() { # NAME CMD...: in its own session (pgid = pid), output to run/NAME.log
  local name="$1"; shift
  setsid "$@" >"$run_dir/$name.log" 2>&1 </dev/null &
  PGID[$name]=$!
}
cleanup() {
  local rc=$? name pid i
  trap - EXIT INT TERM HUP
  for name in "${!PGID[@]}"; do
    pid="${PGID[$name]}"
    kill -TERM -- "-$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  mkdir -p "$results/run" && cp -r "$run_dir"/. "$results/run/" 2>/dev/null || true
  rm -rf "$run_dir"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "signal received, stopping"; exit 130' INT TERM HUP

wait_port() { # PORT: bounded, 20 s
  local i
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}

BACKEND=18481 GTD=18480 NGINX=18490 HAPROXY=18491
declare -A PORT=([gtd]=$GTD [nginx]=$NGINX [haproxy]=$HAPROXY)
mkdir -p "$run_dir/www" "$run_dir/tmp"
head -c "$((size_mb << 20))" /dev/zero >"$run_dir/www/big"
chmod 755 "$run_dir/www" && chmod 644 "$run_dir/www/big"

temp_paths() {
  local d="$run_dir/tmp/$1"
  mkdir -p "$d"
  echo "client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fastcgi;"
  echo "uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;"
}

cat >"$run_dir/backend.conf" <<EOF
worker_processes 1;
daemon off;
pid $run_dir/backend.pid;
error_log $run_dir/backend.error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  send_timeout 300s;
  $(temp_paths backend)
  server {
    listen 127.0.0.1:$BACKEND backlog=4096;
    root $run_dir/www;
  }
}
EOF
cat >"$run_dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $run_dir/nginx.pid;
error_log $run_dir/nginx.error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  $(temp_paths nginx)
  upstream backends {
    server 127.0.0.1:$BACKEND;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$NGINX backlog=4096;
    location / {
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$host;
    }
  }
}
EOF
cat >"$run_dir/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 4096
  pidfile $run_dir/haproxy.pid
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  maxconn 4096
frontend fe
  bind 127.0.0.1:$HAPROXY
  default_backend be
backend be
  http-reuse always
  option forwardfor
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  server b1 127.0.0.1:$BACKEND
EOF

start_bg backend nginx -p "$run_dir" -c "$run_dir/backend.conf" -e "$run_dir/backend.error.log"
wait_port "$BACKEND" || die "the backend never listened"
for t in $targets; do
  case "$t" in
    nginx) start_bg nginx nginx -p "$run_dir" -c "$run_dir/nginx.conf" -e "$run_dir/nginx.error.log" ;;
    haproxy) start_bg haproxy haproxy -db -f "$run_dir/haproxy.cfg" ;;
    gtd)
      start_bg gtd env GTD_BIN="$gtd" RUST_LOG=warn "$here/gtd-bench-config.sh" --proto http \
        --port "$GTD" --backends "127.0.0.1:$BACKEND" --run-dir "$run_dir"
      ;;
  esac
  wait_port "${PORT[$t]}" || { tail -20 "$run_dir/$t.log" >&2; die "$t never listened"; }
done

# N slow readers against PORT; prints "BASE PEAK" (KiB, VmRSS summed over process group PGID).
cat >"$run_dir/readers.py" <<'EOF'
import os, socket, sys, time

port, pgid, readers, read_kb, hold = (int(a) for a in sys.argv[1:6])

def rss_kib():
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            with open(f"/proc/{pid}/status") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        except (OSError, StopIteration, ValueError):
            pass
    return total

base = rss_kib()
conns = []
for _ in range(readers):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, read_kb * 1024)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /big HTTP/1.1\r\nHost: bench\r\n\r\n")
    conns.append(s)
for s in conns:
    if not s.recv(1024).startswith(b"HTTP/1.1 200"):
        sys.exit(f"a reader got no 200 from 127.0.0.1:{port}")
for s in conns:
    s.setblocking(False)
end = time.monotonic() + hold
while time.monotonic() < end:
    for s in conns:
        try:
            s.recv(read_kb * 1024)
        except BlockingIOError:
            pass
    time.sleep(0.1)
peak = 0
for _ in range(5):
    peak = max(peak, rss_kib())
    time.sleep(0.2)
for s in conns:
    s.close()
print(base, peak)
EOF

summary="$results/summary.md"
mkdir -p "$results"
{
  echo "# Resident memory per slow reader ($(date -u +%FT%TZ))"
  echo
  echo "$readers clients each asking for a $size_mb MiB response and reading at most $read_kb KiB"
  echo "every 100 ms ($read_kb KiB socket buffers); resident memory of the proxy after $hold s."
  echo
  echo "| proxy | before (KiB) | with the readers (KiB) | per reader (KiB) |"
  echo "|---|---:|---:|---:|"
} >"$summary"
for t in $targets; do
  # One whole download first: the proxy's allocator has seen a response.
  timeout 120 curl -fs -o /dev/null "http://127.0.0.1:${PORT[$t]}/big" || die "$t: download failed"
  sleep 1
  out="$(timeout $((hold + 90)) python3 "$run_dir/readers.py" \
    "${PORT[$t]}" "${PGID[$t]}" "$readers" "$read_kb" "$hold")" || die "$t: readers failed"
  read -r base peak <<<"$out"
  per=$(( (peak - base) / readers ))
  log "$t: $base KiB before, $peak KiB with $readers slow readers: $per KiB each"
  echo "| $t | $base | $peak | $per |" >>"$summary"
  sleep 2
done
echo >>"$summary"
echo "Command: benches/proxy/slow_readers.sh --readers $readers --size-mb $size_mb --read-kb $read_kb --hold $hold" >>"$summary"
cat "$summary"
