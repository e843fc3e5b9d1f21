"""Custom serializers (as ray.util.serialization): how instances of a type travel between processes.

    register_serializer(Point, serializer=lambda p: (p.x, p.y), deserializer=lambda t: Point(*t))

An instance is then written as deserializer(serializer(instance)): the deserializer travels with the value (pickled
by value when it is not importable), so readers need not register anything. Registration holds in this process
only, as in Ray: a task that returns such values registers the type in its own worker.
"""

from torus._private import serialization as _ser


def register_serializer(cls: type, *, serializer: callable, deserializer: callable):
    """Writes instances of `cls` as `deserializer(serializer(obj))` from now on in this process."""
    def reduce(obj):
        return deserializer, (serializer(obj),)
    _ser.register_reducer(cls, reduce)


def deregister_serializer(cls: type):
    """Forgets the serializer of `cls` (nothing when it has none)."""
    _ser.deregister_reducer(cls)
