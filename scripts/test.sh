#!/usr/bin/env bash
# Sets everything up and runs every test: unit (GoogleTest), integration (real head and agents on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
# No test runs the C++ benchmarks: the test run does not build them.
TORUS_BENCHMARKS="${TORUS_BENCHMARKS:-OFF}" scripts/setup.sh
build_dir="${BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
