#!/usr/bin/env bash
# Writes a minimal gtd config for one benchmark target into the harness's run dir, checks it
# with `gtd check`, then execs `gtd run` in the foreground (the harness pins this process, waits
# for the port, and stops the whole process group at the end: this script must not daemonize,
# and after the exec gtd *is* the process the harness started).
#
#   gtd-bench-config.sh --proto tcp|udp|http --port PORT --backends H:P[,H:P...] --run-dir DIR
#                       [--gtd PATH] [--admin IP:PORT] [--region ID] [--access-log VALUE]
#
# run.sh starts it as the gtd target. Without the options, ANCHOR_PORT / ANCHOR_BACKENDS /
# ANCHOR_RUN_DIR are used (the variables an external harness may export).
#
# What it configures (every key: docs/configuration.md):
#   tcp:  one tcp listener on 127.0.0.1:PORT, one group, the backends as round-robin endpoints,
#         idle_timeout long enough for any iperf3 run (the control connection sits idle while
#         the data connection runs).
#   udp:  a udp listener AND a tcp listener on the same port number, both to the same backends:
#         iperf3 -u opens a TCP control connection to the same port as its UDP stream.
#         udp_max_flows is generous (iperf3 uses one flow per test; old ones linger until idle).
#   http: one http listener, round robin over the backends, keepalive = 128 idle connections
#         per endpoint (the default 32 x 3 backends is below wrk's 200 connections: the rest
#         would be closed after each response and opened again).
# Passive failure marking (max_fails) is switched off: a benchmark backend that is briefly
# refused while iperf3 restarts between tests must not be taken out of rotation.
# --access-log sets [log] access (a file, stderr, stdout or off; unset: no [log] table, the log
# is off) and names the config gtd-PROTO-log.toml, so a second gtd can run beside the first.
# The admin server listens on 127.0.0.1:0 by default (an ephemeral port: never one of the
# harness's fixed ports); gtd logs the address it got.
#
# Environment: GTD_BIN (gtd binary, instead of --gtd), RUST_LOG (gtd's log filter; default
# "info", use "debug" to see every connection and flow).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; }
die() { echo "gtd-bench-config: $*" >&2; exit 2; }

proto="" port="${ANCHOR_PORT:-}" backends="${ANCHOR_BACKENDS:-${ANCHOR_BACKEND:-}}"
run_dir="${ANCHOR_RUN_DIR:-}" gtd="${GTD_BIN:-}" admin="127.0.0.1:0" region="cn-beijing" access=""
while (($#)); do
  case "$1" in
    --proto) proto="${2:-}"; shift 2 ;;
    --port) port="${2:-}"; shift 2 ;;
    --backends) backends="${2:-}"; shift 2 ;;
    --run-dir) run_dir="${2:-}"; shift 2 ;;
    --gtd) gtd="${2:-}"; shift 2 ;;
    --admin) admin="${2:-}"; shift 2 ;;
    --region) region="${2:-}"; shift 2 ;;
    --access-log) access="${2:-}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage; die "unknown argument '$1'" ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
catalog="$repo/regions/catalog.toml"
if [[ -z "$gtd" ]]; then
  gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd"
fi

[[ "$proto" =~ ^(tcp|udp|http)$ ]] || die "--proto must be tcp, udp or http (got '$proto')"
if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then die "--port: bad port '$port'"; fi
[[ -n "$backends" ]] || die "--backends is empty"
[[ -n "$run_dir" && -d "$run_dir" ]] || die "--run-dir '$run_dir' is not a directory"
[[ -x "$gtd" ]] || die "no gtd binary at '$gtd' (cargo build --profile dist --bin gtd, or --gtd PATH)"
[[ -f "$catalog" ]] || die "no region catalogue at $catalog"

# One group with every backend as an endpoint.
group() { # LISTENER-PROTO
  printf '\n  [[listener.group]]\n  name = "bench"\n  region = "%s"\n  balance = "round_robin"\n' "$region"
  # Idle upstream connections kept per endpoint (default 32): enough for wrk's 200 connections
  # over 3 backends, as HAProxy (http-reuse always, no cap) and nginx (keepalive 64) keep theirs.
  [[ "$1" == http ]] && printf '  keepalive = 128\n'
  local b
  for b in ${backends//,/ }; do
    [[ "$b" =~ ^[^[:space:]\"]+:[0-9]+$ ]] || die "bad backend address '$b'"
    printf '\n    [[listener.group.endpoint]]\n    address = "%s"\n    max_fails = 0\n' "$b"
  done
}

listener() { # NAME PROTO EXTRA-LINES
  printf '\n[[listener]]\nname = "%s"\nprotocol = "%s"\nport = %s\nregions = ["%s"]\n%s' \
    "$1" "$2" "$port" "$region" "$3"
  group "$2"
}

config="$run_dir/gtd-$proto${access:+-log}.toml"
{
  echo "# written by benches/proxy/gtd-bench-config.sh for a $proto benchmark"
  printf 'catalog = "%s"\n\n[admin]\nbind = "%s"\n' "$catalog" "$admin"
  [[ -z "$access" ]] || printf '\n[log]\naccess = "%s"\n' "$access"
  case "$proto" in
    tcp)
      listener bench-tcp tcp $'idle_timeout = "1h"\nconnect_timeout = "5s"\ndrain_timeout = "0s"\n'
      ;;
    udp)
      # iperf3's TCP control connection: same port number, same backend (the iperf3 server).
      listener bench-udp-control tcp $'idle_timeout = "1h"\ndrain_timeout = "0s"\n'
      listener bench-udp udp $'idle_timeout = "60s"\nudp_max_flows = 1048576\ndrain_timeout = "0s"\n'
      ;;
    http)
      listener bench-http http $'drain_timeout = "0s"\n'
      ;;
  esac
  echo
} >"$config"

echo "gtd-bench-config: $config" >&2
"$gtd" check --config "$config" >&2 || die "gtd check rejected $config"

export RUST_LOG="${RUST_LOG:-info}" NO_COLOR="${NO_COLOR:-1}"
exec "$gtd" run --config "$config" --region "$region" --bind 127.0.0.1
