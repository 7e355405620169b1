#!/usr/bin/env bash
# What each connection and each request costs gtd, next to nginx and HAProxy, in one run: the
# counts that do not move with the machine's load (resident bytes, syscalls, instructions),
# measured the same way for the three proxies.
#
#   benches/proxy/cost.sh [--targets "gtd nginx haproxy"] [--gtd PATH] [--conns N]
#                         [--seconds S] [--check BUDGET] [--json FILE]
#
# Rows (each proxy alone on CPU 1 when the machine has two, backends and clients on CPU 0):
#   idle_http1_bytes  resident growth per idle HTTP/1.1 keep-alive client connection (N open,
#                     one request each, then idle: idle.py --mode http1)
#   idle_h2_bytes     the same for an HTTP/2 (h2c, prior knowledge) connection, one request
#   idle_tcp_bytes    the same for a TCP relay with both sides connected (one exchange)
#   idle_http1_parked_bytes  idle HTTP/1.1 connections again, the clients arriving 100 every
#                     2.5 s (idle.py --pause 2.5 --batch 100): what a connection holds once
#                     it rests, without the peak of a burst that malloc keeps afterwards
#   syscalls_per_req  the proxy's syscalls per proxied keep-alive request (strace -f -c over
#                     every thread while wrk -t1 -c50 runs S seconds); io_per_req counts only
#                     reads and writes (recvfrom/sendto/read/write/readv/writev/recvmsg/sendmsg)
#   instr_per_req     user-space instructions per request (valgrind's callgrind, wrk -c50)
# The backends are three nginx servers answering "ok" (18181-18183); the proxies listen on
# 18180 (HTTP/1.1), 18184 (h2c) and 18185 (TCP, relayed to 18181). nginx and HAProxy set
# X-Forwarded-For/-Proto/-Host as gtd does (equal work), keep 64 idle endpoint connections
# and round-robin over the three backends.
#
# --check BUDGET: measure gtd only and compare each figure with the budget file (lines
# `name = value`, benches/proxy/budget.toml); exit 1 when one exceeds its budget by more than
# 3 %. .ci/run runs this on a release build. A change that must cost more raises the budget in
# the same commit and says why.
#
# Needs nginx (and its stream module), haproxy, wrk, curl, strace, valgrind, python3; taskset
# for pinning. Everything listens on 127.0.0.1; every process it starts it stops by PID; its
# files live in a temporary directory removed at the end (KEEP=1 keeps it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
targets="gtd nginx haproxy" gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd" conns=2000
seconds=4 check="" json=""
while (($#)); do
  case "$1" in
    --targets) targets="$2"; shift 2 ;;
    --gtd) gtd="$2"; shift 2 ;;
    --conns) conns="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --check) check="$2"; targets="gtd"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "cost.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for tool in nginx wrk curl strace valgrind callgrind_control python3; do
  command -v "$tool" >/dev/null || [[ -x "/usr/sbin/$tool" ]] || { echo "cost.sh: needs $tool" >&2; exit 2; }
done
[[ " $targets " != *" haproxy "* ]] || command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] \
  || { echo "cost.sh: needs haproxy" >&2; exit 2; }
if [[ " $targets " == *" gtd "* && ! -x "$gtd" ]]; then
  echo "cost.sh: no gtd at $gtd (cargo build --profile dist --bin gtd, or --gtd PATH)" >&2
  exit 2
fi
PATH="$PATH:/usr/sbin"

dir="$(mktemp -d)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z "${KEEP:-}" ]]; then rm -rf "$dir"; else echo "kept $dir" >&2; fi
}
trap cleanup EXIT
log() { printf '[%(%H:%M:%S)T] cost.sh: %s\n' -1 "$*" >&2; }

pin_proxy=() pin_load=()
if command -v taskset >/dev/null && (($(nproc) > 1)); then
  pin_proxy=(taskset -c 1) pin_load=(taskset -c 0)
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# --- the backends ---
for i in 1 2 3; do
  mkdir -p "$dir/b$i"
  cat >"$dir/b$i.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/b$i.pid;
error_log $dir/b$i.error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  client_header_timeout 600s;
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
wait_port() {
  local port=$1 pid=$2
  for _ in $(seq 300); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
for i in 1 2 3; do wait_port "1818$i" "${pids[$((i - 1))]}" || { echo "backend $i did not start" >&2; exit 1; }; done

# --- the proxies' configs ---
write_gtd() {
  local h
  {
    echo "catalog = \"$repo/regions/catalog.toml\""
    echo "[admin]"
    echo "bind = \"127.0.0.1:0\""
    for h in "http 18180" "h2 18184"; do
      set -- $h
      cat <<EOF
[[listener]]
name = "$1"
protocol = "http"
port = $2
regions = ["cn-beijing"]
drain_timeout = "0s"
idle_timeout = "600s"
  [[listener.group]]
  name = "backends"
  region = "cn-beijing"
  balance = "round_robin"
  keepalive = 64
EOF
      for i in 1 2 3; do printf '    [[listener.group.endpoint]]\n    address = "127.0.0.1:1818%s"\n    max_fails = 0\n' "$i"; done
    done
    cat <<EOF
[[listener]]
name = "tcp"
protocol = "tcp"
port = 18185
regions = ["cn-beijing"]
drain_timeout = "0s"
idle_timeout = "600s"
  [[listener.group]]
  name = "backend"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "127.0.0.1:18181"
    max_fails = 0
EOF
  } >"$dir/gtd.toml"
}
write_nginx() {
  local master=$1
  local servers="" i
  for i in 1 2 3; do servers+="    server 127.0.0.1:1818$i;"$'\n'; done
  local location="
    location / {
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$host;
    }"
  cat >"$dir/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
master_process $master;
daemon off;
pid $dir/nginx.pid;
error_log $dir/nginx.error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 600s;
  http2_idle_timeout 600s;
  client_body_temp_path $dir/n/body; proxy_temp_path $dir/n/proxy;
  fastcgi_temp_path $dir/n/f; uwsgi_temp_path $dir/n/u; scgi_temp_path $dir/n/s;
  upstream backends {
$servers    keepalive 64;
    keepalive_requests 1000000;
  }
  server { listen 127.0.0.1:18180 backlog=4096; $location }
  server { listen 127.0.0.1:18184 http2; $location }
}
stream {
  server { listen 127.0.0.1:18185; proxy_pass 127.0.0.1:18181; proxy_timeout 600s; }
}
EOF
  mkdir -p "$dir/n"
}
write_haproxy() {
  cat >"$dir/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 9000
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 600s
  maxconn 9000
frontend fe
  bind 127.0.0.1:18180
  default_backend be
frontend fe2
  bind 127.0.0.1:18184 proto h2
  default_backend be
backend be
  balance roundrobin
  http-reuse always
  option forwardfor
  http-request set-header X-Forwarded-Proto http
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  server b1 127.0.0.1:18181
  server b2 127.0.0.1:18182
  server b3 127.0.0.1:18183
listen tcp
  mode tcp
  bind 127.0.0.1:18185
  server b1 127.0.0.1:18181
EOF
}

# Starts one proxy (under $1, a wrapper such as valgrind, or nothing) and sets $proxy.
start() {
  local target=$1
  shift
  case "$target" in
    gtd) write_gtd
      RUST_LOG=warn "${pin_proxy[@]}" "$@" "$gtd" run --config "$dir/gtd.toml" --region cn-beijing \
        --bind 127.0.0.1 >"$dir/gtd.log" 2>&1 & ;;
    nginx) write_nginx "$( (($#)) && echo off || echo on)"
      "${pin_proxy[@]}" "$@" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx.error.log" \
        >"$dir/nginx.log" 2>&1 & ;;
    haproxy) write_haproxy
      "${pin_proxy[@]}" "$@" haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 & ;;
  esac
  proxy=$!
  pids+=("$proxy")
  wait_port 18180 "$proxy" || { cat "$dir/$target.log" >&2; echo "$target did not start" >&2; exit 1; }
}
stop() {
  kill "$proxy" 2>/dev/null || true
  wait "$proxy" 2>/dev/null || true
  sleep 0.5
}
requests_of() { awk '/requests in/ {print $1}'; }
# The thread ids of a process and all its descendants, one per line.
tasks() {
  local p=$1 t
  for t in /proc/"$p"/task/*; do
    echo "${t##*/}"
    for c in $(cat "$t/children" 2>/dev/null); do tasks "$c"; done
  done
}

declare -A fig
for t in $targets; do
  # A fresh process for each kind: memory a proxy freed after one kind (to its pools or to
  # malloc's free lists) would otherwise be counted as free for the next.
  for kind in http1 h2 tcp http1_parked; do
    log "$t: $conns idle $kind connections"
    start "$t"
    mode=${kind%_parked} port=18180 paced=()
    [[ $mode == h2 ]] && port=18184
    [[ $mode == tcp ]] && port=18185
    [[ $kind == *_parked ]] && paced=(--pause 2.5 --batch 100)
    out=$("${pin_load[@]}" python3 "$here/idle.py" --mode "$mode" --port "$port" --pid "$proxy" \
      --conns "$conns" "${paced[@]}")
    fig[$t,idle_${kind}_bytes]=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_per_conn"])' <<<"$out")
    stop
  done
  log "$t: syscalls per request"
  start "$t"
  "${pin_load[@]}" wrk -t1 -c50 -d1s http://127.0.0.1:18180/ >/dev/null
  # Every thread of the proxy and of its children (nginx's worker under its master).
  strace -f -c -o "$dir/strace.$t" $(tasks "$proxy" | sed 's/^/-p /') &
  tracer=$!
  sleep 1
  requests=$("${pin_load[@]}" wrk -t1 -c50 -d"${seconds}s" http://127.0.0.1:18180/ | requests_of)
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null || true
  # strace -c's table: calls in the 4th column (5th when the errors column is filled).
  read -r all io < <(awk '
    /^-/ || /^%/ || /total/ || NF < 5 { next }
    { calls = $4; name = $NF; all += calls
      if (name ~ /^(recvfrom|sendto|read|write|readv|writev|recvmsg|sendmsg|recvmmsg|sendmmsg)$/) io += calls }
    END { print all + 0, io + 0 }' "$dir/strace.$t")
  fig[$t,syscalls_per_req]=$(awk -v a="$all" -v r="$requests" 'BEGIN { printf "%.2f", a / r }')
  fig[$t,io_per_req]=$(awk -v a="$io" -v r="$requests" 'BEGIN { printf "%.2f", a / r }')
  stop

  log "$t: instructions per request (callgrind)"
  start "$t" valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.$t.%p"
  "${pin_load[@]}" wrk -t1 -c50 -d2s http://127.0.0.1:18180/ >/dev/null
  callgrind_control -z "$proxy" >/dev/null 2>&1
  requests=$("${pin_load[@]}" wrk -t1 -c50 -d"$((seconds * 2))s" http://127.0.0.1:18180/ | requests_of)
  callgrind_control -d "$proxy" >/dev/null 2>&1
  total=""
  for _ in $(seq 100); do
    total=$(awk '/^(summary|totals):/ {print $2; exit}' "$dir"/callgrind."$t".*.1 2>/dev/null || true)
    [[ -n "$total" ]] && break
    sleep 0.1
  done
  fig[$t,instr_per_req]=$((total / requests))
  stop
done

rows="idle_http1_bytes idle_http1_parked_bytes idle_h2_bytes idle_tcp_bytes syscalls_per_req io_per_req instr_per_req"
printf '| per … |'; for t in $targets; do printf ' %s |' "$t"; done; echo
printf '|---|'; for t in $targets; do printf -- '---:|'; done; echo
for r in $rows; do
  printf '| %s |' "$r"; for t in $targets; do printf ' %s |' "${fig[$t,$r]}"; done; echo
done
if [[ -n "$json" ]]; then
  {
    echo "{"
    first=1
    for t in $targets; do
      for r in $rows; do
        ((first)) || echo ","
        first=0
        printf '  "%s.%s": %s' "$t" "$r" "${fig[$t,$r]}"
      done
    done
    echo; echo "}"
  } >"$json"
fi

if [[ -n "$check" ]]; then
  fail=0
  while IFS='=' read -r name value; do
    name="${name// /}" value="${value// /}"
    [[ -z "$name" || "$name" == \#* ]] && continue
    got="${fig[gtd,$name]:-}"
    [[ -n "$got" ]] || { echo "cost.sh: budget names $name, which was not measured" >&2; fail=1; continue; }
    verdict=$(awk -v g="$got" -v b="$value" 'BEGIN { print (g > b * 1.03) ? "over" : "ok" }')
    printf 'cost.sh: %-18s %10s (budget %s): %s\n' "$name" "$got" "$value" "$verdict"
    [[ $verdict == ok ]] || fail=1
  done <"$check"
  exit "$fail"
fi
