#!/usr/bin/env bash
# Instructions gtd executes per HTTP request, counted by valgrind's callgrind: unlike req/s on a
# shared VM, the count barely moves from run to run, so it shows what a change to the request
# path costs or saves (a few percent) where wrk's figures are lost in noise. Kernel work is not
# counted (it is the same two sends and two receives per request for any proxy).
#
#   benches/proxy/instructions.sh [--gtd PATH] [--seconds N] [--conns N] [--access-log VALUE]
#                                 [--reuse safe|always] [--close] [--cpus LIST]
#
# It starts three nginx backends ("return 200 ok") on 127.0.0.1:18181-18183 and gtd under
# callgrind with one HTTP listener on 127.0.0.1:18180 (round robin, keepalive = 128; gtd on CPU 1,
# the rest on CPU 0, as the harness pins them), warms up
# with wrk for 2 s, zeroes the counters, runs wrk -t1 for N seconds [10] with C connections [50],
# dumps the counters and prints instructions per request. Everything it starts it stops by
# PID; its files live in a temporary directory removed at the end (keep it with KEEP=1, e.g. to
# read the profile with callgrind_annotate).
# Needs valgrind (callgrind_control), nginx, wrk and curl. gtd runs about 50x slower under
# valgrind, so wrk's figures here mean nothing; only the ratio of the two counts does.
# --access-log sets gtd's [log] access (e.g. a file, "off"); the access log's writer thread is
# counted with the rest of the process, its write(2) calls are kernel work and are not.
# --reuse sets the group's reuse (unset: the default); --close has wrk send `Connection: close`,
# so that every request is its client connection's first. It also prints the endpoint
# connections gtd opened during the counted run (gtd_connections_total), per request.
# --cpus runs gtd on these CPUs (taskset's list, default 1): on more than one its runtime is
# tokio's work-stealing one with a worker per CPU, on one a single-threaded runtime, so "0,1"
# counts what the multi-threaded scheduler adds per request.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd" seconds=10 conns=50 access="" reuse="" close=()
while (($#)); do
  case "$1" in
    --gtd) gtd="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --conns) conns="$2"; shift 2 ;;
    --access-log) access="$2"; shift 2 ;;
    --reuse) reuse="$2"; shift 2 ;;
    --close) close=(-H "Connection: close"); shift ;;
    --cpus) cpus="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "instructions.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for tool in valgrind callgrind_control nginx wrk curl; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: needs $tool" >&2; exit 2; }
done
[[ -x "$gtd" ]] || { echo "instructions.sh: no gtd at $gtd (cargo build --profile dist --bin gtd)" >&2; exit 2; }

dir="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z "${KEEP:-}" ]]; then rm -rf "$dir"; else echo "kept $dir" >&2; fi
}
trap cleanup EXIT

for i in 1 2 3; do
  mkdir -p "$dir/b$i"
  cat >"$dir/b$i.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/b$i.pid;
error_log $dir/b$i.error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $dir/b$i/body; proxy_temp_path $dir/b$i/proxy;
  fastcgi_temp_path $dir/b$i/f; uwsgi_temp_path $dir/b$i/u; scgi_temp_path $dir/b$i/s;
  server {
    listen 127.0.0.1:1818$i backlog=4096;
    location / { default_type text/plain; return 200 "ok"; }
  }
}
EOF
  "${pin_load[@]}" nginx -p "$dir" -c "$dir/b$i.conf" -e "$dir/b$i.error.log" &
  pids+=($!)
done

cat >"$dir/gtd.toml" <<EOF
catalog = "$repo/regions/catalog.toml"
[admin]
bind = "127.0.0.1:18189"
$([[ -z "$access" ]] || printf '[log]\naccess = "%s"\n' "$access")
[[listener]]
name = "count"
protocol = "http"
port = 18180
regions = ["cn-beijing"]
drain_timeout = "0s"
  [[listener.group]]
  name = "backends"
  region = "cn-beijing"
  balance = "round_robin"
  keepalive = 128
$([[ -z "$reuse" ]] || printf '  reuse = "%s"\n' "$reuse")
$(for i in 1 2 3; do printf '    [[listener.group.endpoint]]\n    address = "127.0.0.1:1818%s"\n    max_fails = 0\n' "$i"; done)
EOF
# Pinned to one CPU as in the harness (gtd then runs its single-threaded runtime), the
# backends and wrk on the other.
pin_gtd=() pin_load=()
if command -v taskset >/dev/null && (($(nproc) > 1)); then
  pin_gtd=(taskset -c "${cpus:-1}") pin_load=(taskset -c 0)
fi
RUST_LOG=warn "${pin_gtd[@]}" valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" \
  "$gtd" run --config "$dir/gtd.toml" --region cn-beijing --bind 127.0.0.1 \
  >"$dir/gtd.log" 2>&1 &
vg=$!
pids+=("$vg")
for _ in $(seq 300); do
  curl -s -o /dev/null http://127.0.0.1:18180/ && break
  kill -0 "$vg" 2>/dev/null || { cat "$dir/gtd.log" >&2; exit 1; }
  sleep 0.2
done
curl -sf -o /dev/null http://127.0.0.1:18180/ || { echo "gtd does not answer" >&2; exit 1; }

opened() {
  curl -s http://127.0.0.1:18189/metrics | awk '/^gtd_connections_total\{/ {n += $NF} END {print n + 0}'
}
"${pin_load[@]}" wrk -t1 -c"$conns" -d2s "${close[@]}" http://127.0.0.1:18180/ >/dev/null
before=$(opened)
callgrind_control -z "$vg" >/dev/null 2>&1
requests=$("${pin_load[@]}" wrk -t1 -c"$conns" -d"${seconds}s" "${close[@]}" http://127.0.0.1:18180/ | awk '/requests in/ {print $1}')
callgrind_control -d "$vg" >/dev/null 2>&1
after=$(opened)
total=""
for _ in $(seq 100); do
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$dir"/callgrind.out.*.1 2>/dev/null || true)
  [[ -n "$total" ]] && break
  sleep 0.1
done
[[ -n "$total" && -n "$requests" ]] || { echo "instructions.sh: no count from callgrind" >&2; exit 1; }
echo "gtd: $requests requests, $total instructions, $((total / requests)) per request"
echo "gtd: $((after - before)) endpoint connections opened ($(awk -v o=$((after - before)) -v r="$requests" 'BEGIN {printf "%.3f", o / r}') per request)"
