#!/usr/bin/env bash
# Builds the libFuzzer targets (docs/fuzzing.md) in a clang build directory of their own and runs each for a while,
# two at a time, from its seed corpus in fuzz/corpus/<target>/. Exits non-zero, naming the targets, when one crashed,
# broke a property, hit a sanitizer report, timed out or ran out of memory; the input is left as an artifact.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh zip_fuzz jobs_http_fuzz
#
# Settings (environment):
#   BUILD_DIR      the clang build directory (default: build-fuzz in the repository)
#   FUZZ_SECONDS   how long each target runs (default 60)
#   FUZZ_PARALLEL  how many targets run at once (default 2, at most 2)
#   JOBS           ninja's parallelism for the build (default: the number of CPUs)
# Arguments: target names to build and run (default: every *_fuzz target the build declares).
#
# What a run leaves under $BUILD_DIR/fuzz/: corpus/<target>/ (what the fuzzer learned, reused by the next run; the
# seeds in fuzz/corpus/ are only read), logs/<target>.log, and artifacts/<target>/ (crash-*, timeout-*, oom-*,
# leak-* inputs). Replay an artifact with `$BUILD_DIR/bin/<target> <artifact>`.
#
# Installs nothing: it says what to install when clang, its fuzzer runtime, cmake or ninja is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
build_dir=${BUILD_DIR:-$repo/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
parallel=${FUZZ_PARALLEL:-2}
jobs=${JOBS:-$(nproc)}
if ((parallel < 1)); then parallel=1; fi
if ((parallel > 2)); then parallel=2; fi

die() {
  echo "fuzz.sh: $*" >&2
  exit 2
}

# --- Tools -----------------------------------------------------------------------------------------------------------
missing=()
command -v cmake > /dev/null || missing+=(cmake)
command -v ninja > /dev/null || missing+=(ninja-build)
if ! command -v clang++ > /dev/null; then
  missing+=(clang libclang-rt-14-dev)
else
  clang_major=$(clang++ -dumpversion | cut -d. -f1)
  probe_dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    > "$probe_dir/probe.cc"
  if ! clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" > /dev/null 2>&1; then
    missing+=("libclang-rt-${clang_major}-dev")
  fi
  rm -rf "$probe_dir"
fi
if ((${#missing[@]} > 0)); then
  echo "fuzz.sh: missing ${missing[*]}. On Debian 12 install them with:" >&2
  echo "  apt-get install -y ${missing[*]}" >&2
  exit 2
fi

# --- Build -----------------------------------------------------------------------------------------------------------
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null \
  || die "cmake could not configure $build_dir"
if (($# > 0)); then
  targets=("$@")
else
  mapfile -t targets < <(ninja -C "$build_dir" -t targets all | sed -n 's/^\([A-Za-z0-9_]*_fuzz\): phony$/\1/p' |
    grep -v '^cmake_' | sort)
fi
((${#targets[@]} > 0)) || die "the build declares no *_fuzz targets (is the compiler clang?)"

echo "fuzz.sh: building ${targets[*]} in $build_dir"
build_log="$build_dir/fuzz/build.log"
mkdir -p "$build_dir/fuzz"
build_start=$(date +%s)
# gold warns about every ASan helper it cannot export; those lines are noise.
if ! ninja -C "$build_dir" -j "$jobs" "${targets[@]}" > "$build_log" 2>&1; then
  grep -v "Cannot export local symbol" "$build_log" | tail -40 >&2
  die "the build failed; the whole log is $build_log"
fi
echo "fuzz.sh: built in $(($(date +%s) - build_start)) s"

# --- Run -------------------------------------------------------------------------------------------------------------
# One target: its own corpus directory (new inputs go there) seeded from fuzz/corpus/<target>/, artifacts and a log.
# A fuzzer that outlives its time by 2 minutes (stuck in one input, or in the report of one) is killed.
run_target() {
  local target=$1
  local corpus="$build_dir/fuzz/corpus/$target" artifacts="$build_dir/fuzz/artifacts/$target/"
  local log="$build_dir/fuzz/logs/$target.log" seeds="$repo/fuzz/corpus/$target"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  local seed_args=()
  if [[ -d $seeds ]]; then
    seed_args=("$seeds")
  else
    echo "fuzz.sh: $target has no seed corpus in fuzz/corpus/$target/" >&2
  fi
  UBSAN_OPTIONS=print_stacktrace=1 timeout -k 10 $((seconds + 120)) \
    "$build_dir/bin/$target" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts" "$corpus" "${seed_args[@]}" > "$log" 2>&1
  echo $? > "$log.rc"
}

report() {
  local target=$1
  local log="$build_dir/fuzz/logs/$target.log"
  local rc
  rc=$(cat "$log.rc" 2> /dev/null || echo 1)
  local runs speed
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [[ $rc == 0 ]]; then
    printf '  %-22s ok      %10s runs  %8s exec/s\n' "$target" "${runs:-?}" "${speed:-?}"
    return 0
  fi
  local why
  local pattern='ERROR: libFuzzer: [a-z-]+|ERROR: (Address|Leak|UndefinedBehavior)Sanitizer: [a-z-]+'
  why=$(grep -m1 -oE "$pattern|SUMMARY: [A-Za-z]+: [a-z-]+" "$log")
  ((rc == 124 || rc == 137)) && why="killed: still running $((seconds + 120)) s after it started"
  printf '  %-22s FAILED  (%s, exit %s)\n' "$target" "${why:-see the log}" "$rc"
  # The report and its stack, from the first error line to the sanitizer's or libFuzzer's summary.
  awk '/runtime error:|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)/ { p = 1 }
       p && n < 40 { print; n++ }
       p && /^SUMMARY/ { exit }' "$log" | sed 's/^/      /'
  echo "      log: $log"
  local artifact
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  if [[ -n $artifact ]]; then
    echo "      artifact: $artifact (replay: $build_dir/bin/$target $artifact)"
    # Small inputs are printed too, so that a failure on another machine (CI) can be replayed here:
    #   base64 -d > crash <<< '...' && build-fuzz/bin/<target> crash
    if [[ -f $artifact ]] && (($(stat -c %s "$artifact") <= 8192)); then
      echo "      artifact as base64: $(base64 -w0 "$artifact")"
    fi
  fi
  return 1
}

echo "fuzz.sh: running ${#targets[@]} targets for ${seconds} s each, ${parallel} at a time"
running=0
for target in "${targets[@]}"; do
  [[ -x $build_dir/bin/$target ]] || die "$build_dir/bin/$target was not built"
  rm -f "$build_dir/fuzz/logs/$target.log.rc"
  run_target "$target" &
  running=$((running + 1))
  if ((running >= parallel)); then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=()
echo "fuzz.sh: results"
for target in "${targets[@]}"; do
  report "$target" || failed+=("$target")
done
if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: every target ran ${seconds} s without a failure"
