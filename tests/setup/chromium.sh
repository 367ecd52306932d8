#!/usr/bin/env bash
# Debian's chromium, for the tests that render report.html in a real browser (headless).
#
#   tests/setup/chromium.sh
#
# Installs the `chromium` package when it is missing (idempotent: nothing to do when it is
# there), then prints the browser's path on stdout. Exits non-zero, with the reason on
# stderr, when it cannot be installed: the test that needs it fails saying so (never a skip).
# Only Debian's mirrors are used; nothing is downloaded outside apt.
set -euo pipefail

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  # Other package installs may hold the dpkg lock; wait for it instead of failing.
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2
  fi
}

if ! command -v chromium >/dev/null 2>&1; then
  echo "chromium.sh: installing Debian's chromium" >&2
  if [[ $(id -u) -ne 0 ]]; then
    echo "chromium.sh: chromium is missing and installing it needs root (apt-get install chromium)" >&2
    exit 1
  fi
  apt_install chromium || { echo "chromium.sh: apt-get install chromium failed" >&2; exit 1; }
fi
path=$(command -v chromium) || { echo "chromium.sh: chromium is still not on PATH after installing it" >&2; exit 1; }
"$path" --version >&2 || { echo "chromium.sh: $path --version failed" >&2; exit 1; }
echo "$path"
