# Sourced by the image scripts: can this machine build from the public registries?
# registry_problem prints why not (one line) and returns 1, or returns 0 when it can.

registry_problem() {
    # Docker Hub answers 401 to an anonymous /v2/ probe when it is reachable.
    if ! python3 - <<'PY' 2>/dev/null
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen("https://registry-1.docker.io/v2/", timeout=8)
except urllib.error.HTTPError:
    sys.exit(0)
except OSError:
    sys.exit(1)
PY
    then
        echo "the container registry (registry-1.docker.io) is unreachable from this machine"
        return 1
    fi
    if ! docker buildx version >/dev/null 2>&1; then
        echo "docker buildx is not installed (the Dockerfile needs BuildKit with buildx: install docker-buildx-plugin)"
        return 1
    fi
    return 0
}
