#!/usr/bin/env bash
# Sets everything up and runs every test: unit (GoogleTest), integration (real head and agents on loopback), and
# every fuzz target for 20 s (scripts/fuzz.sh: libFuzzer with ASan and UBSan, built with clang in build-fuzz/;
# FUZZ_SECONDS sets another time).
# The fuzzers run beside ctest at the lowest CPU priority (nice 19), on the CPU time the integration suites, which
# mostly wait on processes and sockets, leave idle. WITH_FUZZ=0 leaves them out; arguments go to ctest.
# Beside them too, at the same priority: clang's thread-safety analysis of every compile unit
# (scripts/check_thread_safety.py: a lock annotation broken fails the run). WITH_THREAD_SAFETY=0 leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
with_fuzz="${WITH_FUZZ:-1}"
# No test runs the C++ benchmarks: the test run does not build them.
TORUS_BENCHMARKS="${TORUS_BENCHMARKS:-OFF}" WITH_FUZZ="$with_fuzz" WITH_THREAD_SAFETY="${WITH_THREAD_SAFETY:-1}" \
  scripts/setup.sh
build_dir="${BUILD_DIR:-build}"

fuzz_pid=""
if [ "$with_fuzz" = 1 ]; then
  fuzz_log="$build_dir/fuzz.log"
  # A session of its own, so that an interrupted test run stops the fuzzers with it.
  FUZZ_SECONDS="${FUZZ_SECONDS:-20}" setsid nice -n 19 scripts/fuzz.sh > "$fuzz_log" 2>&1 &
  fuzz_pid=$!
  echo "test: fuzzing beside the tests (log: $fuzz_log)"
fi

tsa_pid=""
if [ "${WITH_THREAD_SAFETY:-1}" = 1 ]; then
  tsa_log="$build_dir/thread_safety.log"
  setsid nice -n 19 scripts/check_thread_safety.py --build "$build_dir" --jobs 1 > "$tsa_log" 2>&1 &
  tsa_pid=$!
  echo "test: checking lock annotations beside the tests (log: $tsa_log)"
fi

# An interrupted run stops what it started beside the tests.
trap '[ -z "$fuzz_pid" ] || kill -TERM -- "-$fuzz_pid" 2>/dev/null; [ -z "$tsa_pid" ] || kill -TERM -- "-$tsa_pid" 2>/dev/null' EXIT

rc=0
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@" || rc=$?

if [ -n "$fuzz_pid" ]; then
  fuzz_rc=0
  wait "$fuzz_pid" || fuzz_rc=$?
  grep -E "^fuzz.sh: (built|running|every|FAILED)|^  [a-z_]+_fuzz " "$fuzz_log" || tail -20 "$fuzz_log"
  if [ "$fuzz_rc" != 0 ]; then
    echo "test: the fuzz targets failed (exit $fuzz_rc); the whole log is $fuzz_log" >&2
    # The results with each failure's report, stack and input; the log's end when it has none.
    sed -n '/^fuzz.sh: results/,$p' "$fuzz_log" | grep -q . && sed -n '/^fuzz.sh: results/,$p' "$fuzz_log" >&2 \
      || tail -40 "$fuzz_log" >&2
    [ "$rc" != 0 ] || rc=$fuzz_rc
  fi
fi
if [ -n "$tsa_pid" ]; then
  tsa_rc=0
  wait "$tsa_pid" || tsa_rc=$?
  tail -1 "$tsa_log"
  if [ "$tsa_rc" != 0 ]; then
    echo "test: clang's thread-safety analysis failed (exit $tsa_rc):" >&2
    head -80 "$tsa_log" >&2
    [ "$rc" != 0 ] || rc=$tsa_rc
  fi
fi
trap - EXIT
exit "$rc"
