"""cloudpickle for Serve's payloads (deployments, ASGI apps, handle calls and results), with thread locks
pickled as new unlocked locks, as Ray's Serve registers them: FastAPI apps hold a threading.Lock, and an app is
pickled before it serves any request, so a lock carries nothing worth sending. Thread-safe."""

import collections
import io
import threading

import cloudpickle


def _lock():
    return threading.Lock()


def _rlock():
    return threading.RLock()


class _Pickler(cloudpickle.CloudPickler):
    dispatch_table = collections.ChainMap({type(threading.Lock()): lambda lock: (_lock, ()),
                                           type(threading.RLock()): lambda lock: (_rlock, ())},
                                          cloudpickle.CloudPickler.dispatch_table)


def dumps(obj) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(obj)
    return out.getvalue()


loads = cloudpickle.loads
