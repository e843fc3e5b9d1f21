"""Loads ASan's runtime into every Python process of a sanitizer run (scripts/sanitize.sh), and into nothing else.

A Python process that imports the sanitized `_torus_core` needs ASan's runtime loaded before anything else (and
libstdc++ with it, for the runtime's C++ exception interceptors); /usr/bin/python3 is not built with it. Preloading
it into the whole run does not work either: other programs the tests start (`pgrep`, shells) hang or fail with it.

So sanitize.sh puts this directory first on PYTHONPATH and names the libraries in TORUS_ASAN_PRELOAD. A Python
process started without them executes itself again with LD_PRELOAD set (and leak checks off: the interpreter keeps
memory until exit by design); once they are loaded, the process puts its environment back as it was, so that what
it starts inherits no preload and the run's own ASAN_OPTIONS. A Python child comes here again.
"""

import os
import sys

_PRELOAD = os.environ.get("TORUS_ASAN_PRELOAD", "")
_SAVED_OPTIONS = "TORUS_ASAN_SAVED_OPTIONS"


def _python_preload():
    with open("/proc/self/cmdline", "rb") as f:
        argv = [a.decode(errors="surrogateescape") for a in f.read().split(b"\0")[:-1]]
    env = dict(os.environ)
    env["LD_PRELOAD"] = _PRELOAD
    env[_SAVED_OPTIONS] = env.get("ASAN_OPTIONS", "")
    options = [o for o in env[_SAVED_OPTIONS].split(":") if o and not o.startswith("detect_leaks=")]
    env["ASAN_OPTIONS"] = ":".join(options + ["detect_leaks=0"])
    os.execve(sys.executable, argv, env)


if _PRELOAD:
    if os.environ.get("LD_PRELOAD") != _PRELOAD:
        sys.stdout.flush()
        sys.stderr.flush()
        _python_preload()
    else:
        os.environ.pop("LD_PRELOAD")
        os.environ["ASAN_OPTIONS"] = os.environ.pop(_SAVED_OPTIONS, "")
