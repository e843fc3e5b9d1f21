"""Arguments of a task or actor call as the core takes them: positional arguments (refs as refs), then the keyword
arguments as one value; large values go to this node's object store."""

from torus import exceptions
from torus._private import serialization as ser
from torus._private import state as _st
from torus._private.object_ref import ObjectRef


def wire_args(args, kwargs, keep_refs=False, keep_nested=False):
    """Positional arguments (refs as refs), then the keyword arguments as one value.

    A ref passed as an argument reaches the worker as its value, so the submitted call holds the object only until
    it ends (the core worker counts it); the refs inside an argument's value are held until then too, and the worker
    registers as their borrower. `keep_refs` (an actor's constructor, which runs again on each restart) keeps the
    objects this process owns for as long as it lives; `keep_nested` keeps those inside values so (a constructor)."""
    wire = [_arg(a, keep_refs, keep_nested) for a in args]
    wire.append(_value_arg(kwargs, keep_nested))
    return wire


def _arg(a, keep_refs, keep_nested):
    if isinstance(a, ObjectRef):
        state = _st.current()
        if keep_refs and state is not None and a._owner == state.core.address:
            state.core.mark_escaped(a._id)
        return ("r", a._id, a._owner)
    return _value_arg(a, keep_nested)


def _value_arg(value, keep_nested=False):
    """A value passed to a task or actor call: inline when small; a large one (numpy arrays and the like) is put in
    this node's object store as an object that the submitted call holds until it finishes, and its worker maps it."""
    data, buffers, contained = ser.dumps_oob(value)
    state = _st.current()
    if keep_nested and state is not None:
        for object_id, owner in contained:
            if owner == state.core.address:
                state.core.mark_escaped(object_id)
    hold = [] if keep_nested else contained
    if state is not None and len(data) + sum(b.nbytes for b in buffers) >= _st.import_core().INLINE_MAX_BYTES:
        try:
            object_id = state.core.put(data, ser.FORMAT_PICKLE, buffers, hold)
        except BufferError as e:
            raise exceptions.ObjectStoreFullError(str(e)) from None
        return ("r", object_id, state.core.address)
    if buffers:
        data = ser.dumps_oob(value, in_band=True)[0]  # small arrays travel in band
    return ("v", data, ser.FORMAT_PICKLE, hold)
