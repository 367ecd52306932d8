#!/usr/bin/env bash
# Debian's Prometheus server, for the tests that scrape `bench run --metrics-port` with it.
#
#   tests/setup/prometheus.sh
#
# Installs the `prometheus` package when it is missing (idempotent), then prints the server's
# path on stdout. The tests run the binary themselves (a temporary config and TSDB, on
# 127.0.0.1) and never start the package's system service. Exits non-zero, with the reason
# on stderr, when it cannot be installed: the test that needs it fails saying so (never a
# skip). Only Debian's mirrors are used.
set -euo pipefail

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  # Other package installs may hold the dpkg lock; wait for it instead of failing.
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2
  fi
}

if ! command -v prometheus >/dev/null 2>&1; then
  echo "prometheus.sh: installing Debian's prometheus" >&2
  if [[ $(id -u) -ne 0 ]]; then
    echo "prometheus.sh: prometheus is missing and installing it needs root (apt-get install prometheus)" >&2
    exit 1
  fi
  apt_install prometheus || { echo "prometheus.sh: apt-get install prometheus failed" >&2; exit 1; }
fi
path=$(command -v prometheus) || { echo "prometheus.sh: prometheus is still not on PATH after installing it" >&2; exit 1; }
"$path" --version >&2 || { echo "prometheus.sh: $path --version failed" >&2; exit 1; }
echo "$path"
