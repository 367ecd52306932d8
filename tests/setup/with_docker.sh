#!/usr/bin/env bash
# Run a command (make test's pytest) with a Docker engine up, and leave the engine as it was
# found: one that tests/setup/docker.sh starts here is stopped when the command ends (pass,
# fail or Ctrl-C); one that was running before (ours from an earlier `make docker-up`, or the
# machine's own) stays. The exit status is the command's.
#
# "Before" is read here, before docker.sh runs: a recorded pid that is a live dockerd (a stale
# record's pid may be another process's by now). Reading it after a prerequisite had started
# the engine took every engine for one already running, and a fresh machine's `make test`
# left its dockerd behind.
set -uo pipefail
PIDFILE=${BENCH_DOCKERD_PIDFILE:-/run/bench-dockerd.pid}
here=$(dirname "$0")

# shellcheck source=tests/setup/dockerd_pid.sh
. "$here/dockerd_pid.sh"

if [ -z "$(recorded_dockerd_pid)" ]; then
    trap 'bash "$here/docker_stop.sh"' EXIT
fi
bash "$here/docker.sh" || exit $?
"$@"
