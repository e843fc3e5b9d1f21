"""The call protocol between a DeploymentHandle and a replica, over HTTP through the head's ingress.

    POST <service url>/-/call
    Authorization: Bearer <cluster token>          (the replica refuses a call without it: 401, nothing unpickled)
    Content-Type: application/x-torus-serve-call
    body: cloudpickle of {"method", "args", "kwargs", "stream", "multiplexed_model_id", "request_id"}

A unary answer is 200 with one frame; a streaming one (stream=True) is a chunked answer of frames, one per item as
the generator yields it, then an end frame. A frame is one byte of kind, eight of length (big-endian), and that
many bytes of pickle:

    b"V" value      the method's result, or one item of its generator
    b"E" error      a RayTaskError (its cause the user's exception, with the replica's traceback), or a
                    RayServeException of Serve's own (no such method, a generator called without stream=True)
    b"D" (empty)    the stream ended

Pure functions over bytes; thread-safe.
"""

import struct

from torus.serve._private import pickling

CALL_PATH = "/-/call"
CALL_CONTENT_TYPE = "application/x-torus-serve-call"
RESULT_CONTENT_TYPE = "application/x-torus-serve-result"
VALUE, ERROR, DONE = b"V", b"E", b"D"
_HEADER = struct.Struct(">cQ")


def encode_call(method, args, kwargs, stream, multiplexed_model_id="", request_id="") -> bytes:
    return pickling.dumps({"method": method, "args": tuple(args), "kwargs": dict(kwargs), "stream": bool(stream),
                              "multiplexed_model_id": multiplexed_model_id, "request_id": request_id})


def decode_call(body: bytes) -> dict:
    call = pickling.loads(body)
    if not isinstance(call, dict) or not isinstance(call.get("method"), str):
        raise ValueError("a handle call's body must be a pickled dict with a method name")
    return call


def frame(kind: bytes, obj=None) -> bytes:
    data = b"" if kind == DONE else pickling.dumps(obj)
    return _HEADER.pack(kind, len(data)) + data


def read_frame(read):
    """(kind, object) of the next frame; `read(n)` returns up to n bytes (b"" at the end). EOFError when the answer
    ends before a whole frame."""
    head = _read_exactly(read, _HEADER.size)
    kind, length = _HEADER.unpack(head)
    data = _read_exactly(read, length) if length else b""
    return kind, (pickling.loads(data) if kind != DONE else None)


def _read_exactly(read, n):
    chunks, left = [], n
    while left:
        chunk = read(left)
        if not chunk:
            raise EOFError(f"the replica's answer ended {left} bytes short of a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
