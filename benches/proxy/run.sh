#!/usr/bin/env bash
# gtd's proxy benchmark: builds gtd (release) once, then runs the shared harness
# (../shared/bench/run_{tcp,udp,http}.sh) with gtd as the "extra" proxy, so that gtd and the
# anchors (direct, direct-split, nginx, haproxy) are measured in the same session, interleaved,
# on the same cores. At the end it prints where each summary.md is and a short table of ratios
# (gtd vs direct / direct-split / nginx / haproxy) computed from the harness's raw.csv.
#
#   benches/proxy/run.sh [MODE...] [options] [-- HARNESS-OPTIONS...]
#
# MODE: tcp, udp, http or all                                              [tcp udp]
# Options:
#   --reps N          repetitions per target (harness --reps)              [harness: 3]
#   --duration S      seconds per run (iperf3 -t via --time; wrk -d via --duration) [harness: 10]
#   --targets "LIST"  anchors to measure: direct direct-split nginx haproxy, in this order (gtd
#                     is always measured: where the list names it, else last; haproxy is
#                     dropped for udp, which it cannot proxy)                [all]
#   --results DIR     results root; each mode writes DIR/<mode>           [target/bench]
#   --harness DIR     the harness                    [$GTD_BENCH_HARNESS or ../shared/bench]
#   --gtd PATH        use this gtd binary and skip the build
#   --no-build        do not run cargo build (the binary must exist)
#   --max-seconds N   hard bound for one harness run (it has its own watchdog too) [computed]
#   -h, --help
# Everything after "--" goes verbatim to every harness script, e.g. -- --rates "1G" --quiet-max 50
# (see ../shared/bench/run_tcp.sh --help for what it takes).
#
# A previous DIR/<mode> is moved to DIR/<mode>.prev (and the one before that is removed).
# Environment: CARGO_TARGET_DIR (where the release build goes), RUST_LOG (gtd's log filter,
# e.g. debug; gtd's log is run/extra.log in the results).
#
# Everything this script starts it stops by PID: the build and each harness run go through
# `timeout`, in the background, and a signal to this script is passed on to that one PID (the
# harness then stops every process group it started, gtd included).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
log() { printf '[%(%H:%M:%S)T] run.sh: %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }

modes=() reps="" duration="" targets="" results="$repo/target/bench" gtd="" build=1 max_seconds=""
harness="${GTD_BENCH_HARNESS:-$repo/../shared/bench}"
passthrough=()
while (($#)); do
  case "$1" in
    tcp | udp | http) modes+=("$1"); shift ;;
    all) modes+=(tcp udp http); shift ;;
    --reps) reps="${2:?--reps N}"; shift 2 ;;
    --duration | --time) duration="${2:?--duration S}"; shift 2 ;;
    --targets) targets="${2?--targets LIST}"; shift 2 ;;
    --results) results="${2:?--results DIR}"; shift 2 ;;
    --harness) harness="${2:?--harness DIR}"; shift 2 ;;
    --gtd) gtd="${2:?--gtd PATH}"; build=0; shift 2 ;;
    --no-build) build=0; shift ;;
    --max-seconds) max_seconds="${2:?--max-seconds N}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; passthrough=("$@"); break ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
((${#modes[@]})) || modes=(tcp udp)
[[ -z "$reps" || "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps: '$reps' is not a positive integer"
[[ -z "$duration" || "$duration" =~ ^[1-9][0-9]*$ ]] || die "--duration: '$duration' is not a positive integer"
[[ -z "$max_seconds" || "$max_seconds" =~ ^[1-9][0-9]*$ ]] || die "--max-seconds: bad value"
harness="$(cd "$harness" 2>/dev/null && pwd)" || die "no harness directory (try --harness DIR)"
[[ "$results" == /* ]] || results="$PWD/$results"
config_script="$here/gtd-bench-config.sh"
[[ -x "$config_script" ]] || die "$config_script is not executable"
command -v timeout >/dev/null || die "missing 'timeout' (coreutils)"

# ---- the one process we run at a time, stopped by its PID on a signal ---------------------
child=""
on_signal() {
  log "signal received; stopping pid $child"
  if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true # timeout ends its command within its -k bound
  fi
  exit 130
}
trap on_signal INT TERM HUP

run_bounded() { # SECONDS CMD... : runs CMD under timeout, in the background, waits for it
  local bound="$1"; shift
  timeout -k 30 "$bound" "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}

# ---- build ------------------------------------------------------------------------------------
if [[ -z "$gtd" ]]; then
  gtd="${CARGO_TARGET_DIR:-$repo/target}/release/gtd"
fi
if ((build)); then
  log "building gtd (release) -> $gtd"
  (cd "$repo" && run_bounded 3600 cargo build --release --bin gtd) || die "cargo build failed"
fi
[[ -x "$gtd" ]] || die "no gtd binary at $gtd (build it, or pass --gtd PATH)"
gtd="$(cd "$(dirname "$gtd")" && pwd)/$(basename "$gtd")"

# ---- ratio table from raw.csv -----------------------------------------------------------------
# Medians per (target, rate|conns) of the value columns, then gtd divided by each anchor.
# Column names are the harness's raw.csv header (iperf_common.sh / run_http.sh). "SUT cpu %" is
# the CPU time of the process under test. For TCP, "CPU 1 busy %" is the whole proxy core from
# /proc/stat. It is approximate (see the harness README), and it also counts kernel work
# charged to no process, such as loopback softirqs. A splice relay does little in its own
# time, so look at both.
ratios() { # MODE CSV
  local mode="$1" csv="$2"
  awk -F, -v mode="$mode" '
    function median(key, col,   m, i, j, x, s) {
      m = n[key]
      for (i = 1; i <= m; i++) s[i] = v[key, col, i] + 0
      for (i = 2; i <= m; i++) { x = s[i]; j = i - 1; while (j > 0 && s[j] > x) { s[j+1] = s[j]; j-- } s[j+1] = x }
      return (m % 2) ? s[(m+1)/2] : (s[m/2] + s[m/2+1]) / 2
    }
    function fmt(x) {
      if (x == int(x)) return sprintf("%d", x)
      return (x >= 100) ? sprintf("%.0f", x) : (x >= 1) ? sprintf("%.2f", x) : sprintf("%.3f", x)
    }
    NR == 1 {
      for (i = 1; i <= NF; i++) idx[$i] = i
      if (mode == "http") {
        sub_col = "conns"; sub_name = " -c"; tput = "rps"
        nm = split("rps p50_ms p99_ms sut_cpu_pct sut_us_per_req", M, " ")
        split("req/s|p50 ms|p99 ms|SUT cpu %|SUT us/req", L, "|")
      } else if (mode == "udp") {
        sub_col = "rate"; sub_name = " -b "; tput = "gbps_recv"
        nm = split("gbps_recv lost_pct sut_cpu_pct", M, " ")
        split("Gbit/s recv|loss %|SUT cpu %", L, "|")
      } else {
        sub_col = "rate"; sub_name = ""; tput = "gbps_recv"
        nm = split("gbps_recv retrans sut_cpu_pct cpu1_pct", M, " ")
        split("Gbit/s recv|retransmits|SUT cpu %|CPU 1 busy %", L, "|")
      }
      next
    }
    {
      t = $(idx["target"]); if (t == "extra") t = "gtd"
      s = (mode == "tcp") ? "" : $(idx[sub_col]); key = t SUBSEP s
      if (!(s in seen_sub)) { seen_sub[s] = 1; subs[++ns] = s }
      have[t] = 1; n[key]++
      for (j = 1; j <= nm; j++) v[key, j, n[key]] = $(idx[M[j]])
      if ($(idx["foreign_busy_pct"]) + 0 > busy_max) busy_max = $(idx["foreign_busy_pct"]) + 0
      if (t == "gtd" && $(idx[tput]) + 0 == 0) zero_rows++
      if (t == "gtd" && mode == "http" && $(idx["errors"]) + 0 > 0) err_rows++
    }
    END {
      na = split("direct direct-split nginx haproxy", A, " ")
      hdr = "| " toupper(mode) " (median of " n["gtd" SUBSEP subs[1]] ") | gtd"; sep = "|---|---"
      for (a = 1; a <= na; a++) if (A[a] in have) { hdr = hdr " | " A[a]; sep = sep "|---" }
      for (a = 1; a <= na; a++) if (A[a] in have) { hdr = hdr " | gtd/" A[a]; sep = sep "|---" }
      print hdr " |"; print sep "|"
      for (k = 1; k <= ns; k++) {
        s = subs[k]
        for (j = 1; j <= nm; j++) {
          label = L[j] ((mode == "tcp") ? "" : sub_name s)
          g = ((("gtd" SUBSEP s) in n) ? median("gtd" SUBSEP s, j) : "")
          line = "| " label " | " (g == "" ? "-" : fmt(g))
          for (a = 1; a <= na; a++) if (A[a] in have) {
            key = A[a] SUBSEP s
            if (key in n) { x[a] = median(key, j); line = line " | " fmt(x[a]) } else { x[a] = ""; line = line " | -" }
          }
          for (a = 1; a <= na; a++) if (A[a] in have) {
            # (the direct target leaves CPU 1 idle: no ratio to it)
            if (g == "" || x[a] == "" || x[a] + 0 == 0 || (M[j] == "cpu1_pct" && A[a] == "direct")) line = line " | -"
            else line = line " | " sprintf("%.2f", g / x[a])
          }
          print line " |"
        }
      }
      print ""
      if (mode == "http") print "Higher is better for req/s; lower for p50, p99, CPU and us/req."
      else if (mode == "udp") print "Higher is better for Gbit/s (compare -b 0 by it); lower for loss (compare -b 1G by it) and CPU."
      else print "Higher is better for Gbit/s; lower for CPU. Retransmits on loopback are mostly reordering (DSACK undone)."
      print "SUT cpu % = the process under test (direct rows: the backend / iperf3 server)" ((mode == "tcp") ? "; CPU 1 = the proxy core (approximate)." : ".")
      if (busy_max > 35) printf "WARNING: some runs started with %d%% (of 200) foreign CPU busy: see foreign_busy_pct in raw.csv.\n", busy_max
      if (zero_rows > 0) printf "WARNING: %d gtd run(s) measured nothing (client error): see run/ and run/extra.log.\n", zero_rows
      if (err_rows > 0) printf "WARNING: %d gtd run(s) had wrk socket errors or non-2xx answers.\n", err_rows
    }' "$csv"
}

# ---- one harness run per mode -------------------------------------------------------------------
failed=() report=()
mkdir -p "$results"
for mode in "${modes[@]}"; do
  script="$harness/run_$mode.sh"
  [[ -f "$script" ]] || die "no $script"
  out="$results/$mode"
  if [[ -e "$out" ]]; then
    rm -rf "$out.prev"
    mv "$out" "$out.prev"
  fi

  args=(--results "$out" --extra-name gtd)
  [[ -n "$reps" ]] && args+=(--reps "$reps")
  if [[ -n "$duration" ]]; then
    if [[ "$mode" == http ]]; then args+=(--duration "$duration"); else args+=(--time "$duration"); fi
  fi
  if [[ -n "$targets" ]]; then
    t_list="" with_gtd=0
    for t in $targets; do
      case "$t" in
        gtd | extra) t_list+=" extra" with_gtd=1 ;; # where it is named, else last
        haproxy) [[ "$mode" == udp ]] || t_list+=" $t" ;;
        direct | direct-split | nginx) t_list+=" $t" ;;
        *) die "--targets: unknown target '$t' (direct direct-split nginx haproxy gtd)" ;;
      esac
    done
    ((with_gtd)) || t_list+=" extra"
    args+=(--targets "${t_list# }")
  fi
  printf -v cmd '%q --proto %s --port {PORT} --backends {BACKENDS} --run-dir {RUN_DIR} --gtd %q' \
    "$config_script" "$mode" "$gtd"
  args+=(--extra-proxy-cmd "$cmd")
  args+=(${passthrough[@]+"${passthrough[@]}"})

  # Outer bound, looser than the harness's own watchdog: up to 5 targets x 4 rates/conns
  # x (reps (+1 warm-up)) x (duration + setup + the harness's 90 s quiet wait), + 10 min.
  bound="$max_seconds"
  if [[ -z "$bound" ]]; then
    bound=$(( (${reps:-3} + 1) * 5 * 4 * (${duration:-10} + 15 + 90) + 600 ))
  fi

  log "$mode: $script ${args[*]}"
  mkdir -p "$out"
  rc=0
  # stdout+stderr of the harness go to the terminal and to $out/harness.log
  run_bounded "$bound" bash "$script" "${args[@]}" > >(tee "$out/harness.log") 2>&1 || rc=$?
  if ((rc != 0)) || [[ ! -f "$out/raw.csv" ]]; then
    log "$mode: harness failed (exit $rc); see $out/harness.log and $out/run/"
    failed+=("$mode")
    continue
  fi
  report+=("$mode")
done

# ---- report -------------------------------------------------------------------------------------
echo
for mode in ${report[@]+"${report[@]}"}; do
  out="$results/$mode"
  echo "== $mode: $out/summary.md (raw rows: $out/raw.csv, gtd log: $out/run/extra.log)"
  echo
  if [[ -s "$out/raw.csv" ]] && (($(wc -l <"$out/raw.csv") > 1)); then
    ratios "$mode" "$out/raw.csv"
  else
    echo "(no rows in raw.csv)"
  fi
  echo
done
echo "Ratios of medians from the same session; absolute figures depend on what else runs on this machine."
if ((${#failed[@]})); then
  log "failed: ${failed[*]}"
  exit 1
fi
