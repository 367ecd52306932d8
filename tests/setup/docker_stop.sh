#!/usr/bin/env bash
# Stop the dockerd that tests/setup/docker.sh started, and only that one.
set -euo pipefail
PIDFILE=${BENCH_DOCKERD_PIDFILE:-/run/bench-dockerd.pid}
if [ ! -f "$PIDFILE" ]; then
    echo "docker_stop.sh: no dockerd started by docker.sh; nothing to stop" >&2
    exit 0
fi
# shellcheck source=tests/setup/dockerd_pid.sh
. "$(dirname "$0")/dockerd_pid.sh"
pid=$(recorded_dockerd_pid)
if [ -n "$pid" ]; then
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    echo "docker_stop.sh: stopped dockerd (pid $pid)" >&2
fi
rm -f "$PIDFILE"
