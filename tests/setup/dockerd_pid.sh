# Sourced by tests/setup/with_docker.sh and tests/setup/docker_stop.sh, so that the two agree on
# which engine is ours. recorded_dockerd_pid prints the pid recorded in $PIDFILE when that pid is
# a live dockerd, and nothing otherwise: a stale record's pid may be another process's by now.
recorded_dockerd_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
        echo "$pid"
    fi
}
