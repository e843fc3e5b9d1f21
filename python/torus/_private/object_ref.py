"""ObjectRef: a reference to a value in the cluster (the result of a task or of put), counted by its owner's core
worker while this process holds it."""

from torus._private import serialization as ser
from torus._private import state as _st


class ObjectRef:
    """A reference to a value in the cluster: the result of a task or of torus.put."""

    __slots__ = ("_id", "_owner", "_core", "__weakref__")

    def __init__(self, object_id, owner, _add_ref=True):
        self._id = object_id
        self._owner = owner
        self._core = None
        state = _st.current()
        if _add_ref and state is not None:
            self._core = state.core
            self._core.add_ref(object_id)

    def __del__(self):
        core = self._core
        state = _st.current()
        if core is not None and state is not None and state.core is core:
            try:
                core.remove_ref(self._id)
            except Exception:
                pass

    @classmethod
    def nil(cls):
        """The nil ref (what a generator's next with a timeout gives when nothing came in time)."""
        return cls(b"", "", _add_ref=False)

    def is_nil(self):
        return not self._id

    def binary(self):
        return self._id

    def hex(self):
        return self._id.hex()

    def task_id(self):
        """The id of the task that returns this object (its first 16 bytes)."""
        return self._id[:16]

    def owner_address(self):
        return self._owner

    def future(self):
        """A concurrent.futures.Future of this object's value (its error, if the task failed)."""
        from torus._private.futures import future_of
        return future_of(self)

    def __await__(self):
        import asyncio
        return asyncio.wrap_future(self.future()).__await__()

    def as_future(self):
        """An asyncio future of this object's value, on the running event loop."""
        import asyncio
        return asyncio.wrap_future(self.future())

    def __reduce__(self):
        if not ser.note_contained(self._id, self._owner):
            # Pickled outside torus's values (nothing tracks where it goes): its owner keeps it for good.
            state = _st.current()
            if state is not None and self._owner == state.core.address:
                state.core.mark_escaped(self._id)
        return (_rebuild_ref, (self._id, self._owner))

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self):
        return hash(self._id)

    def __repr__(self):
        return f"ObjectRef({self.hex()})"


def _rebuild_ref(object_id, owner):
    ref = ObjectRef(object_id, owner)
    state = _st.current()
    if state is not None and owner != state.core.address:
        ser.note_borrowed(object_id, owner)
    return ref


def _register_borrowed(refs):
    state = _st.current()
    if state is not None:
        state.core.borrow(refs)


ser._on_borrowed = _register_borrowed
