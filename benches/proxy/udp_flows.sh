#!/usr/bin/env bash
# Many UDP clients, one datagram each (the shape of DNS traffic: every query a new flow): how
# many gtd answers, how its flow table holds (flows kept, evicted, endpoint failures) and what
# the flows cost in memory.
#
#   benches/proxy/udp_flows.sh [--gtd PATH] [--clients N] [--max-flows M]
#
# It starts a UDP echo backend (python3) on 127.0.0.1 and gtd with one UDP listener in front of
# it (udp_max_flows = M [65536]), then N [30000] clients, one after another, each from its own
# address in 127.0.0.0/8, send one datagram and wait up to 1 s for the reply; progress every
# 5000. At the end it prints the answers, gtd's flow metrics and its resident and virtual memory.
# Everything listens on loopback; everything it starts it stops by PID; its files live in a
# temporary directory removed at the end. The open files limit decides how many flows gtd
# keeps (3/4 of it, see docs/design.md §6): run it under `ulimit -n` to see the share at work.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
gtd="${CARGO_TARGET_DIR:-$repo/target}/dist/gtd" clients=30000 max_flows=65536
while (($#)); do
  case "$1" in
    --gtd) gtd="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --max-flows) max_flows="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "udp_flows.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$gtd" ]] || { echo "udp_flows.sh: no gtd at $gtd (cargo build --profile dist --bin gtd)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "udp_flows.sh: needs python3" >&2; exit 1; }

dir="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"; }
backend=$(free_port SOCK_DGRAM) listen=$(free_port SOCK_DGRAM) admin=$(free_port SOCK_STREAM)

python3 - "$backend" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("127.0.0.1", int(sys.argv[1])))
while True:
    d, a = s.recvfrom(65536)
    s.sendto(d, a)
EOF
pids+=($!)

cat >"$dir/gtd.toml" <<EOF
catalog = "$repo/regions/catalog.toml"
[admin]
bind = "127.0.0.1:$admin"
[[listener]]
name = "flows"
protocol = "udp"
port = $listen
regions = ["cn-beijing"]
udp_max_flows = $max_flows
  [[listener.group]]
  name = "echo"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "127.0.0.1:$backend"
EOF
"$gtd" run --config "$dir/gtd.toml" --region cn-beijing --bind 127.0.0.1 2>"$dir/gtd.log" &
gtd_pid=$!
pids+=($gtd_pid)
for _ in $(seq 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$admin/status" && break
  sleep 0.1
done
curl -sf -o /dev/null "http://127.0.0.1:$admin/status" || { cat "$dir/gtd.log" >&2; exit 1; }
echo "gtd $gtd, open files limit $(awk '/Max open files/ {print $4}' /proc/$gtd_pid/limits)"

python3 - "$listen" "$clients" <<'EOF'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
answered, t0 = 0, time.time()
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.bind(("127.%d.%d.%d" % (1 + i // 62500 % 250, 1 + i // 250 % 250, 1 + i % 250), 0))
    s.sendto(b"q%d" % i, ("127.0.0.1", port))
    try:
        answered += s.recv(100) == b"q%d" % i
    except OSError:
        pass
    s.close()
    if (i + 1) % 5000 == 0 or i + 1 == n:
        print("%6d clients  %6d answered  %6.0f clients/s" % (i + 1, answered, (i + 1) / (time.time() - t0)), flush=True)
EOF

curl -s "http://127.0.0.1:$admin/metrics" |
  grep -E '^gtd_(udp_flows_active|udp_flows_evicted_total|connect_failures_total|no_route_total)' || true
awk '/^VmRSS|^VmSize/ {printf "gtd %s %.1f MB\n", $1, $2 / 1024}' "/proc/$gtd_pid/status"
grep -E "WARN|ERROR" "$dir/gtd.log" | grep -v "health_check" || true
