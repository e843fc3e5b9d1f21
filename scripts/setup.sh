#!/usr/bin/env bash
# Installs what torus needs from Debian (once; later runs skip what is present) and builds it into build/.
# Usage: scripts/setup.sh            (build type RelWithDebInfo; BUILD_DIR overrides the folder; TORUS_BENCHMARKS=OFF
#                                    leaves out the C++ benchmarks; TORUS_TARGETS="a b" builds only those targets;
#                                    TORUS_BUILD=OFF installs the packages and builds nothing; WITH_FUZZ=1 adds clang
#                                    for the fuzz targets; WITH_DEV_VENV=0 skips the development venv .venv with Ray,
#                                    the reference of tests/compat and bench/, from scripts/dev-requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libcpp-httplib-dev libyaml-cpp-dev libsqlite3-dev libjemalloc-dev
  zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pytest python3-numpy python3-prometheus-client
  python3-dev pybind11-dev python3-cloudpickle python3-pytest-timeout
)
# PyTorch (Debian's CPU build) for the example training job and the end-to-end tests.
if [ "${WITH_TORCH:-1}" = 1 ]; then packages+=(python3-torch); fi
# The Kubernetes API's models, against which the tests check every object the kubernetes provider sends and every
# manifest in deploy/ (no API server runs here).
packages+=(python3-kubernetes)
# The development venv (below) is made with Debian's venv module.
if [ "${WITH_DEV_VENV:-1}" = 1 ]; then packages+=(python3-venv); fi
# etcd, for the head's journal in etcd (`--state-store etcd://...`) and its tests; iproute2 for `torus up --netns`.
packages+=(etcd-server iproute2)
# The fuzz targets (scripts/fuzz.sh, which scripts/test.sh runs) need clang and its libFuzzer runtime; the
# thread-safety analysis (scripts/check_thread_safety.py, which it runs too) clang alone.
if [ "${WITH_FUZZ:-0}" = 1 ]; then packages+=(clang libclang-rt-dev); fi
if [ "${WITH_THREAD_SAFETY:-0}" = 1 ]; then packages+=(clang); fi
# Headless Chromium and Node.js for the dashboard's browser test (tests/browser/). A Node.js from elsewhere that
# already brings npm is kept: Debian's npm package would conflict with it.
if [ "${WITH_BROWSER:-1}" = 1 ]; then
  packages+=(chromium)
  command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The browser test's node_modules, from the lock file; again only when the lock changed since the last install.
if [ "${WITH_BROWSER:-1}" = 1 ] && command -v npm >/dev/null 2>&1; then
  lock_sum="$(sha256sum tests/browser/package-lock.json | cut -d' ' -f1)"
  stamp=tests/browser/node_modules/.torus-lock-sha256
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
    echo "setup: npm ci --prefix tests/browser"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
    echo "$lock_sum" > "$stamp"
  fi
fi

# The development venv: Debian's python3 with its packages (--system-site-packages) plus what Debian lacks, pinned in
# scripts/dev-requirements.txt; installed again only when that file changed.
if [ "${WITH_DEV_VENV:-1}" = 1 ]; then
  venv="${TORUS_DEV_VENV:-.venv}"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  req_sum="$(sha256sum scripts/dev-requirements.txt | cut -d' ' -f1)"
  if [ "$(cat "$venv/.torus-requirements-sha256" 2>/dev/null)" != "$req_sum" ]; then
    echo "setup: pip install -r scripts/dev-requirements.txt into $venv"
    # Debian's numpy stays the one (Debian's torch is built against it): pip keeps what satisfies the constraint.
    constraints="$(mktemp)"
    /usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' > "$constraints"
    # llama-cpp-python compiles llama.cpp: for any x86-64 (not only this CPU), without its tests and examples.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
      "$venv/bin/pip" install -q --disable-pip-version-check -c "$constraints" -r scripts/dev-requirements.txt
    rm -f "$constraints"
    echo "$req_sum" > "$venv/.torus-requirements-sha256"
  fi
fi

if [ "${TORUS_BUILD:-ON}" = OFF ]; then exit 0; fi

build_dir="${BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DTORUS_BENCHMARKS="${TORUS_BENCHMARKS:-ON}" >/dev/null
# shellcheck disable=SC2086  # TORUS_TARGETS is a list of target names
ninja -C "$build_dir" -j "$(nproc)" ${TORUS_TARGETS:-}
echo "setup: built into $build_dir/bin"

# `import torus` for Debian's python3: the package (python/) and its compiled core (<build>/python) on its path.
site_dir="$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')"
pth_line="$(pwd)/python
$(cd "$build_dir" && pwd)/python"
if [ "$(cat "$site_dir/torus.pth" 2>/dev/null)" != "$pth_line" ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd mkdir -p "$site_dir"
  printf '%s\n' "$pth_line" | $sudo_cmd tee "$site_dir/torus.pth" >/dev/null
  echo "setup: $site_dir/torus.pth points /usr/bin/python3 at $(pwd)/python"
fi
