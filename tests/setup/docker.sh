#!/usr/bin/env bash
# Make a real Docker engine available: install Debian's docker.io when dockerd is missing,
# start dockerd in the background when none answers, and wait until it does.
# Idempotent. When this script starts dockerd it records the pid in $PIDFILE so that
# tests/setup/docker_stop.sh stops only an engine we started, never someone else's.
set -euo pipefail

PIDFILE=${BENCH_DOCKERD_PIDFILE:-/run/bench-dockerd.pid}
LOGFILE=${BENCH_DOCKERD_LOG:-/var/log/bench-dockerd.log}
WAIT_S=${BENCH_DOCKERD_WAIT_S:-90}
SOCK=${BENCH_DOCKER_SOCK:-/var/run/docker.sock}  # another path only in tests/faults/test_engine_left_as_found.py

say() { echo "docker.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

started=$(date +%s)
if ! command -v dockerd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "dockerd is missing and installing it needs root (apt-get install docker.io)"
    say "installing Debian's docker.io (dockerd is missing)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=900 update -qq
    # The package's maintainer scripts try to start the service; there is no init system
    # here, so that part fails harmlessly and we start dockerd ourselves below.
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends docker.io iptables >/dev/null
    say "installed docker.io in $(( $(date +%s) - started )) s"
fi

if engine_answers; then
    say "engine already running ($(docker version --format '{{.Server.Version}}'))"
    exit 0
fi

if [ -S "$SOCK" ] && ! pgrep -x dockerd >/dev/null; then
    rm -f "$SOCK"  # stale socket from a dockerd that died
fi
if ! pgrep -x dockerd >/dev/null; then
    say "starting dockerd (log: $LOGFILE)"
    # dockerd is a machine's service, as under systemd: it leaves the caller's memory cgroup
    # (a capped test run's) for the root one, so the run's cap neither counts nor kills it.
    (
        for procs in /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/cgroup.procs; do
            if [ -w "$procs" ] && echo "$BASHPID" >"$procs" 2>/dev/null; then break; fi
        done
        exec nohup dockerd >"$LOGFILE" 2>&1
    ) &
    echo $! >"$PIDFILE"
fi

for _ in $(seq 1 "$WAIT_S"); do
    if engine_answers; then
        say "engine up ($(docker version --format '{{.Server.Version}}')) after $(( $(date +%s) - started )) s"
        exit 0
    fi
    if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        rm -f "$PIDFILE"
        die "dockerd exited while starting; last lines of $LOGFILE: $(tail -n 5 "$LOGFILE" | tr '\n' ' ')"
    fi
    sleep 1
done
die "dockerd did not answer within ${WAIT_S} s (see $LOGFILE)"
