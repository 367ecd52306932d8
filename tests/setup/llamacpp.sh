#!/usr/bin/env bash
# Builds llama.cpp's own HTTP server (llama-server, C++, CPU only) from the llama.cpp sources
# vendored in PyPI's llama-cpp-python sdist, writes the tiny GGUF model the llama.cpp tests
# serve (tests/llamacpp/make_gguf.py, no download), and prints the server binary's path on
# stdout.
#
# Idempotent and safe to run concurrently: every step checks what is already there, a stamp
# holding this script's and make_gguf.py's hash makes a repeat run (or a CI run on a fresh
# clone on the same machine) return at once, and a lock serialises two runs that start
# together. Everything lives outside the clone so it survives `git clean` and is shared by
# every checkout:
#
#   $home/sdist/llama_cpp_python-0.3.36.tar.gz   the sdist, sha256-checked
#   $home/0.3.36/bin/llama-server                the server (llama and ggml linked in statically)
#   $home/0.3.36/models/tiny-llama.gguf          the model: ../models/ from the binary
#   $home/0.3.36/gguf-py/                        llama.cpp's gguf-py, which writes the model
#   $home/venv/                                  numpy and pyyaml for make_gguf.py
#   $home/setup.log                              the last run's log (its tail is shown on failure)
#
#   BENCH_LLAMACPP_HOME   where all that lives (default: ${XDG_CACHE_HOME:-~/.cache}/bench/llamacpp)
#   BENCH_LLAMACPP_JOBS   parallel compile jobs (default: the number of CPUs)
#   PYTHON                the interpreter the venv is made from (default: python3)
set -euo pipefail

readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
# Observed when this script was written (pip download, 2026-12-03); a different file is refused.
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# The llama.cpp inside it: the sdist's CHANGELOG ("update llama.cpp to
# ggml-org/llama.cpp@0c1e57098") and its vendored .git HEAD (0c1e57098bba43ac...). That commit
# is llama.cpp's release b11312. The sdist's .git is a depth-1 clone, from which CMake would
# derive build number 1, so both are given to CMake: the server reports b11312-0c1e57098, as
# that release's own binaries do.
readonly LLAMA_CPP_COMMIT=0c1e57098
readonly LLAMA_CPP_BUILD_NUMBER=11312
readonly NUMPY_VERSION=2.4.6 PYYAML_VERSION=6.0.3

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
make_gguf=$here/../llamacpp/make_gguf.py
home=${BENCH_LLAMACPP_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/bench/llamacpp}
sdist=$home/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
prefix=$home/$LLAMA_CPP_PYTHON_VERSION
server=$prefix/bin/llama-server
model=$prefix/models/tiny-llama.gguf
venv=$home/venv
py=$venv/bin/python
src=$home/src-$LLAMA_CPP_PYTHON_VERSION
llama_src=$src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
build=$home/build-$LLAMA_CPP_PYTHON_VERSION
stamp=$prefix/.bench-ready
log=$home/setup.log
recipe=$(cat "${BASH_SOURCE[0]}" "$make_gguf" | sha256sum | cut -c1-16)
# CPU only, no network at build or run time: no CURL or OpenSSL (the server only listens on
# plain HTTP), no web UI (the prebuilt one is a download), portable x86-64 code (AVX2 and
# below, not -march=native: the binary may move to another machine of the same kind), static
# libllama/libggml so the binary is all there is.
cmake_flags=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DGGML_NATIVE=OFF
    -DLLAMA_CURL=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    "-DLLAMA_BUILD_NUMBER=$LLAMA_CPP_BUILD_NUMBER"
    "-DLLAMA_BUILD_COMMIT=$LLAMA_CPP_COMMIT"
)
build_recipe=$(printf '%s\n' "$SDIST_SHA256" "${cmake_flags[@]}" | sha256sum | cut -c1-16)

mkdir -p "$home"
exec 9>"$home/.setup.lock"
flock 9

if [[ -f $stamp && $(<"$stamp") == "$recipe" && -x $server && -f $model ]]; then
    echo "$server"
    exit 0
fi

started=$(date +%s)
rm -f "$stamp"
: >"$log"
# Compiler and pip output goes to the log; only its tail comes out when a step fails.
run() {
    if ! "$@" >>"$log" 2>&1; then
        echo "llama.cpp set-up failed: $*" >&2
        tail -n 30 "$log" >&2
        echo "full log: $log" >&2
        exit 1
    fi
}
sha256() { sha256sum "$1" | cut -d' ' -f1; }
installed() { "$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null; }

# 1. The model maker's venv (its pip also fetches the sdist).
if [[ ! -x $py ]]; then
    echo "llamacpp: creating $venv" >&2
    run "${PYTHON:-python3}" -m venv "$venv"
fi
if [[ $(installed numpy) != "$NUMPY_VERSION" || $(installed pyyaml) != "$PYYAML_VERSION" ]]; then
    run "$py" -m pip install --disable-pip-version-check "numpy==$NUMPY_VERSION" "pyyaml==$PYYAML_VERSION"
fi

# 2. The sdist, checked against the pinned hash (also when it was already there).
if [[ ! -f $sdist || $(sha256 "$sdist") != "$SDIST_SHA256" ]]; then
    echo "llamacpp: downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist, 77 MB)" >&2
    rm -f "$sdist"
    mkdir -p "${sdist%/*}"
    run "$py" -m pip download --disable-pip-version-check --no-deps --no-binary :all: \
        --dest "${sdist%/*}" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    got=$(sha256 "$sdist")
    if [[ $got != "$SDIST_SHA256" ]]; then
        echo "llama.cpp set-up failed: $sdist has sha256 $got, expected $SDIST_SHA256" >&2
        rm -f "$sdist"
        exit 1
    fi
fi

extract() {
    if [[ ! -f $src/.extracted ]]; then
        rm -rf "$src"
        mkdir -p "$src"
        run tar -xzf "$sdist" -C "$src"
        touch "$src/.extracted"
    fi
}

# 3. llama-server. A failed build keeps its tree, so the next run resumes it.
if [[ ! -x $server || ! -f $prefix/bin/.build-recipe || $(<"$prefix/bin/.build-recipe") != "$build_recipe" ]]; then
    extract
    echo "llamacpp: building llama-server (once: 13 min on 2 idle cores, 45 min on busy ones)" >&2
    generator=()
    if command -v ninja >/dev/null; then generator=(-G Ninja); fi
    # The sdist ships llama.cpp's .git; the ceiling keeps git from finding any repository
    # around $home when CMake asks it for the commit.
    export GIT_CEILING_DIRECTORIES=$home
    run cmake -S "$llama_src" -B "$build" "${generator[@]}" "${cmake_flags[@]}"
    run nice -n 10 cmake --build "$build" --target llama-server --parallel "${BENCH_LLAMACPP_JOBS:-$(nproc)}"
    mkdir -p "$prefix/bin"
    cp "$build/bin/llama-server" "$server.tmp"
    mv -f "$server.tmp" "$server"
    echo "$build_recipe" >"$prefix/bin/.build-recipe"
    rm -rf "$build"
fi

# 4. gguf-py from the same sources, so the model's format is the server's.
if [[ ! -f $prefix/gguf-py/gguf/__init__.py ]]; then
    extract
    rm -rf "$prefix/gguf-py.tmp"
    cp -r "$llama_src/gguf-py" "$prefix/gguf-py.tmp"
    mv "$prefix/gguf-py.tmp" "$prefix/gguf-py"
fi
rm -rf "$src"

# 5. The model: deterministic, seconds; rewritten whenever the recipe changed.
echo "llamacpp: writing $model" >&2
run "$py" "$make_gguf" "$prefix/gguf-py" "$model"

run "$server" --version

echo "$recipe" >"$stamp"
echo "llamacpp: ready in $(($(date +%s) - started)) s; $(du -sh "$prefix" | cut -f1) in $prefix" >&2
echo "$server"
