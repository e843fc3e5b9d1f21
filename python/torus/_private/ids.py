"""Ray's id types (ray.NodeID, ray.ActorID, ...): a value with binary(), hex(), from_hex(), nil() and is_nil().

torus's ids keep their own forms: node ids are names a person reads (a TPU host's is "<slice>-w<worker>"), job ids
are "driver-<hex>" or a submission id; so an id wraps the bytes torus uses and is not of Ray's fixed size.
`hex()` of a node, job or worker id is that name itself (what get_runtime_context() returns), of an actor, task or
object id the hex of its bytes.
"""


class BaseID:
    _textual = False  # ids that torus spells as names, not bytes

    def __init__(self, id_bytes=b""):
        if isinstance(id_bytes, str):
            id_bytes = id_bytes.encode()
        if not isinstance(id_bytes, (bytes, bytearray)):
            raise TypeError(f"{type(self).__name__} takes bytes, got {type(id_bytes).__name__}")
        self._id = bytes(id_bytes)

    @classmethod
    def from_binary(cls, id_bytes):
        return cls(id_bytes)

    @classmethod
    def from_hex(cls, hex_id):
        if isinstance(hex_id, bytes):
            hex_id = hex_id.decode()
        if cls._textual:
            return cls(hex_id.encode())
        return cls(bytes.fromhex(hex_id))

    @classmethod
    def nil(cls):
        return cls(b"")

    def is_nil(self):
        return not self._id

    def binary(self):
        return self._id

    def hex(self):
        return self._id.decode() if self._textual else self._id.hex()

    def __eq__(self, other):
        return type(other) is type(self) and other._id == self._id

    def __hash__(self):
        return hash((type(self).__name__, self._id))

    def __repr__(self):
        return f"{type(self).__name__}({self.hex()})"

    def __reduce__(self):
        return (type(self), (self._id,))


class UniqueID(BaseID):
    pass


class NodeID(UniqueID):
    _textual = True


class WorkerID(UniqueID):
    _textual = True


class JobID(BaseID):
    _textual = True


class ActorID(BaseID):
    pass


class ActorClassID(UniqueID):
    pass


class FunctionID(UniqueID):
    pass


class TaskID(BaseID):
    pass


class ObjectID(BaseID):
    pass


class PlacementGroupID(BaseID):
    _textual = True
