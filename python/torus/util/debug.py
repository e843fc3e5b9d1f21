"""log_once and its switches (as ray.util.debug): a way to log something once per process.

    if log_once("slow_disk"):
        logger.warning("the disk is slow")

disable_log_once_globally(): log_once is False from then on. enable_periodic_logging(): every key may log again
about once a minute (the call that notices the minute has passed forgets every key, and says False).

Thread-safety: the keys are guarded by a lock.
"""

import threading
import time
from typing import Optional

_PERIOD_S = 60.0

_lock = threading.Lock()
_seen = set()
_disabled = False
_periodic = False
_last_true = 0.0


def log_once(key: str) -> bool:
    """True the first time this process asks with `key` (see the module's switches), False afterwards."""
    global _last_true
    with _lock:
        if _disabled:
            return False
        now = time.time()
        if key not in _seen:
            _seen.add(key)
            _last_true = now
            return True
        if _periodic and now - _last_true > _PERIOD_S:
            _seen.clear()
            _last_true = now
        return False


def disable_log_once_globally():
    """log_once() says False in this process from now on."""
    global _disabled
    _disabled = True


def enable_periodic_logging():
    """log_once() may say True again for a key about once a minute."""
    global _periodic
    _periodic = True


def reset_log_once(key: Optional[str] = None):
    """Forgets `key` (every key when None), so that log_once says True for it again."""
    with _lock:
        if key is None:
            _seen.clear()
        else:
            _seen.discard(key)
