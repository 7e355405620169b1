#!/usr/bin/env bash
# Builds every fuzz target and runs each in turn for SECONDS (default 20), one process on one
# core, on the stable toolchain (libFuzzer, no sanitizer: `cargo fuzz --sanitizer none`).
#
#   fuzz/run.sh [SECONDS] [TARGET...]      # e.g. fuzz/run.sh 30 config h1_response
#
# Each target starts from its committed seeds (fuzz/corpus/TARGET, read only) and what earlier
# runs on this machine found (fuzz/work/TARGET, not committed; new inputs are written there).
# A crash, a failed assertion or an input slower than 10 s stops that target: the input is
# saved as fuzz/artifacts/TARGET/crash-* (or timeout-*), and the script exits 1 after running
# the others. The last line of each target's log (fuzz/work/TARGET.log) is printed: runs,
# coverage (cov, ft), corpus size, exec/s. Needs cargo-fuzz (`cargo install cargo-fuzz
# --locked`). Reproduce a crash: `cargo fuzz run --sanitizer none TARGET ARTIFACT`.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-20}"
shift || true
all=(config h1_response proxy_v2 admin_path udp_flows)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# Per target: libFuzzer's longest input (config and response heads need room: MAX_HEAD is
# 64 KiB) and its dictionary, if any.
max_len() {
  case "$1" in
    config) echo 65536 ;;
    h1_response) echo 70000 ;;
    *) echo 4096 ;;
  esac
}

cargo fuzz build --sanitizer none

failed=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
  # Value profile: comparisons guide the search to the bytes that make them equal (it found
  # the chunked decoder's 4096-byte line boundary, which edge coverage alone did not in 13 min).
  args=(-max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048
    -use_value_profile=1 -print_final_stats=1)
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
  echo "== $t: ${seconds}s"
  if cargo fuzz run --sanitizer none "$t" "fuzz/work/$t" "fuzz/corpus/$t" -- "${args[@]}" \
    >"fuzz/work/$t.log" 2>&1; then
    grep -E '^#[0-9]+[[:space:]]+DONE' "fuzz/work/$t.log" | tail -1
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
      "fuzz/work/$t.log" | tr '\n' ' '
    echo
  else
    failed+=("$t")
    # The panic message and the saved input.
    grep -E -A3 "panicked at|ERROR: libFuzzer|deadly signal|timeout after" \
      "fuzz/work/$t.log" | head -20
    grep -E "Test unit written to" "fuzz/work/$t.log" || true
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/work/)" >&2
  exit 1
fi
echo "fuzz: ${targets[*]}: no findings in ${seconds}s each"
