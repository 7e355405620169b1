#!/usr/bin/env bash
# gtd's proxy benchmark, self-contained: measures gtd next to nginx and HAProxy (and the
# backend reached directly) on loopback, in one session, runs interleaved, the proxy pinned to
# CPU 1 and the load generator and backends to CPU 0. Everything listens on 127.0.0.1 only.
#
#   benches/proxy/run.sh [MODE...] [options]
#
# MODE: tcp (iperf3, one stream), udp (iperf3 -u -l 1400), http (wrk -t1 --latency), all
#                                                                               [http]
# Options:
#   --reps N          repetitions per target and load (after one short warm-up) [3]
#   --duration S      seconds per measurement (iperf3 -t, wrk -d)               [10]
#   --targets "LIST"  what to measure, in this order: direct nginx haproxy gtd gtd-log
#                     (haproxy is dropped for udp: HAProxy has no UDP proxy; gtd-log,
#                     gtd with its HTTP access log written to run/access.log, is http
#                     only and measured only when named)       [direct nginx haproxy gtd]
#   --conns "A B"     http: wrk connection counts                               ["50 200"]
#   --rates "A B"     udp: iperf3 -b rates                                      ["0 1G"]
#   --results DIR     results root; each mode writes DIR/<mode>                 [target/bench]
#   --gtd PATH        use this gtd binary and skip the build
#   --no-build        do not run cargo build (the binary must exist)
#   --no-pin          do not pin processes to CPUs
#   --proxy-cpus LIST the CPUs the proxy runs on (taskset's list); nginx gets one worker
#                     and HAProxy one thread per CPU in it, gtd sizes its runtime to it
#                     (one CPU: a single-threaded runtime; more: one worker each). The
#                     load and the backends stay on CPU 0, so "0,1" shares CPU 0 with them
#                     on a 2-CPU machine: compare the proxies' scaling, not the figures.  [1]
#   -h, --help
# Needs: nginx (and its stream module for tcp/udp: libnginx-mod-stream on Debian), haproxy,
# wrk, iperf3, jq, curl, ss, setsid, timeout; taskset unless --no-pin.
#
# Output: DIR/<mode>/raw.csv (one row per run), DIR/<mode>/summary.md (medians, and gtd
# divided by each other target), DIR/<mode>/run/ (configs, logs, wrk/iperf3 output). The
# summary is also printed. Compare ratios, not absolute figures: they move with the machine.
#
# Every process this script starts gets its own process group (setsid) and is stopped by that
# group id at the end, on error and on Ctrl-C. Nothing is stopped by name. Every client run goes
# through `timeout`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
log() { printf '[%(%H:%M:%S)T] run.sh: %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

modes=() reps=3 duration=10 targets="direct nginx haproxy gtd" conns="50 200" rates="0 1G"
results="$repo/target/bench" gtd="" build=1 pin=1 proxy_cpus=1
while (($#)); do
  case "$1" in
    tcp | udp | http) modes+=("$1"); shift ;;
    all) modes+=(tcp udp http); shift ;;
    --reps) reps="${2:?--reps N}"; shift 2 ;;
    --duration) duration="${2:?--duration S}"; shift 2 ;;
    --targets) targets="${2:?--targets LIST}"; shift 2 ;;
    --conns) conns="${2:?--conns LIST}"; shift 2 ;;
    --rates) rates="${2:?--rates LIST}"; shift 2 ;;
    --results) results="${2:?--results DIR}"; shift 2 ;;
    --gtd) gtd="${2:?--gtd PATH}"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    --no-pin) pin=0; shift ;;
    --proxy-cpus) proxy_cpus="${2:?--proxy-cpus LIST}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
((${#modes[@]})) || modes=(http)
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps: '$reps' is not a positive integer"
[[ "$duration" =~ ^[1-9][0-9]*$ ]] || die "--duration: '$duration' is not a positive integer"
for t in $targets; do
  [[ "$t" =~ ^(direct|nginx|haproxy|gtd|gtd-log)$ ]] || die "--targets: unknown target '$t'"
done
[[ "$results" == /* ]] || results="$PWD/$results"
for c in timeout setsid ss curl jq awk; do command -v "$c" >/dev/null || die "missing '$c'"; done
((pin == 0)) || command -v taskset >/dev/null || die "missing 'taskset' (or pass --no-pin)"
((pin == 0)) || (($(nproc) >= 2)) || { log "fewer than 2 CPUs: not pinning"; pin=0; }
[[ "$proxy_cpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--proxy-cpus: '$proxy_cpus' is not a list like 1 or 0,1"
workers=$(tr ',' '\n' <<<"$proxy_cpus" | wc -l)
((pin)) || workers=1

# ---- processes: one process group each, stopped by group id -----------------------------------
declare -A PGID=()
on_cpu() { if ((pin)); then echo "taskset -c $1"; fi; }
start_bg() { # NAME CPU CMD... : CMD in its own session (pgid = pid), output to run/NAME.log
  local name="$1" cpu="$2"; shift 2
  # shellcheck disable=SC2046
  setsid $(on_cpu "$cpu") "$@" >"$run_dir/$name.log" 2>&1 </dev/null &
  PGID[$name]=$!
}
stop_all() {
  local name pg i
  for name in "${!PGID[@]}"; do kill -TERM -- "-${PGID[$name]}" 2>/dev/null || true; done
  for name in "${!PGID[@]}"; do
    pg="${PGID[$name]}"
    for ((i = 0; i < 50; i++)); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pg" 2>/dev/null || true
    wait "$pg" 2>/dev/null || true
  done
  PGID=()
}
trap 'stop_all' EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

wait_port() { # tcp|udp PORT : until something listens on 127.0.0.1:PORT (10 s)
  local flag=-ltn i; [[ "$1" == udp ]] && flag=-lun
  for ((i = 0; i < 100; i++)); do
    ss -H "$flag" "sport = :$2" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}
cpu_ticks() { # PGID : user+system clock ticks of every process in that group
  local pg="$1"
  awk -v pg="$pg" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ");
      if (f[3] == pg) t += f[12] + f[13] } END { print t + 0 }' /proc/[0-9]*/stat 2>/dev/null
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---- build ----------------------------------------------------------------------------------
[[ -n "$gtd" ]] || gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd"
if ((build)); then
  log "building gtd (dist profile) -> $gtd"
  (cd "$repo" && timeout 3600 cargo build --profile dist --bin gtd) || die "cargo build failed"
fi
[[ -x "$gtd" ]] || die "no gtd binary at $gtd (build it, or pass --gtd PATH)"
gtd="$(cd "$(dirname "$gtd")" && pwd)/$(basename "$gtd")"

# ---- configurations -------------------------------------------------------------------------
nginx_common() { # NAME : the lines every nginx config here starts with
  cat <<EOF
worker_processes $([[ "$1" == nginx ]] && echo "$workers" || echo 1);
daemon off;
pid $run_dir/$1.pid;
error_log $run_dir/$1.error.log warn;
EOF
  # Debian builds the stream module as a dynamic module (libnginx-mod-stream).
  if [[ "$mode" != http && -f /usr/lib/nginx/modules/ngx_stream_module.so ]]; then
    echo "load_module /usr/lib/nginx/modules/ngx_stream_module.so;"
  fi
  echo "events { worker_connections 8192; }"
}
nginx_temp() { echo "client_body_temp_path $run_dir/tmp/$1; proxy_temp_path $run_dir/tmp/$1p;"; }

http_backend_conf() { # NAME PORT
  nginx_common "$1"
  cat <<EOF
http {
  access_log off; keepalive_requests 1000000; $(nginx_temp "$1")
  server { listen 127.0.0.1:$2 backlog=4096; location / { default_type text/plain; return 200 "ok"; } }
}
EOF
}
http_nginx_conf() {
  nginx_common nginx
  echo "http {"
  echo "  access_log off; keepalive_requests 1000000; $(nginx_temp nginx)"
  echo "  upstream backends {"
  for b in ${backends//,/ }; do echo "    server $b;"; done
  echo "    keepalive 64; keepalive_requests 1000000;"
  echo "  }"
  # The same three headers gtd always sets, so every proxy sends the backends the same request.
  cat <<EOF
  server {
    listen 127.0.0.1:${port[nginx]} backlog=4096;
    location / {
      proxy_pass http://backends; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$host;
    }
  }
}
EOF
}
stream_nginx_conf() { # nginx stream module towards the iperf3 server (UDP: TCP control too)
  nginx_common nginx
  echo "stream {"
  echo "  upstream be { server $backend; }"
  echo "  server { listen 127.0.0.1:${port[nginx]}; proxy_pass be; proxy_timeout 1h; }"
  [[ "$mode" == udp ]] && echo "  server { listen 127.0.0.1:${port[nginx]} udp; proxy_pass be; proxy_timeout 60s; }"
  echo "}"
}
haproxy_conf() {
  cat <<EOF
global
  nbthread $workers
  maxconn 8192
defaults
  mode $([[ "$mode" == http ]] && echo http || echo tcp)
  timeout connect 5s
  timeout client 1h
  timeout server 1h
  maxconn 8192
frontend fe
  bind 127.0.0.1:${port[haproxy]}
  default_backend be
backend be
EOF
  if [[ "$mode" == http ]]; then
    printf '  balance roundrobin\n  http-reuse always\n  option http-keep-alive\n  option forwardfor\n'
    printf '  http-request set-header X-Forwarded-Proto http\n  http-request set-header X-Forwarded-Host %%[req.hdr(host)]\n'
  fi
  local b n=0
  for b in ${backends//,/ }; do n=$((n + 1)); echo "  server b$n $b"; done
}

# ---- one mode -------------------------------------------------------------------------------
run_mode() {
  mode="$1"
  out="$results/$mode" run_dir="$results/$mode/run"
  rm -rf "$out"; mkdir -p "$run_dir/tmp"
  local list="" t
  for t in $targets; do
    [[ "$mode" == udp && "$t" == haproxy ]] || [[ "$mode" != http && "$t" == gtd-log ]] || list+=" $t"
  done
  list="${list# }"
  local base loads
  case "$mode" in
    http) base=18280 loads="$conns" ;;
    tcp) base=15480 loads="1-stream" ;;
    udp) base=15580 loads="$rates" ;;
  esac
  declare -gA port=([gtd]=$base [nginx]=$((base + 10)) [haproxy]=$((base + 11)) [gtd-log]=$((base + 12)))
  need=(nginx); [[ "$mode" == http ]] && need+=(wrk) || need+=(iperf3)
  [[ " $list " == *" haproxy "* ]] && need+=(haproxy)
  for c in "${need[@]}"; do command -v "$c" >/dev/null || die "$mode: missing '$c'"; done

  # Backends on CPU 0: three nginx "return 200 ok" servers (http), or one iperf3 server.
  if [[ "$mode" == http ]]; then
    backends="127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
    local i
    for i in 1 2 3; do
      http_backend_conf "backend$i" $((base + i)) >"$run_dir/backend$i.conf"
      start_bg "backend$i" 0 nginx -p "$run_dir" -c "$run_dir/backend$i.conf" -e "$run_dir/backend$i.error.log"
    done
  else
    backends="127.0.0.1:$((base + 1))"
    start_bg iperf3-server 0 iperf3 -s -B 127.0.0.1 -p $((base + 1))
  fi
  backend="${backends%%,*}" port[direct]="${backend##*:}"

  # The proxies under test, each alone on CPU 1.
  if [[ " $list " == *" nginx "* ]]; then
    if [[ "$mode" == http ]]; then http_nginx_conf; else stream_nginx_conf; fi >"$run_dir/nginx.conf"
    start_bg nginx "$proxy_cpus" nginx -p "$run_dir" -c "$run_dir/nginx.conf" -e "$run_dir/nginx.error.log"
  fi
  if [[ " $list " == *" haproxy "* ]]; then
    haproxy_conf >"$run_dir/haproxy.cfg"
    start_bg haproxy "$proxy_cpus" haproxy -db -f "$run_dir/haproxy.cfg"
  fi
  if [[ " $list " == *" gtd "* ]]; then
    start_bg gtd "$proxy_cpus" env RUST_LOG="${RUST_LOG:-warn}" "$here/gtd-bench-config.sh" --proto "$mode" \
      --port "${port[gtd]}" --backends "$backends" --run-dir "$run_dir" --gtd "$gtd"
  fi
  if [[ " $list " == *" gtd-log "* ]]; then
    start_bg gtd-log "$proxy_cpus" env RUST_LOG="${RUST_LOG:-warn}" "$here/gtd-bench-config.sh" --proto "$mode" \
      --port "${port[gtd-log]}" --backends "$backends" --run-dir "$run_dir" --gtd "$gtd" \
      --access-log "$run_dir/access.log"
  fi
  local p
  for t in $list; do
    wait_port tcp "${port[$t]}" || { tail -5 "$run_dir/$t.log" >&2 || true; die "$mode: $t never listened on ${port[$t]}"; }
    [[ "$mode" == udp && "$t" != direct ]] && { wait_port udp "${port[$t]}" || die "$mode: $t has no UDP socket"; }
    if [[ "$mode" == http ]]; then
      [[ "$(curl -s --max-time 5 "http://127.0.0.1:${port[$t]}/")" == ok ]] || die "http: $t does not answer 'ok'"
    fi
  done
  for p in ${backends//,/ }; do wait_port tcp "${p##*:}" || die "$mode: backend $p never listened"; done
  log "$mode: targets $list; loads $loads; $reps x ${duration}s each"

  local csv="$out/raw.csv" rep l
  echo "rep,target,load,value,p50_ms,p99_ms,loss_pct,proxy_cpu_pct" >"$csv"
  for t in $list; do for l in $loads; do one "$t" "$l" 0 2 >/dev/null; done; done # warm-up
  for ((rep = 1; rep <= reps; rep++)); do
    for t in $list; do for l in $loads; do one "$t" "$l" "$rep" "$duration" >>"$csv"; done; done
  done
  stop_all
  summary "$csv" "$list" "$loads" | tee "$out/summary.md"
}

one() { # TARGET LOAD REP SECONDS : prints one CSV row
  local t="$1" l="$2" rep="$3" secs="$4" f="$run_dir/$1-$2-r$3" pg="" c0=0 c1=0 t0 t1
  [[ "$t" == direct ]] || pg="${PGID[$t]}"
  [[ -n "$pg" ]] && c0="$(cpu_ticks "$pg")"
  t0="$(date +%s.%N)"
  local value="" p50="" p99="" loss=""
  case "$mode" in
    http)
      # shellcheck disable=SC2046
      timeout $((secs + 20)) $(on_cpu 0) wrk -t1 -c"$l" -d"${secs}s" --latency "http://127.0.0.1:${port[$t]}/" >"$f.txt" 2>&1 || true
      value="$(awk '/^Requests\/sec:/ { print $2 }' "$f.txt")"
      p50="$(awk '$1 == "50%" { print $2 }' "$f.txt")" p99="$(awk '$1 == "99%" { print $2 }' "$f.txt")"
      p50="$(to_ms "$p50")" p99="$(to_ms "$p99")"
      ;;
    tcp)
      # shellcheck disable=SC2046
      timeout $((secs + 20)) $(on_cpu 0) iperf3 -c 127.0.0.1 -p "${port[$t]}" -t "$secs" -J >"$f.json" 2>&1 || true
      value="$(jq -r '(.end.sum_received.bits_per_second // 0) / 1e9' "$f.json" 2>/dev/null || echo 0)"
      ;;
    udp)
      # shellcheck disable=SC2046
      timeout $((secs + 20)) $(on_cpu 0) iperf3 -c 127.0.0.1 -p "${port[$t]}" -u -b "$l" -l 1400 -t "$secs" -J >"$f.json" 2>&1 || true
      value="$(jq -r '((.end.sum_received // .end.sum).bits_per_second // 0) / 1e9' "$f.json" 2>/dev/null || echo 0)"
      loss="$(jq -r '.end.sum.lost_percent // ""' "$f.json" 2>/dev/null || true)"
      ;;
  esac
  t1="$(date +%s.%N)"
  if [[ "$mode" != http ]]; then value="$(printf '%.3f' "${value:-0}")"; fi
  if [[ -n "$loss" ]]; then loss="$(printf '%.2f' "$loss")"; fi
  [[ -n "$pg" ]] && c1="$(cpu_ticks "$pg")"
  local cpu=""
  [[ -n "$pg" ]] && cpu="$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.0f", 100 * (b - a) / hz / (e - s) }')"
  echo "$rep,$t,$l,${value:-0},$p50,$p99,$loss,$cpu"
}
to_ms() { # wrk's "512.00us" / "1.23ms" / "1.02s" -> ms
  [[ -n "$1" ]] || { echo ""; return; }
  awk -v v="$1" 'BEGIN { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    f = (u == "us") ? 0.001 : (u == "s") ? 1000 : 1; printf "%.3f", n * f }'
}

summary() { # CSV TARGETS LOADS : medians per (target, load), then gtd / each other target
  local csv="$1" list="$2" loads="$3" t l unit
  case "$mode" in http) unit="req/s" ;; *) unit="Gbit/s received" ;; esac
  echo "## $mode ($(date -u '+%Y-%m-%d %H:%M UTC'), gtd $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'), medians of $reps x ${duration}s)"
  echo
  echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a busy machine lowers every figure; rerun then)."
  echo
  local cols="value proxy_cpu_pct"
  [[ "$mode" == http ]] && cols="value p50_ms p99_ms proxy_cpu_pct"
  [[ "$mode" == udp ]] && cols="value loss_pct proxy_cpu_pct"
  local hdr="| target | load |" sep="|---|---|" col
  declare -A name=([value]="$unit" [p50_ms]="p50 ms" [p99_ms]="p99 ms" [loss_pct]="loss %" [proxy_cpu_pct]="proxy CPU %")
  for col in $cols; do hdr+=" ${name[$col]} |" sep+="---|"; done
  echo "$hdr"; echo "$sep"
  declare -A med=()
  local i
  for l in $loads; do
    for t in $list; do
      local row="| $t | $l |"
      i=4
      for col in value p50_ms p99_ms loss_pct proxy_cpu_pct; do
        local m; m="$(awk -F, -v t="$t" -v l="$l" -v i="$i" 'NR > 1 && $2 == t && $3 == l && $i != "" { print $i }' "$csv" | median)"
        if [[ -n "$m" ]]; then
          case "$col" in
            proxy_cpu_pct) m="$(printf '%.0f' "$m")" ;;
            value) if [[ "$mode" == http ]]; then m="$(printf '%.0f' "$m")"; else m="$(printf '%.3f' "$m")"; fi ;;
            *) m="$(printf '%.3f' "$m")" ;;
          esac
        fi
        med[$t,$l,$col]="$m"
        [[ " $cols " == *" $col "* ]] && row+=" ${m:--} |"
        i=$((i + 1))
      done
      echo "$row"
    done
  done
  echo
  if [[ " $list " == *" gtd "* ]]; then
    for l in $loads; do
      for t in $list; do
        [[ "$t" == gtd ]] && continue
        local g="${med[gtd,$l,value]}" o="${med[$t,$l,value]}"
        if [[ -n "$g" && -n "$o" ]]; then
          awk -v g="$g" -v o="$o" -v t="$t" -v l="$l" -v u="$unit" \
            'BEGIN { if (o > 0) printf "gtd / %s at %s: %.2f (%s)\n", t, l, g / o, u }'
        fi
      done
    done
  fi
}

mkdir -p "$results"
for m in "${modes[@]}"; do run_mode "$m"; done
