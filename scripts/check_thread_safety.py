#!/usr/bin/python3
"""Checks every lock annotation with clang's thread-safety analysis (-Wthread-safety -Werror).

Each of the project's compile units in <build>/compile_commands.json (the generated protobuf code aside) is parsed
by clang++ with the flags of the main build, without code generation (-fsyntax-only), in parallel. A field marked
ABSL_GUARDED_BY(mu_) read or written without mu_ held, a function marked ABSL_EXCLUSIVE_LOCKS_REQUIRED called
without it, a lock not released: each is an error that names the file and line, and the exit status is 1.

  scripts/check_thread_safety.py [--build build] [--jobs N] [--only REGEX]

--only checks just the units that include a source whose path matches REGEX (e.g. src/torus/core/).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

CLANG = os.environ.get("CLANGXX", "clang++")
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-attributes"]


def clang_args(entry):
    """The unit's g++ command as a clang++ syntax-only check: no output file, no -w (which hides every warning)."""
    args = shlex.split(entry["command"])[1:]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in ("-c", "-w"):
            out.append(a)
    return [CLANG] + FLAGS + out


def sources_of(entry):
    """The sources a unit compiles: a unity batch's includes, or the file itself."""
    path = entry["file"]
    if "/Unity/unity_" not in path:
        return [path]
    with open(path) as f:
        return re.findall(r'#include "([^"]+)"', f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", default="")
    a = parser.parse_args()
    if shutil.which(CLANG) is None:
        sys.exit(f"check_thread_safety: {CLANG} is missing (Debian: apt-get install clang)")
    db = os.path.join(a.build, "compile_commands.json")
    if not os.path.exists(db):
        sys.exit(f"check_thread_safety: {db} is missing: configure the build first (scripts/setup.sh)")
    with open(db) as f:
        entries = [e for e in json.load(f) if "/proto/" not in e["file"]]
    if a.only:
        entries = [e for e in entries if any(re.search(a.only, s) for s in sources_of(e))]

    def check(entry):
        r = subprocess.run(clang_args(entry), cwd=entry["directory"], capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    start, failed = time.monotonic(), 0
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for path, rc, err in pool.map(check, entries):
            if rc != 0:
                failed += 1
                print(f"check_thread_safety: FAILED {path}\n{err}", flush=True)
    print(f"check_thread_safety: {len(entries)} units, {failed} failed, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
