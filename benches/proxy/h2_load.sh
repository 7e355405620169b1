#!/usr/bin/env bash
# HTTP/2 (h2c) throughput of gtd binaries side by side: requests per second and the node's CPU
# time per 1,000 requests, for each binary in turn, repeated, so that two builds can be
# compared under the same phases of a noisy machine (a benchmark, not a test).
#
#   benches/proxy/h2_load.sh [--reps N] [--requests N] GTD [GTD...]
#
# One nginx answers "ok" on 127.0.0.1:18381 (CPU 0); each gtd serves h2c on 127.0.0.1:18384
# (CPU 1) in front of it; h2load (nghttp2-client) sends --requests requests over 10
# connections, 10 streams each (CPU 0), after a warm-up of a tenth as many. Prints one line
# per binary and repetition: the binary, req/s, and the node's user+system clock ticks per
# 1,000 requests (from /proc/PID/stat). Every process it starts it stops by PID; its files
# live in a temporary directory removed at the end.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
reps=3 requests=200000
while (($#)); do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
(($#)) || { echo "h2_load.sh: name at least one gtd binary" >&2; exit 2; }
for tool in nginx h2load taskset; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { echo "h2_load.sh: needs $tool" >&2; exit 1; }
done
PATH="$PATH:/usr/sbin"
dir="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/b.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/b.pid;
error_log $dir/b.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/t1; proxy_temp_path $dir/t2;
  fastcgi_temp_path $dir/t3; uwsgi_temp_path $dir/t4; scgi_temp_path $dir/t5;
  server { listen 127.0.0.1:18381; location / { default_type text/plain; return 200 "ok"; } }
}
EOF
taskset -c 0 nginx -p "$dir" -c "$dir/b.conf" -e "$dir/b.err" &
pids+=($!)
cat >"$dir/gtd.toml" <<EOF
catalog = "$repo/regions/catalog.toml"
[admin]
bind = "127.0.0.1:0"
[[listener]]
name = "h2"
protocol = "http"
port = 18384
regions = ["cn-beijing"]
drain_timeout = "0s"
  [[listener.group]]
  name = "backends"
  region = "cn-beijing"
  keepalive = 64
    [[listener.group.endpoint]]
    address = "127.0.0.1:18381"
EOF

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for rep in $(seq "$reps"); do
  for gtd in "$@"; do
    RUST_LOG=warn taskset -c 1 "$gtd" run --config "$dir/gtd.toml" --region cn-beijing \
      --bind 127.0.0.1 2>"$dir/gtd.log" &
    node=$!
    for _ in $(seq 100); do
      h2load -n 10 -c 1 http://127.0.0.1:18384/ >/dev/null 2>&1 && break
      sleep 0.1
    done
    taskset -c 0 h2load -n $((requests / 10)) -c 10 -m 10 http://127.0.0.1:18384/ >/dev/null 2>&1
    before=$(ticks "$node")
    out=$(taskset -c 0 h2load -n "$requests" -c 10 -m 10 http://127.0.0.1:18384/ 2>&1)
    after=$(ticks "$node")
    kill "$node"
    wait "$node" 2>/dev/null || true
    rps=$(grep -oE '[0-9.]+ req/s' <<<"$out" | head -1)
    ok=$(grep -oE '[0-9]+ succeeded' <<<"$out" | head -1)
    per=$(awk -v t=$((after - before)) -v n="$requests" 'BEGIN { printf "%.3f", t * 1000 / n }')
    echo "rep $rep  $gtd  $rps  ($ok)  ticks per 1000 requests: $per"
  done
done
