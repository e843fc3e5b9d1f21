"""cloudpickle for Serve's payloads (deployments, ASGI apps, handle calls and results), with the reducers ASGI
apps need, as Ray's Serve registers them:

- thread locks pickle as new unlocked locks (FastAPI apps hold a threading.Lock, and an app is pickled before it
  serves any request, so a lock carries nothing worth sending);
- starlette's State (app.state) pickles as the dict it holds (its __getattr__ otherwise recurses while it is
  unpickled).

Thread-safe.
"""

import collections
import io
import threading

import cloudpickle


def _lock():
    return threading.Lock()


def _rlock():
    return threading.RLock()


def _reducers():
    reducers = {type(threading.Lock()): lambda lock: (_lock, ()),
                type(threading.RLock()): lambda lock: (_rlock, ())}
    try:
        from starlette.datastructures import State
    except ImportError:
        return reducers
    reducers[State] = lambda state: (State, (dict(state._state),))
    return reducers


class _Pickler(cloudpickle.CloudPickler):
    dispatch_table = collections.ChainMap(_reducers(), cloudpickle.CloudPickler.dispatch_table)


def dumps(obj) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(obj)
    return out.getvalue()


loads = cloudpickle.loads
