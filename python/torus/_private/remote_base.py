"""What remote functions and actor classes share: their options, `.options(...)`, and their code, pickled once and
named by its hash (workers keep it by that id)."""

import hashlib

from torus._private import serialization as ser


class RemoteBase:
    _kind = "remote function"

    def __init__(self, target, options):
        self._target = target
        self._default_options = options
        self._blob = None
        self._function_id = None
        self._name = f"{target.__module__}.{target.__qualname__}"

    def _shipped(self):
        """What the worker gets (the function itself here; actor classes add their settings)."""
        return self._target

    def _shipped_settings(self):
        return None

    def _code(self):
        if self._blob is None:
            self._blob = ser.dumps(self._shipped())
            self._function_id = hashlib.sha256(self._blob).digest()
        return self._function_id, self._blob

    def bind(self, *args, **kwargs):
        raise NotImplementedError("Ray DAGs (.bind) are not supported by torus; call .remote()")

    def _validate(self, options, in_options):
        raise NotImplementedError

    def options(self, **options):
        """A copy with `options` over these (checked now, as Ray checks them)."""
        self._validate(options, in_options=True)
        merged = dict(self._default_options)
        merged.update(options)
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._default_options = merged
        if copy._shipped_settings() != self._shipped_settings():
            copy._blob, copy._function_id = None, None
        return copy
