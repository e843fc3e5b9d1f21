#!/usr/bin/env bash
# Builds torus with AddressSanitizer and UndefinedBehaviorSanitizer (g++, CMake option TORUS_SANITIZE) in a build
# directory of its own and runs the tests against that build: by default all of them (unit, the Python integration
# suite, malformed_rpc_test, the Python helpers and the browser test). Exits non-zero when a test failed or when any
# process of the run, a daemon or a Python process included, wrote a sanitizer report; it prints the reports' first
# lines and where they are.
#
#   scripts/sanitize.sh                       # every test
#   scripts/sanitize.sh -L unit               # arguments go to ctest: only the unit tests (-LE unit: the others)
#   scripts/sanitize.sh -R WorkerSupervisor   # some tests
#
# Settings (environment):
#   BUILD_DIR   the build directory (default: build-asan in the repository)
#   JOBS        ninja's parallelism (default: the number of CPUs)
#
# Reports: every sanitized process writes its reports to $BUILD_DIR/sanitizer-reports/{asan,ubsan}.<pid> instead of
# its stderr (daemons' stderr goes to session logs no test reads). Leaks are checked at each C++ process's exit;
# tests/sanitizers/lsan.supp names the leaks of system libraries that are not torus's. Python processes get ASan's
# runtime from tests/sanitizers/python/sitecustomize.py (the build puts it on their PYTHONPATH), without leak checks.
#
# Installs the packages (scripts/setup.sh with TORUS_BUILD=OFF); leaves build/ alone.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
build_dir=${BUILD_DIR:-$repo/build-asan}
jobs=${JOBS:-$(nproc)}

TORUS_BUILD=OFF scripts/setup.sh || exit 2

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTORUS_SANITIZE=ON -DTORUS_BENCHMARKS=OFF \
  > /dev/null || { echo "sanitize.sh: cmake could not configure $build_dir" >&2; exit 2; }
echo "sanitize.sh: building $build_dir"
build_start=$(date +%s)
ninja -C "$build_dir" -j "$jobs" || { echo "sanitize.sh: the build failed" >&2; exit 2; }
echo "sanitize.sh: built in $(($(date +%s) - build_start)) s"

reports="$build_dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=0"
export LSAN_OPTIONS="suppressions=$repo/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"

ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$(nproc)" "$@"
tests_rc=$?

# ASan writes a file for warnings too (such as a stack switch it cannot follow): only files with an error count.
mapfile -t found < <(grep -l -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$reports"/* 2> /dev/null)
if ((${#found[@]} > 0)); then
  echo "sanitize.sh: ${#found[@]} sanitizer reports in $reports:" >&2
  for f in "${found[@]}"; do
    echo "  $f" >&2
    grep -m1 -E "ERROR: |runtime error:" "$f" | sed 's/^/      /' >&2
    grep -m3 -E "^    #[0-9]+ .* in (torus|main)" "$f" | sed 's/^/      /' >&2
  done
  exit 1
fi
if ((tests_rc != 0)); then
  echo "sanitize.sh: tests failed (no sanitizer report)" >&2
  exit "$tests_rc"
fi
echo "sanitize.sh: every test passed with no sanitizer report"
