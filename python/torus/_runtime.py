"""The process's connection to a torus cluster: one core worker (C++, module _torus_core) per process."""

import atexit
import contextvars
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from torus import exceptions
from torus import _serialization as ser

_lock = threading.RLock()
# (task id, name) of the task or actor call running in this thread or coroutine.
current_task = contextvars.ContextVar("torus_current_task", default=None)
_state = None  # the _State of this process once initialized


def _import_core():
    try:
        import _torus_core
        return _torus_core
    except ImportError:
        pass
    # Beside a source tree: python/torus/../../build/python.
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "python")
    if os.path.isdir(candidate) and candidate not in sys.path:
        sys.path.append(candidate)
    import _torus_core
    return _torus_core


class _State:
    def __init__(self, core, job_id, node_id, head_address, token, local_cluster=None, is_worker=False):
        self.core = core
        self.job_id = job_id
        self.node_id = node_id
        self.head_address = head_address
        self.token = token
        self.local_cluster = local_cluster  # (torus binary, TORUS_TEMP_DIR) of a cluster this process started
        self.is_worker = is_worker
        self.actor_id = None  # in an actor's worker
        self.actor_resources = {}  # in an actor's worker: what it holds
        self.printer = None   # (thread, stop event) printing the workers' output
        self.http_address = None  # the head's HTTP API, once asked for (http_address())
        # Where actor names are looked up and registered: init(namespace=...), else the driver's (its workers get
        # it as TORUS_NAMESPACE), else one of this job's own (as Ray's anonymous namespace).
        self.namespace = os.environ.get("TORUS_NAMESPACE") or f"anonymous-{job_id}"


def _state_or_init():
    with _lock:
        if _state is None:
            init()
        return _state


def _temp_root():
    return os.environ.get("TORUS_TEMP_DIR", "/tmp/torus")


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _session_endpoint(root):
    session = os.path.join(root, "session_latest")
    try:
        endpoint = _read(os.path.join(session, "head_address")), _read(os.path.join(session, "token"))
    except OSError:
        return None
    return endpoint


def _use_session_ca(root):
    """A head with TLS leaves the cluster CA in its session: the core's channels (TORUS_TLS_CA) check the head and
    agents against it. True when this set TORUS_TLS_CA."""
    ca = os.path.join(root, "session_latest", "ca.crt")
    if os.environ.get("TORUS_TLS_CA") or not os.path.exists(ca):
        return False
    os.environ["TORUS_TLS_CA"] = os.path.realpath(ca)
    return True


def _torus_binary():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(os.path.dirname(os.path.dirname(here)), "build", "bin", "torus"),
                      shutil.which("torus")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise exceptions.TorusError("cannot start a local cluster: no `torus` binary beside this package or on PATH")


def _start_local_cluster(object_store_memory=None):
    binary = _torus_binary()
    root = tempfile.mkdtemp(prefix="torus-local-")
    env = dict(os.environ, TORUS_TEMP_DIR=root)
    argv = [binary, "start", "--head"]
    if object_store_memory:
        argv += ["--object-store-memory", str(object_store_memory)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise exceptions.TorusError(f"`torus start --head` failed ({out.returncode}): {out.stderr.strip()}")
    endpoint = _session_endpoint(root)
    if endpoint is None:
        raise exceptions.TorusError(f"the local cluster in {root} wrote no head address")
    return endpoint, (binary, root)


def _stop_local_cluster(local):
    binary, root = local
    subprocess.run([binary, "down"], env=dict(os.environ, TORUS_TEMP_DIR=root), capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


def _reachable(core_mod, head_address, token):
    try:
        core_mod.cluster_nodes(head_address, token)
        return True
    except RuntimeError:
        return False


def _local_addresses():
    addrs = {"127.0.0.1", "localhost"}
    try:
        addrs.update(info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return addrs


def _pick_local_agent(nodes):
    """This machine's agent: one on a local address, preferring one without accelerators (drivers run tasks of any
    shape through it; the others are leased from where they fit)."""
    local = _local_addresses()
    mine = [n for n in nodes if n[1].rsplit(":", 1)[0] in local]
    if not mine:
        return None
    mine.sort(key=lambda n: (n[2].get("TPU", 0) + n[2].get("GPU", 0) > 0, n[0]))
    return mine[0]


def _print_output(core, stop):
    """The driver's copy of its workers' output: each line prefixed with where it came from, as Ray prints it.
    shutdown() stops it and waits for it: a thread still inside the core when the interpreter finalizes would be
    ended in the middle of C++ code."""
    while not stop.is_set():
        item = core.next_output(200)
        if item is None:
            continue
        source, text = item
        sys.stdout.write(f"({source}) {text.decode('utf-8', 'replace')}\n")
        sys.stdout.flush()


def init(address=None, *, namespace=None, runtime_env=None, ignore_reinit_error=False, log_to_driver=True,
         object_store_memory=None, _node_ip=None):
    """Connects this process to a cluster, as ray.init does.

    namespace: where this program's named actors are registered and looked up (default: one of its own).
    object_store_memory: bytes of the object store of the node that init starts, when it starts one (default 30% of
    the node's memory; a running cluster's nodes have theirs, `torus start --object-store-memory`); it also bounds
    the small values this process holds itself. A put beyond it raises ObjectStoreFullError, and so does reading a
    return that did not fit.

    address: None — the cluster of TORUS_ADDRESS or of this machine's latest session, else a new local one (head
    and agent) that lives as long as this process; "auto" — an existing one only; "host:port" — that head.
    log_to_driver: print the output of this program's task and actor workers here, each line prefixed with
    "(pid=..., node=...)".
    """
    global _state
    if namespace is not None and (not isinstance(namespace, str) or not namespace or len(namespace.encode()) > 256):
        raise ValueError(f"namespace: a non-empty string of at most 256 bytes is required, got {namespace!r}")
    if object_store_memory is not None and (isinstance(object_store_memory, bool) or
                                            not isinstance(object_store_memory, int) or object_store_memory < 1):
        raise ValueError(f"object_store_memory: a positive number of bytes is required, got {object_store_memory!r}")
    with _lock:
        if _state is not None:
            if ignore_reinit_error:
                return _state
            raise RuntimeError("torus.init was already called; call torus.shutdown() first")
        core_mod = _import_core()
        token = os.environ.get("TORUS_TOKEN")
        local_cluster = None
        endpoint = None
        if address in (None, "auto"):
            if os.environ.get("TORUS_ADDRESS"):
                endpoint = (os.environ["TORUS_ADDRESS"], token)
            else:
                endpoint = _session_endpoint(_temp_root())
                set_ca = endpoint is not None and _use_session_ca(_temp_root())
                # A session whose head is gone (a stale session_latest) does not count.
                if endpoint is not None and address is None and not _reachable(core_mod, *endpoint):
                    endpoint = None
                    if set_ca:
                        del os.environ["TORUS_TLS_CA"]
            if endpoint is None and address == "auto":
                raise ConnectionError(f"address='auto': no running cluster (no TORUS_ADDRESS and no session under "
                                      f"{_temp_root()}); start one with `torus up` or `torus start --head`")
            if endpoint is None:
                endpoint, local_cluster = _start_local_cluster(object_store_memory)
        else:
            if token is None:
                session = _session_endpoint(_temp_root())
                token = session[1] if session else None
            endpoint = (address, token)
        head_address, token = endpoint[0], endpoint[1] or token
        if not token:
            # A child of a driver (TORUS_ADDRESS set for it) finds the token in the session, as the driver did.
            session = _session_endpoint(_temp_root())
            token = session[1] if session else None
        if not token:
            raise ConnectionError("no cluster token: set TORUS_TOKEN (or run on a machine with the cluster's session)")

        job_id = os.environ.get("TORUS_JOB_ID") or f"driver-{uuid.uuid4().hex[:12]}"
        agent = os.environ.get("TORUS_AGENT_ADDRESS")
        node_id = os.environ.get("TORUS_NODE_ID", "")
        node_ip = _node_ip or os.environ.get("TORUS_NODE_IP")
        if agent is None:
            # Nodes come from the head; a fresh local cluster's agent may take a moment to register.
            deadline = time.time() + 30
            while True:
                try:
                    nodes = core_mod.cluster_nodes(head_address, token)
                except RuntimeError as e:
                    if local_cluster:
                        _stop_local_cluster(local_cluster)
                    raise ConnectionError(str(e)) from None
                picked = _pick_local_agent(nodes)
                if picked is not None or time.time() > deadline:
                    break
                time.sleep(0.2)
            if picked is None:
                if local_cluster:
                    _stop_local_cluster(local_cluster)
                raise ConnectionError(f"the cluster at {head_address} has no node on this machine to run tasks from")
            node_id, agent = picked[0], picked[1]
        if node_ip is None:
            node_ip = agent.rsplit(":", 1)[0]
        core = core_mod.CoreWorker(job_id, node_ip, head_address, agent, token, "", bool(log_to_driver),
                                   int(object_store_memory or 0))
        _state = _State(core, job_id, node_id, head_address, token, local_cluster)
        if namespace is not None:
            _state.namespace = namespace
        if log_to_driver:
            stop = threading.Event()
            printer = threading.Thread(target=_print_output, args=(core, stop), name="torus-worker-output",
                                       daemon=True)
            printer.start()
            _state.printer = (printer, stop)
        os.environ.setdefault("TORUS_ADDRESS", head_address)
        return _state


def http_address(state):
    """The head's HTTP API (host:port): TORUS_DASHBOARD_ADDRESS, else what the head says over gRPC."""
    if state.http_address is None:
        state.http_address = (os.environ.get("TORUS_DASHBOARD_ADDRESS") or
                              _import_core().head_http_address(state.head_address, state.token))
    return state.http_address


def _init_worker():
    """A task worker's connection (python -m torus._worker): its agent started it with everything in the env."""
    global _state
    core_mod = _import_core()
    env = os.environ
    core = core_mod.CoreWorker(env["TORUS_JOB_ID"], env.get("TORUS_NODE_IP", "127.0.0.1"), env["TORUS_ADDRESS"],
                               env["TORUS_AGENT_ADDRESS"], env["TORUS_TOKEN"], env["TORUS_WORKER_ID"])
    with _lock:
        _state = _State(core, env["TORUS_JOB_ID"], env.get("TORUS_NODE_ID", ""), env["TORUS_ADDRESS"],
                        env["TORUS_TOKEN"], is_worker=True)
    return _state


def shutdown():
    """Returns this process's leases and disconnects; stops the local cluster init() started, if any."""
    global _state
    with _lock:
        state, _state = _state, None
    if state is None:
        return
    if state.printer is not None:
        thread, stop = state.printer
        stop.set()
        thread.join(timeout=5)
    state.core.shutdown()
    if state.local_cluster:
        _stop_local_cluster(state.local_cluster)


def is_initialized():
    return _state is not None


atexit.register(shutdown)


class ObjectRef:
    """A reference to a value in the cluster: the result of a task or of torus.put."""

    __slots__ = ("_id", "_owner", "_core", "__weakref__")

    def __init__(self, object_id, owner, _add_ref=True):
        self._id = object_id
        self._owner = owner
        self._core = None
        state = _state
        if _add_ref and state is not None:
            self._core = state.core
            self._core.add_ref(object_id)

    def __del__(self):
        core = self._core
        if core is not None and _state is not None and _state.core is core:
            try:
                core.remove_ref(self._id)
            except Exception:
                pass

    def binary(self):
        return self._id

    def hex(self):
        return self._id.hex()

    def owner_address(self):
        return self._owner

    def __reduce__(self):
        if not ser.note_contained(self._id, self._owner):
            # Pickled outside torus's values (nothing tracks where it goes): its owner keeps it for good.
            state = _state
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
    state = _state
    if state is not None and owner != state.core.address:
        ser.note_borrowed(object_id, owner)
    return ref


def _register_borrowed(refs):
    state = _state
    if state is not None:
        state.core.borrow(refs)


ser._on_borrowed = _register_borrowed


def _ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError(f"timeout must be None or >= 0, got {timeout}")
    return int(timeout * 1000)


def get(refs, *, timeout=None):
    """The value of an ObjectRef (or a list of values for a list of refs), waiting up to `timeout` seconds. A failed
    task's error is raised here."""
    state = _state_or_init()
    single = isinstance(refs, ObjectRef)
    items = [refs] if single else list(refs)
    for r in items:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"torus.get takes ObjectRefs or a list of them, got {type(r).__name__}")
    try:
        values = state.core.get([(r._id, r._owner) for r in items], _ms(timeout))
    except ValueError as e:
        if str(e).startswith("timeout: "):
            raise exceptions.GetTimeoutError(str(e)[len("timeout: "):]) from None
        raise
    except KeyError as e:
        raise exceptions.ObjectLostError(e.args[0] if e.args else str(e)) from None
    out = [ser.value_of(data, fmt, buffers) for data, fmt, buffers in values]
    return out[0] if single else out


def put(value):
    """Stores `value` in the cluster (owned by this process); returns its ObjectRef."""
    state = _state_or_init()
    if isinstance(value, ObjectRef):
        raise TypeError("torus.put of an ObjectRef is not allowed; pass the ref itself")
    try:
        data, buffers, contained = ser.dumps_oob(value)
        object_id = state.core.put(data, ser.FORMAT_PICKLE, buffers, contained)
    except BufferError as e:
        raise exceptions.ObjectStoreFullError(str(e)) from None
    return ObjectRef(object_id, state.core.address)


def wait(refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first `num_returns` refs that are ready, within `timeout` seconds, in their order."""
    state = _state_or_init()
    refs = list(refs)
    if len(set(refs)) != len(refs):
        raise ValueError("torus.wait: the list of refs has duplicates")
    if num_returns < 1 or num_returns > len(refs):
        raise ValueError(f"num_returns must be between 1 and {len(refs)}, got {num_returns}")
    ready_idx = set(state.core.wait([(r._id, r._owner) for r in refs], num_returns, _ms(timeout)))
    ready = [r for i, r in enumerate(refs) if i in ready_idx][:num_returns]
    taken = set(ready)
    return ready, [r for r in refs if r not in taken]


def cancel(ref, *, force=False, recursive=True):
    """Cancels the task that returns `ref`: a queued one is dropped; a running one gets KeyboardInterrupt (with
    force=True its worker is killed). `get` then raises TaskCancelledError. Only tasks this process submitted;
    a finished task is left as it is."""
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"torus.cancel takes an ObjectRef, got {type(ref).__name__}")
    state = _state_or_init()
    if ref._owner != state.core.address:
        raise ValueError("torus.cancel: only tasks submitted by this process can be cancelled")
    state.core.cancel(ref._id[:16], bool(force))


def nodes():
    """The cluster's alive nodes, as ray.nodes() lists them."""
    state = _state_or_init()
    state.core.refresh_nodes()
    out = []
    for node_id, agent, total, labels in state.core.nodes():
        out.append({"NodeID": node_id, "Alive": True, "NodeManagerAddress": agent.rsplit(":", 1)[0],
                    "AgentAddress": agent, "Resources": {k: v / 10000 for k, v in total.items()},
                    "Labels": dict(labels)})
    return out


def cluster_resources():
    """Total resources of the alive nodes."""
    total = {}
    for n in nodes():
        for k, v in n["Resources"].items():
            total[k] = total.get(k, 0) + v
    return total


def _core_new_task_id():
    return _import_core().new_task_id()


def available_resources():
    """Resources of the alive nodes not held now — by placement groups, jobs, runs and task and actor leases —
    summed from each node's agent."""
    state = _state_or_init()
    return {k: v / 10000 for k, v in state.core.available_resources().items()}


def function_id(blob):
    return hashlib.sha256(blob).digest()
