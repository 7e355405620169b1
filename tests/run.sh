#!/usr/bin/env bash
# The README's test command: on Debian or Ubuntu, installs the servers and tools the tests
# start (with sudo when not root, only what is missing), then runs the whole suite. Arguments
# go to `cargo test` (e.g. `tests/run.sh --test http`). `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# What each package is for:
# - nginx, haproxy: tests/balance_nginx.rs and the differential HTTP tests run the real ones.
# - etcd-server, etcd-client: the fleet tests start a three-member cluster on loopback, and
#   set its users up with etcdctl.
# - chromium: tests/dashboard/ loads the admin dashboard in a real, headless browser.
# - prometheus: its promtool lints the /metrics exposition and the alert rules.
# - iproute2: ss, for the listen backlog the kernel reports.
# - ca-certificates: a group's tls without `ca` verifies endpoints with the system bundle.
# - systemd: systemd-analyze verifies deploy/systemd's unit.
# - make: the build of jemalloc, the gtd binary's allocator (a C compiler comes with Rust's setup).
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have nginx || need+=(nginx)
have haproxy || need+=(haproxy)
have etcd || need+=(etcd-server)
have etcdctl || need+=(etcd-client)
have chromium || have chromium-browser || need+=(chromium)
have promtool || need+=(prometheus)
have ss || need+=(iproute2)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
have systemd-analyze || need+=(systemd)
have make || need+=(make)

if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "tests/run.sh: missing ${need[*]}, and this is not a Debian/Ubuntu machine: install them, then run cargo test" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "tests/run.sh: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # Ubuntu ships Chromium as a snap; its apt package is chromium-browser.
  if ! $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"; then
    need=("${need[@]/#chromium/chromium-browser}")
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
  # Installing nginx, haproxy or etcd-server may start them as services on the default
  # ports; the tests start their own on free ports and need none of these.
fi

exec cargo test "$@"
