"""ObjectRef.future() and `await ref`: one thread per process waits on every ref a future was asked for and settles
each future with the value (or the error) once its object is ready."""

import concurrent.futures
import threading

from torus._private import serialization as ser
from torus._private import state as _st


class _Waiter:
    """Thread-safe. The thread starts with the first future and ends when none is pending."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = {}  # ref -> [futures]
        self._thread = None
        self._wake = threading.Event()

    def future(self, ref):
        fut = concurrent.futures.Future()
        with self._lock:
            self._pending.setdefault(ref, []).append(fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="torus-ref-futures", daemon=True)
                self._thread.start()
        self._wake.set()
        return fut

    def _run(self):
        while True:
            with self._lock:
                refs = list(self._pending)
                if not refs:
                    self._thread = None
                    return
            state = _st.current()
            if state is None:
                self._fail_all(RuntimeError("torus was shut down while waiting for the object"))
                continue
            self._wake.clear()
            try:
                ready = state.core.wait([(r._id, r._owner) for r in refs], 1, 100)
            except Exception as e:  # noqa: BLE001 - the futures carry it
                self._fail_all(e)
                continue
            for i in ready:
                self._settle(state, refs[i])

    def _settle(self, state, ref):
        with self._lock:
            futures = self._pending.pop(ref, [])
        try:
            [(data, fmt, buffers)] = state.core.get([(ref._id, ref._owner)], -1)
            value, error = ser.value_of(data, fmt, buffers), None
        except BaseException as e:  # noqa: BLE001 - raised where the future is read
            value, error = None, e
        for f in futures:
            if f.set_running_or_notify_cancel():
                if error is not None:
                    f.set_exception(error)
                else:
                    f.set_result(value)

    def _fail_all(self, error):
        with self._lock:
            pending, self._pending = self._pending, {}
        for futures in pending.values():
            for f in futures:
                if f.set_running_or_notify_cancel():
                    f.set_exception(error)


_waiter = _Waiter()


def future_of(ref):
    return _waiter.future(ref)
