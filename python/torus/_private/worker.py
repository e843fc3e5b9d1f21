"""The driver's and worker's API on the connection (as ray._private.worker): init, shutdown, get, put, wait, cancel,
and what the cluster has."""

import atexit
import hashlib
import os
import socket
import sys
import threading
import time
import uuid

from torus import exceptions
from torus._private import serialization as ser
from torus._private import state as _st
from torus._private.local_cluster import LocalCluster, read_session_endpoint
from torus._private.object_ref import ObjectRef

# init()'s hidden options (Ray's **kwargs) that torus takes; others are refused as Ray refuses unknown ones.
_HIDDEN_INIT_OPTIONS = {"_node_ip_address", "_temp_dir", "_system_config", "_memory", "_node_name",
                        "_enable_object_reconstruction", "_plasma_directory", "_object_spilling_directory",
                        "_driver_object_store_memory", "_metrics_export_port", "_skip_env_hook"}


def state_or_init():
    """This process's connection; init() with defaults first when there is none (as Ray's auto-init)."""
    with _st.lock:
        state = _st.current()
        if state is None:
            init()
            state = _st.current()
        return state


def _temp_root():
    return os.environ.get("TORUS_TEMP_DIR", "/tmp/torus")


def _use_session_ca(root):
    """A head with TLS leaves the cluster CA in its session: the core's channels (TORUS_TLS_CA) check the head and
    agents against it. True when this set TORUS_TLS_CA."""
    ca = os.path.join(root, "session_latest", "ca.crt")
    if os.environ.get("TORUS_TLS_CA") or not os.path.exists(ca):
        return False
    os.environ["TORUS_TLS_CA"] = os.path.realpath(ca)
    return True


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


class Context:
    """What init() returns (as Ray's RayContext): the cluster's addresses; a context manager that shuts down."""

    def __init__(self, state):
        self.address_info = {"address": state.head_address, "gcs_address": state.head_address,
                             "node_id": state.node_id, "session_dir": state.session_dir,
                             "webui_url": None}
        self.dashboard_url = None
        self.python_version = "{}.{}.{}".format(*sys.version_info[:3])

    def __getitem__(self, key):
        return self.address_info[key]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()

    def disconnect(self):
        shutdown()


def _check_init_args(namespace, object_store_memory, num_cpus, num_gpus, resources, labels, kwargs):
    unknown = [k for k in kwargs if k not in _HIDDEN_INIT_OPTIONS]
    if unknown:
        raise RuntimeError(f"Unknown keyword argument(s): {', '.join(unknown)}")
    if namespace is not None and (not isinstance(namespace, str) or not namespace or len(namespace.encode()) > 256):
        raise ValueError(f"namespace: a non-empty string of at most 256 bytes is required, got {namespace!r}")
    if object_store_memory is not None and (isinstance(object_store_memory, bool) or
                                            not isinstance(object_store_memory, int) or object_store_memory < 1):
        raise ValueError(f"object_store_memory: a positive number of bytes is required, got {object_store_memory!r}")
    for field, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{field}: a non-negative number is required, got {value!r}")
    if resources is not None:
        if not isinstance(resources, dict):
            raise TypeError(f"resources must be a dict, got {type(resources).__name__}")
        for name in ("CPU", "GPU"):
            if name in resources:
                raise ValueError(f"Use the 'num_cpus' and 'num_gpus' keyword instead of '{name}' in 'resources' "
                                 f"keyword")
    if labels is not None and (not isinstance(labels, dict) or
                               not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise ValueError(f"labels: a dict of strings to strings is required, got {labels!r}")


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None, labels=None, object_store_memory=None,
         local_mode=False, ignore_reinit_error=False, include_dashboard=None, dashboard_host="127.0.0.1",
         dashboard_port=None, job_config=None, configure_logging=True, logging_level="info", logging_format=None,
         logging_config=None, log_to_driver=None, namespace=None, runtime_env=None, enable_resource_isolation=False,
         cgroup_path=None, system_reserved_cpu=None, system_reserved_memory=None, proxy_server_url=None, **kwargs):
    """Connects this process to a cluster, as ray.init does.

    address: None — the cluster of TORUS_ADDRESS (or RAY_ADDRESS) or of this machine's latest session, else a new
    local one (head and agent, on free ports) that lives as long as this process; "auto" — an existing one only;
    "local" — always a new local one; "host:port" — that head.
    num_cpus, num_gpus, resources, labels, object_store_memory: the local node's, when init starts a cluster
    (refused when it connects to one, as Ray refuses them).
    namespace: where this program's named actors are registered and looked up (default: one of its own).
    runtime_env: the default of every task and actor of this program (env_vars, working_dir); theirs add to it.
    log_to_driver: print the output of this program's task and actor workers here, each line prefixed with
    "(pid=..., node=...)".
    """
    _check_init_args(namespace, object_store_memory, num_cpus, num_gpus, resources, labels, kwargs)
    if local_mode:
        raise ValueError("local_mode: not supported by torus (Ray deprecated it); run a local cluster instead")
    if enable_resource_isolation:
        raise ValueError("enable_resource_isolation: not supported by torus (its agents do not manage cgroups); "
                         "leave it False")
    if log_to_driver is None:
        log_to_driver = True
    from torus._private import options as _options
    job_env = _options.check_runtime_env(runtime_env, "runtime_env")
    with _st.lock:
        if _st.current() is not None:
            if ignore_reinit_error:
                return Context(_st.current())
            raise RuntimeError("Maybe you called ray.init twice by accident? This error can be suppressed by passing "
                               "in 'ignore_reinit_error=True' or by calling 'ray.shutdown()' prior to 'ray.init()'.")
        core_mod = _st.import_core()
        token = os.environ.get("TORUS_TOKEN")
        local_cluster = None
        endpoint = None
        local_node = (num_cpus, num_gpus, resources, labels, object_store_memory)
        if isinstance(address, str) and address.startswith("ray://"):
            raise ValueError(f"address: Ray Client addresses (ray://) are not served by torus; give the head's "
                             f"host:port, got {address!r}")
        env_address = os.environ.get("TORUS_ADDRESS") or os.environ.get("RAY_ADDRESS")
        if env_address and address is None:
            address = env_address
            if "://" in address:
                address = None  # RAY_ADDRESS naming a dashboard URL (for job clients): not a head
        if address in (None, "auto"):
            endpoint = read_session_endpoint(_temp_root())
            set_ca = endpoint is not None and _use_session_ca(_temp_root())
            # A session whose head is gone (a stale session_latest) does not count.
            if endpoint is not None and not _reachable(core_mod, *endpoint):
                endpoint = None
                if set_ca:
                    del os.environ["TORUS_TLS_CA"]
            if endpoint is None and address == "auto":
                raise ConnectionError(f"Could not find any running Ray instance. Please specify the one to connect "
                                      f"to by setting `--address` flag or `RAY_ADDRESS` environment variable. "
                                      f"(torus: no TORUS_ADDRESS and no session under {_temp_root()}; start one with "
                                      f"`torus up` or `torus start --head`)")
        elif address != "local":
            if token is None:
                session = read_session_endpoint(_temp_root())
                token = session[1] if session else None
            endpoint = (address, token)
        if endpoint is not None and any(v is not None for v in local_node):
            _refuse_local_node_options(*local_node)
        if endpoint is None:
            local_cluster, endpoint = LocalCluster.start(object_store_memory=object_store_memory, num_cpus=num_cpus,
                                                         num_gpus=num_gpus, resources=resources, labels=labels)
        head_address, token = endpoint[0], endpoint[1] or token
        if not token:
            # A child of a driver (TORUS_ADDRESS set for it) finds the token in the session, as the driver did.
            session = read_session_endpoint(_temp_root())
            token = session[1] if session else None
        if not token:
            raise ConnectionError("no cluster token: set TORUS_TOKEN (or run on a machine with the cluster's session)")
        try:
            state = _connect(core_mod, head_address, token, log_to_driver, object_store_memory,
                             kwargs.get("_node_ip_address"), local_cluster)
        except BaseException:
            if local_cluster:
                local_cluster.stop()
            raise
        if namespace is not None:
            state.namespace = namespace
        state.job_runtime_env = job_env
        _st.set_current(state)
        if log_to_driver:
            stop = threading.Event()
            printer = threading.Thread(target=_print_output, args=(state.core, stop), name="torus-worker-output",
                                       daemon=True)
            printer.start()
            state.printer = (printer, stop)
        os.environ.setdefault("TORUS_ADDRESS", head_address)
        if local_cluster:
            # Its session is this process's own: a child program (another driver) connects with the token from here.
            os.environ.setdefault("TORUS_TOKEN", token)
        return Context(state)


def _refuse_local_node_options(num_cpus, num_gpus, resources, labels, object_store_memory):
    if num_cpus is not None or num_gpus is not None:
        raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")
    if resources is not None:
        raise ValueError("When connecting to an existing cluster, resources must not be provided.")
    if labels is not None:
        raise ValueError("When connecting to an existing cluster, labels must not be provided.")
    if object_store_memory is not None:
        raise ValueError("When connecting to an existing cluster, object_store_memory must not be provided.")


def _connect(core_mod, head_address, token, log_to_driver, object_store_memory, node_ip, local_cluster):
    job_id = os.environ.get("TORUS_JOB_ID") or f"driver-{uuid.uuid4().hex[:12]}"
    agent = os.environ.get("TORUS_AGENT_ADDRESS")
    node_id = os.environ.get("TORUS_NODE_ID", "")
    node_ip = node_ip or os.environ.get("TORUS_NODE_IP")
    if agent is None:
        # Nodes come from the head; a fresh local cluster's agent may take a moment to register.
        deadline = time.time() + 30
        while True:
            try:
                nodes = core_mod.cluster_nodes(head_address, token)
            except RuntimeError as e:
                raise ConnectionError(str(e)) from None
            picked = _pick_local_agent(nodes)
            if picked is not None or time.time() > deadline:
                break
            time.sleep(0.2)
        if picked is None:
            raise ConnectionError(f"the cluster at {head_address} has no node on this machine to run tasks from")
        node_id, agent = picked[0], picked[1]
    if node_ip is None:
        node_ip = agent.rsplit(":", 1)[0]
    core = core_mod.CoreWorker(job_id, node_ip, head_address, agent, token, "", bool(log_to_driver),
                               int(object_store_memory or 0))
    state = _st.State(core, job_id, node_id, head_address, token, local_cluster)
    state.session_dir = os.path.join(local_cluster.root, "session_latest") if local_cluster else None
    return state


def http_address(state):
    """The head's HTTP API (host:port): TORUS_DASHBOARD_ADDRESS, else what the head says over gRPC."""
    if state.http_address is None:
        state.http_address = (os.environ.get("TORUS_DASHBOARD_ADDRESS") or
                              _st.import_core().head_http_address(state.head_address, state.token))
    return state.http_address


def init_worker():
    """A task worker's connection (python -m torus._private.default_worker): its agent started it with everything
    in the environment."""
    core_mod = _st.import_core()
    env = os.environ
    core = core_mod.CoreWorker(env["TORUS_JOB_ID"], env.get("TORUS_NODE_IP", "127.0.0.1"), env["TORUS_ADDRESS"],
                               env["TORUS_AGENT_ADDRESS"], env["TORUS_TOKEN"], env["TORUS_WORKER_ID"])
    state = _st.State(core, env["TORUS_JOB_ID"], env.get("TORUS_NODE_ID", ""), env["TORUS_ADDRESS"],
                      env["TORUS_TOKEN"], is_worker=True)
    state.session_dir = None
    state.job_runtime_env = {}
    with _st.lock:
        _st.set_current(state)
    return state


def shutdown(*, wait_for_processes=False, _exiting_interpreter=False):
    """Returns this process's leases and disconnects; stops the local cluster init() started, if any."""
    with _st.lock:
        state = _st.current()
        _st.set_current(None)
    if state is None:
        return
    if state.printer is not None:
        thread, stop = state.printer
        stop.set()
        thread.join(timeout=5)
    state.core.shutdown()
    if state.local_cluster:
        state.local_cluster.stop()


def is_initialized():
    return _st.current() is not None


atexit.register(shutdown)


def _ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError(f"timeout must be None or >= 0, got {timeout}")
    return int(timeout * 1000)


def get(object_refs, *, timeout=None, _use_object_store=False):
    """The value of an ObjectRef (or a list of values for a list of refs), waiting up to `timeout` seconds. A failed
    task's error is raised here."""
    state = state_or_init()
    single = isinstance(object_refs, ObjectRef)
    if not single and not isinstance(object_refs, list):
        raise ValueError(f"'object_refs' must either be an ObjectRef or a list of ObjectRefs. "
                         f"Received: {type(object_refs)}")
    items = [object_refs] if single else object_refs
    for r in items:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"Attempting to call `get` on the value {r}, which is not an ray.ObjectRef.")
    try:
        values = state.core.get([(r._id, r._owner) for r in items], _ms(timeout))
    except ValueError as e:
        if str(e).startswith("timeout: "):
            raise exceptions.GetTimeoutError(f"Get timed out: {str(e)[len('timeout: '):]}") from None
        raise
    except KeyError as e:
        raise exceptions._object_lost(e.args[0] if e.args else str(e)) from None
    out = [ser.value_of(data, fmt, buffers, r._id[:16]) for (data, fmt, buffers), r in zip(values, items)]
    return out[0] if single else out


def put(value, *, _owner=None, _tensor_transport=None):
    """Stores `value` in the cluster (owned by this process); returns its ObjectRef."""
    state = state_or_init()
    if isinstance(value, ObjectRef):
        raise TypeError("Calling 'put' on an ray.ObjectRef is not allowed. If you really want to do this, you can "
                        "wrap the ray.ObjectRef in a list and call 'put' on it.")
    try:
        data, buffers, contained = ser.dumps_oob(value)
        object_id = state.core.put(data, ser.FORMAT_PICKLE, buffers, contained)
    except BufferError as e:
        raise exceptions.ObjectStoreFullError(str(e)) from None
    return ObjectRef(object_id, state.core.address)


def wait(ray_waitables, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first `num_returns` refs that are ready, within `timeout` seconds, in their order."""
    state = state_or_init()
    if isinstance(ray_waitables, ObjectRef):
        raise TypeError("wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, got a single "
                        f"ray.ObjectRef or ray.ObjectRefGenerator {ray_waitables}")
    if not isinstance(ray_waitables, list):
        raise TypeError(f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, "
                        f"got {type(ray_waitables)}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
    refs = ray_waitables
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"wait() expected a list of ray.ObjectRef or ray.ObjectRefGenerator, "
                            f"got list containing {type(r)}")
    if not refs:
        return [], []
    # By id, not by ObjectRef: a set of 10,000 refs would call their Python __hash__ and __eq__.
    if len({r._id for r in refs}) != len(refs):
        raise ValueError("Wait requires a list of unique ray_waitables.")
    if num_returns <= 0:
        raise ValueError("Invalid number of objects to return %d." % num_returns)
    if num_returns > len(refs):
        raise ValueError("num_returns cannot be greater than the number of ray_waitables provided to ray.wait.")
    ready_idx = sorted(state.core.wait([(r._id, r._owner) for r in refs], num_returns, _ms(timeout)))[:num_returns]
    if len(ready_idx) == len(refs):
        return list(refs), []
    taken = set(ready_idx)
    return [refs[i] for i in ready_idx], [r for i, r in enumerate(refs) if i not in taken]


def cancel(ray_waitable, *, force=False, recursive=True):
    """Cancels the task that returns `object_ref`: a queued one is dropped; a running one gets KeyboardInterrupt (with
    force=True its worker is killed). `get` then raises TaskCancelledError. Only tasks this process submitted;
    a finished task is left as it is."""
    object_ref = ray_waitable
    from torus._private.generators import ObjectRefGenerator
    if isinstance(object_ref, ObjectRefGenerator):
        object_ref = object_ref.completed()
    if not isinstance(object_ref, ObjectRef):
        raise TypeError("ray.cancel() only supported for object refs. For actors, try ray.kill(). Got: "
                        f"{type(object_ref)}.")
    state = state_or_init()
    if object_ref._owner != state.core.address:
        raise ValueError("torus.cancel: only tasks submitted by this process can be cancelled")
    state.core.cancel(object_ref._id[:16], bool(force), bool(recursive))


# The well-known label names whose torus.io/ keys Ray programs read as ray.io/ (src/torus/common/well_known_labels.h).
_RAY_LABEL_NAMES = ("node-id", "accelerator-type", "tpu-slice-name", "tpu-worker-id", "tpu-topology", "tpu-pod-type",
                    "market-type", "node-group", "availability-zone", "availability-region")


def _with_ray_labels(labels):
    """A node's labels with the ray.io/ spelling of each well-known torus.io/ one beside it (both kept)."""
    out = dict(labels)
    for name in _RAY_LABEL_NAMES:
        value = labels.get(f"torus.io/{name}")
        if value is not None:
            out.setdefault(f"ray.io/{name}", value)
    return out


def nodes():
    """The cluster's alive nodes, as ray.nodes() lists them; "Labels" has each well-known label under both its
    torus.io/ and its ray.io/ key ("ray.io/tpu-slice-name" beside "torus.io/tpu-slice-name")."""
    state = state_or_init()
    state.core.refresh_nodes()
    out = []
    for node_id, agent, total, labels in state.core.nodes():
        out.append({"NodeID": node_id, "Alive": True, "NodeManagerAddress": agent.rsplit(":", 1)[0],
                    "AgentAddress": agent, "Resources": {k: v / 10000 for k, v in total.items()},
                    "Labels": _with_ray_labels(labels)})
    return out


def cluster_resources():
    """Total resources of the alive nodes."""
    total = {}
    for n in nodes():
        for k, v in n["Resources"].items():
            total[k] = total.get(k, 0) + v
    return total


def available_resources():
    """Resources of the alive nodes not held now — by placement groups, jobs, runs and task and actor leases —
    summed from each node's agent."""
    state = state_or_init()
    return {k: v / 10000 for k, v in state.core.available_resources().items()}


def new_task_id():
    return _st.import_core().new_task_id()


def function_id(blob):
    return hashlib.sha256(blob).digest()


SCRIPT_MODE = 0  # a driver (as ray.SCRIPT_MODE)
WORKER_MODE = 1  # a task or actor worker


def get_gpu_ids():
    """The GPUs this worker holds (CUDA_VISIBLE_DEVICES as the agent set it), as ints; [] in a driver."""
    state = state_or_init()
    if not state.is_worker:
        return []
    return [int(x) if x.isdigit() else x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
