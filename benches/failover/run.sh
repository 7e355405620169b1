#!/usr/bin/env bash
# gtd's failover benchmark, self-contained: under wrk load against an HTTP listener with two
# groups (a primary group of 1 or 2 endpoints, a second group that takes over), one primary
# endpoint is killed, blackholed or made to answer 502 slowly; the run measures how long
# traffic still reaches it, how many requests fail meanwhile, which of gtd's mechanisms acted
# when, and, once the endpoint is back, how long until traffic reaches it again. Everything
# listens on 127.0.0.1 only.
#
#   benches/failover/run.sh [options]
#
# Options:
#   --faults "LIST"     kill blackhole slow502 (what happens to the primary endpoint)    [all]
#   --settings "LIST"   shipped: health check interval 5s, unhealthy_threshold 3 (the defaults,
#                       as config.toml ships them); fast: interval 1s, unhealthy_threshold 2
#                                                                                 [shipped fast]
#   --primary "LIST"    endpoints in the primary group: 1 (the second group takes over) and/or
#                       2 (one fails, the other stays: traffic moves inside the group)     [1 2]
#   --warmup S          load before the fault                                              [3]
#   --fault-secs S      fault held this long, then undone: long enough for the active checks to
#                       flip [shipped 20, shipped blackhole 32 (its checks time out: see
#                       README.md), fast 8]
#   --recover-secs S    load after the fault is undone  [shipped 15, shipped blackhole 18, fast 7]
#   --linger S          after the load, wait up to S s more for probes still unanswered (a
#                       blackholed request ends only at upstream_timeout, 60 s by default)  [2]
#   --conns N           wrk connections (wrk -t1; every request is a GET)                 [16]
#   --probe-rate N      open-loop probe requests per second (observer.py)                  [50]
#   --slow-ms MS        slow502: the backend answers 502 after this long                  [200]
#   --unhealthy-status "LIST"  the listener's unhealthy_status, comma-separated; config.toml's
#                       HTTP listener ships 502,503,504; "" is the built-in default (none)
#                                                                               [502,503,504]
#   --results DIR       results root                                 [target/bench/failover]
#   --gtd PATH          use this gtd binary and skip the build
#   --no-build          do not run cargo build (the binary must exist)
#   -h, --help
# Needs: python3, wrk, curl, ss, setsid, timeout (no root, no iptables: traffic on 127.0.0.1).
#
# Output: DIR/summary.md (the table, also printed), DIR/results.jsonl (one JSON object per
# run, every figure analyze.py computes), DIR/run/<setting>-<fault>-p<N>/ (gtd config and log,
# backend logs, wrk output, probes.tsv, metrics.tsv, events). One run lasts
# warmup + fault-secs + recover-secs + linger (shipped 40 s, shipped blackhole 55 s, fast 20 s)
# plus about a second to start; the default matrix (12 runs) about 6 minutes.
#
# Every process this script starts gets its own process group (setsid) and is stopped by that
# group id when its run ends, on error and on Ctrl-C (trap on EXIT). Nothing is stopped by
# name. wrk and the observer run under `timeout`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
log() { printf '[%(%H:%M:%S)T] failover: %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

faults="kill blackhole slow502" settings="shipped fast" primaries="1 2" warmup=3
fault_secs="" recover_secs="" linger=2 conns=16 probe_rate=50 slow_ms=200 unhealthy="502,503,504"
results="$repo/target/bench/failover" gtd="" build=1
while (($#)); do
  case "$1" in
    --faults) faults="${2:?--faults LIST}"; shift 2 ;;
    --settings) settings="${2:?--settings LIST}"; shift 2 ;;
    --primary) primaries="${2:?--primary LIST}"; shift 2 ;;
    --warmup) warmup="${2:?--warmup S}"; shift 2 ;;
    --fault-secs) fault_secs="${2:?--fault-secs S}"; shift 2 ;;
    --recover-secs) recover_secs="${2:?--recover-secs S}"; shift 2 ;;
    --linger) linger="${2:?--linger S}"; shift 2 ;;
    --conns) conns="${2:?--conns N}"; shift 2 ;;
    --probe-rate) probe_rate="${2:?--probe-rate N}"; shift 2 ;;
    --slow-ms) slow_ms="${2:?--slow-ms MS}"; shift 2 ;;
    --unhealthy-status) unhealthy="${2?--unhealthy-status LIST}"; shift 2 ;;
    --results) results="${2:?--results DIR}"; shift 2 ;;
    --gtd) gtd="${2:?--gtd PATH}"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
for f in $faults; do [[ "$f" =~ ^(kill|blackhole|slow502)$ ]] || die "--faults: unknown fault '$f'"; done
for s in $settings; do [[ "$s" =~ ^(shipped|fast)$ ]] || die "--settings: unknown setting '$s'"; done
for p in $primaries; do [[ "$p" =~ ^[12]$ ]] || die "--primary: 1 or 2, not '$p'"; done
for v in warmup linger conns probe_rate slow_ms; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: '${!v}' is not a positive integer"
done
for v in fault_secs recover_secs; do
  [[ -z "${!v}" || "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: '${!v}' is not a positive integer"
done
[[ "$unhealthy" =~ ^([0-9]{3}(,[0-9]{3})*)?$ ]] || die "--unhealthy-status: '$unhealthy' is not a list of statuses"
[[ "$results" == /* ]] || results="$PWD/$results"
for c in python3 wrk curl ss setsid timeout; do command -v "$c" >/dev/null || die "missing '$c'"; done

# Ports: gtd 18580, its admin 18590, backends a1 18581 and a2 18582 (primary), b1 18583.
gtd_port=18580 admin_port=18590
declare -A bport=([a1]=18581 [a2]=18582 [b1]=18583)

# ---- processes: one process group each, stopped by group id ---------------------------------
declare -A PGID=()
start_bg() { # NAME CMD... : CMD in its own session (pgid = pid), output to $run_dir/NAME.log
  local name="$1"; shift
  setsid "$@" >"$run_dir/$name.log" 2>&1 </dev/null &
  PGID[$name]=$!
}
stop_one() { # NAME [SIGNAL] : signal the group, wait up to 5 s, then SIGKILL it
  local name="$1" sig="${2:-TERM}" pg i
  pg="${PGID[$name]:-}"
  [[ -n "$pg" ]] || return 0
  { # stderr of the whole block: bash's own "Killed" notice for the job goes too
    kill "-$sig" -- "-$pg" || true
    for ((i = 0; i < 50; i++)); do kill -0 -- "-$pg" || break; sleep 0.1; done
    kill -KILL -- "-$pg" || true
    wait "$pg" || true
  } 2>/dev/null
  unset "PGID[$name]"
}
stop_all() {
  local name
  for name in "${!PGID[@]}"; do stop_one "$name"; done
}
trap 'stop_all' EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

wait_port() { # PORT : until something listens on 127.0.0.1:PORT (10 s)
  local i
  for ((i = 0; i < 100; i++)); do
    ss -H -ltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}
now() { echo "$EPOCHREALTIME"; }

# ---- build ----------------------------------------------------------------------------------
[[ -n "$gtd" ]] || gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd"
if ((build)); then
  log "building gtd (dist profile) -> $gtd"
  (cd "$repo" && timeout 3600 cargo build --profile dist --bin gtd) || die "cargo build failed"
fi
[[ -x "$gtd" ]] || die "no gtd binary at $gtd (build it, or pass --gtd PATH)"
gtd="$(cd "$(dirname "$gtd")" && pwd)/$(basename "$gtd")"

# ---- configuration --------------------------------------------------------------------------
gtd_conf() { # SETTING PRIMARY : the listener under test. Everything not written is a default.
  local interval=5s threshold=3 ep
  [[ "$1" == fast ]] && interval=1s threshold=2
  cat <<EOF
# written by benches/failover/run.sh: setting $1, $2 primary endpoint(s)
catalog = "$repo/regions/catalog.toml"

[admin]
bind = "127.0.0.1:$admin_port"

[[listener]]
name = "failover"
protocol = "http"
port = $gtd_port
regions = ["cn-beijing"]
unhealthy_status = [${unhealthy//,/, }]
drain_timeout = "0s"
EOF
  group() { # NAME REGION PRIORITY ENDPOINTS...
    printf '\n  [[listener.group]]\n  name = "%s"\n  region = "%s"\n  priority = %s\n' "$1" "$2" "$3"
    printf '\n    [listener.group.health_check]\n    protocol = "http"\n    path = "/health"\n'
    printf '    interval = "%s"\n    unhealthy_threshold = %s\n' "$interval" "$threshold"
    shift 3
    for ep in "$@"; do
      printf '\n    [[listener.group.endpoint]]\n    address = "127.0.0.1:%s"\n' "${bport[$ep]}"
    done
  }
  if [[ "$2" == 1 ]]; then group primary cn-beijing 1 a1; else group primary cn-beijing 1 a1 a2; fi
  group secondary cn-shanghai 2 b1
}

start_backend() { # NAME : backend.py on its port, logging to $run_dir/NAME.requests
  start_bg "$1" python3 "$here/backend.py" --name "$1" --port "${bport[$1]}" \
    --log "$run_dir/$1.requests" --slow-ms "$slow_ms"
  wait_port "${bport[$1]}" || die "backend $1 never listened on ${bport[$1]}"
}

# ---- one run --------------------------------------------------------------------------------
one_run() { # SETTING FAULT PRIMARY
  local setting="$1" fault="$2" primary="$3" f=8 r=7
  if [[ "$setting" == shipped && "$fault" == blackhole ]]; then f=32 r=18
  elif [[ "$setting" == shipped ]]; then f=20 r=15
  fi
  f="${fault_secs:-$f}" r="${recover_secs:-$r}"
  local total=$((warmup + f + r))
  run_dir="$results/run/$setting-$fault-p$primary"
  rm -rf "$run_dir"; mkdir -p "$run_dir"
  log "$setting / $fault / $primary primary endpoint(s): ${warmup}s load, ${f}s fault, ${r}s after, ${linger}s linger"

  local eps="a1 b1" b
  [[ "$primary" == 2 ]] && eps="a1 a2 b1"
  for b in $eps; do start_backend "$b"; done
  gtd_conf "$setting" "$primary" >"$run_dir/gtd.toml"
  "$gtd" check --config "$run_dir/gtd.toml" >"$run_dir/gtd-check.txt" 2>&1 ||
    { cat "$run_dir/gtd-check.txt" >&2; die "gtd check rejected $run_dir/gtd.toml"; }
  start_bg gtd env RUST_LOG="${RUST_LOG:-info,rustls=error}" NO_COLOR=1 \
    "$gtd" run --config "$run_dir/gtd.toml" --region cn-beijing --bind 127.0.0.1
  wait_port "$gtd_port" || { tail -5 "$run_dir/gtd.log" >&2 || true; die "gtd never listened on $gtd_port"; }
  [[ "$(curl -s --max-time 5 "http://127.0.0.1:$gtd_port/")" == "ok a1" ]] ||
    die "gtd does not route to a1 before the fault"

  local t_start t_fault t_restore
  t_start="$(now)"
  start_bg observer timeout $((total + linger + 30)) python3 "$here/observer.py" \
    --url "http://127.0.0.1:$gtd_port/" --metrics "http://127.0.0.1:$admin_port/metrics" \
    --seconds "$total" --linger "$linger" --rate "$probe_rate" --out "$run_dir"
  start_bg wrk timeout $((total + 30)) wrk -t1 -c"$conns" -d"${total}s" --timeout 120s \
    -s "$here/count.lua" "http://127.0.0.1:$gtd_port/"
  sleep "$warmup"

  t_fault="$(now)"
  case "$fault" in
    kill) stop_one a1 KILL ;;
    blackhole) kill -USR1 -- "${PGID[a1]}" ;;
    slow502) kill -USR2 -- "${PGID[a1]}" ;;
  esac
  sleep "$f"

  t_restore="$(now)"
  case "$fault" in
    kill) mv "$run_dir/a1.log" "$run_dir/a1-before-kill.log"; start_backend a1 ;;
    *) kill -HUP -- "${PGID[a1]}" ;;
  esac
  cat >"$run_dir/events" <<EOF
setting=$setting
fault=$fault
primary=$primary
faulty=a1
faulty_address=127.0.0.1:${bport[a1]}
t_start=$t_start
t_fault=$t_fault
t_restore=$t_restore
warmup=$warmup
fault_secs=$f
recover_secs=$r
linger=$linger
conns=$conns
probe_rate=$probe_rate
slow_ms=$slow_ms
unhealthy_status=$unhealthy
load_at_restore=$(cut -d" " -f1-3 /proc/loadavg)
EOF
  # wrk and the observer end by themselves (under timeout); then everything else is stopped.
  wait "${PGID[wrk]}" 2>/dev/null || true
  unset "PGID[wrk]"
  wait "${PGID[observer]}" 2>/dev/null || true
  unset "PGID[observer]"
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$run_dir/events"
  stop_all
  python3 "$here/analyze.py" "$run_dir" >>"$results/results.jsonl" ||
    log "analyze.py failed on $run_dir"
}

mkdir -p "$results"
: >"$results/results.jsonl"
log "$("$gtd" --version 2>/dev/null || echo gtd) at $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for s in $settings; do
  for p in $primaries; do
    for f in $faults; do one_run "$s" "$f" "$p"; done
  done
done
python3 "$here/analyze.py" --summary "$results/results.jsonl" \
  --commit "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')" | tee "$results/summary.md"
