"""ray.util.state: nodes, actors, tasks (calls and actor creations), placement groups, jobs, cluster events and logs
as the state API lists them, its filters, limits and errors, and StateApiClient. Ids, pids and times differ between
the systems; the cases compare what both must agree on (counts, states, names, which fields are filled). What Ray
serves and torus does not (workers, objects, runtime envs) is not compared here.

Each query names the cluster by the driver's gcs_address: a Ray driver's own cluster is not found by address=None
when other Ray clusters run on the machine.
"""

import time
import warnings

import ray
from harness import case, out, raised
from ray.util import state

INIT = {"num_cpus": 2, "include_dashboard": True}

_kept = []  # actor handles kept for the later cases (an actor lives while a handle does)


def addr():
    return ray.get_runtime_context().gcs_address


def node_id():
    return ray.nodes()[0]["NodeID"]


def until(fn, timeout=30):
    """fn()'s first true value within `timeout` seconds (task states reach the state API about once a second)."""
    deadline = time.time() + timeout
    while True:
        value = fn()
        if value or time.time() > deadline:
            return value
        time.sleep(0.25)


@ray.remote
def square(x):
    return x * x


@ray.remote
def boom():
    raise ValueError("boom")


@ray.remote
class Keeper:
    def ping(self):
        return "pong"


@case
def nodes():
    listed = state.list_nodes(address=addr())
    n = listed[0]
    me = ray.nodes()[0]
    out(len(listed), n.state, n.is_head_node, n.node_id == me["NodeID"], n.node_ip == me["NodeManagerAddress"],
        n.resources_total["CPU"], n.labels.get("ray.io/node-id") == n.node_id, n.start_time_ms, n.state_message)
    got = state.get_node(n.node_id, address=addr())
    out(got.node_id == n.node_id, got.end_time_ms, got.start_time_ms > 0, sorted(got.asdict()))
    out(state.get_node("ab" * 28, address=addr()))
    out(len(state.list_nodes(address=addr(), filters=[("is_head_node", "=", "true")])))


@case
def actors():
    k = Keeper.options(name="keeper").remote()
    _kept.append(k)
    ray.get(k.ping.remote())
    rows = until(lambda: [a for a in state.list_actors(address=addr(), filters=[("name", "=", "keeper")])
                          if a.state == "ALIVE"])
    a = rows[0]
    ctx = ray.get_runtime_context()
    out(len(rows), a.class_name, a.state, a.name, a.ray_namespace == ctx.namespace, a.job_id == ctx.get_job_id(),
        a.pid is not None, a.node_id == node_id(), a.is_detached, a.num_restarts)
    got = state.get_actor(k._actor_id.hex(), address=addr())
    out(got.name, got.is_detached, got.num_restarts, got.required_resources, got.death_cause, got["class_name"],
        got.get("state"), sorted(got.asdict()))
    out(state.get_actor("ab" * 16, address=addr()))
    summary = state.summarize_actors(address=addr())["cluster"]
    out(summary["summary"]["Keeper"], summary["summary_by"], summary["total_actors"])


@case
def dead_actor():
    doomed = Keeper.options(name="doomed").remote()
    ray.get(doomed.ping.remote())
    ray.kill(doomed)
    rows = until(lambda: state.list_actors(address=addr(), filters=[("name", "=", "doomed"), ("state", "=", "DEAD")],
                                           detail=True))
    out(len(rows), rows[0].death_cause is not None, rows[0].class_name)


@case
def tasks():
    refs = [square.remote(i) for i in range(3)]
    out(ray.get(refs))
    out(type(raised(ray.get, boom.remote())).__name__)

    def settled():
        rows = state.list_tasks(address=addr(), filters=[("func_or_class_name", "=", "square")])
        return rows if len(rows) == 3 and all(r.state == "FINISHED" for r in rows) else None
    rows = until(settled)
    out(sorted(r.state for r in rows), sorted({r.type for r in rows}), sorted({r.name for r in rows}),
        [r.actor_id for r in rows], all(r.node_id == node_id() for r in rows),
        [r.attempt_number for r in rows], [r.events for r in rows])
    failed = until(lambda: state.list_tasks(address=addr(), filters=[("name", "=", "boom"), ("state", "=", "FAILED")]))
    out(len(failed), failed[0].error_type)
    one = state.get_task(refs[0], address=addr())
    out(one.name, one.state, one.type, one.language, one.error_type, one.events[0]["state"], one.events[-1]["state"],
        one.creation_time_ms <= one.end_time_ms, sorted(one.asdict()))
    out(state.get_task(one.task_id, address=addr()).name)


@case
def actor_tasks():
    k = Keeper.options(name="caller").remote()
    _kept.append(k)
    ray.get([k.ping.remote() for _ in range(2)])
    mine = ("actor_id", "=", k._actor_id.hex())

    def both_calls():
        rows = state.list_tasks(address=addr(), filters=[mine, ("type", "=", "ACTOR_TASK")])
        return rows if len(rows) == 2 and all(t.state == "FINISHED" for t in rows) else None
    calls = until(both_calls)
    out(len(calls), sorted({t.name for t in calls}), sorted({t.func_or_class_name for t in calls}))
    made = until(lambda: state.list_tasks(address=addr(), filters=[mine, ("type", "=", "ACTOR_CREATION_TASK"),
                                                                   ("state", "=", "FINISHED")]))
    out(len(made), made[0].name, made[0].actor_id == k._actor_id.hex())
    summary = until(lambda: (lambda s: s if s["summary"].get("square", {}).get("state_counts") == {"FINISHED": 3}
                             else None)(state.summarize_tasks(address=addr())["cluster"]))
    out(summary["summary"]["square"], summary["summary"]["boom"], summary["summary"]["Keeper.ping"]["type"],
        summary["summary"]["caller:Keeper.__init__"], summary["summary_by"], summary["total_tasks"],
        summary["total_actor_scheduled"] >= 3, summary["total_actor_tasks"] >= 4)


@case
def placement_groups():
    from ray.util.placement_group import placement_group, remove_placement_group
    pg = placement_group([{"CPU": 1}], name="grp")
    ray.get(pg.ready())
    rows = state.list_placement_groups(address=addr(), filters=[("name", "=", "grp")])
    out(len(rows), rows[0].state, rows[0].placement_group_id == pg.id.hex(), rows[0].bundles, rows[0].stats)
    got = state.get_placement_group(pg.id.hex(), address=addr())
    out(got.name, [b["unit_resources"] for b in got.bundles], [b["bundle_id"]["bundle_index"] for b in got.bundles],
        [b["node_id"] == node_id() for b in got.bundles], got.stats["scheduling_state"], sorted(got.asdict()))
    remove_placement_group(pg)
    gone = until(lambda: state.list_placement_groups(address=addr(), filters=[("name", "=", "grp"),
                                                                                ("state", "=", "REMOVED")]))
    out(len(gone))


@case
def jobs():
    out(state.list_jobs(address=addr(), filters=[("type", "=", "SUBMISSION")]))
    out(state.get_job("raysubmit_nope", address=addr()))


@case
def filters_and_limits():
    e = raised(state.list_actors, address=addr(), filters=[("state", ">", "ALIVE")])
    out(isinstance(e, ValueError), "Unsupported filter predicate > is given. Available predicates: =, !=." in str(e))
    e = raised(state.list_actors, address=addr(), filters=[("color", "=", "red")])
    out(type(e).__name__, "The given filter column color is not supported." in str(e))
    e = raised(state.list_nodes, address=addr(), filters=[("is_head_node", "=", "maybe")])
    out(type(e).__name__, str(e))
    e = raised(state.list_tasks, address=addr(), limit=10001)
    out(type(e).__name__, str(e))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out(state.list_actors(address=addr(), filters=[("state", "=", "ALIVE"), ("state", "=", "DEAD")]))
    out([str(w.message) for w in caught if "multiple '=' filters" in str(w.message)])
    out(len(state.list_actors(address=addr(), filters=[("state", "=", "alive"), ("name", "=", "KEEPER")])),
        len(state.list_actors(address=addr(), filters=[("name", "!=", "KEEPER"), ("name", "!=", "caller")])),
        len(state.list_tasks(address=addr(), limit=1)), state.list_actors(address=addr(), limit=0))


@case
def log_arguments():
    # Only what is checked before a node's logs are read: Ray's own node agent does not serve logs when another
    # Ray cluster on the machine holds its port, so reading files is tested against torus alone (tests/python).
    node = node_id()
    e = raised(state.list_logs, address=addr())
    out(type(e).__name__, str(e))
    e = raised(next, state.get_log(address=addr(), node_id=node))
    out(isinstance(e, ValueError), "None of actor_id, task_id, pid, submission_id or filename is provided" in str(e))
    e = raised(next, state.get_log(address=addr(), filename="x"))
    out(isinstance(e, ValueError), "node_id or node_ip must be provided as constructor arguments" in str(e))
    e = raised(next, state.get_log(address=addr(), node_id=node, node_ip="127.0.0.1", filename="x"))
    out(isinstance(e, ValueError), "Both node_id and node_ip are given. Only one of them can be provided." in str(e))
    e = raised(next, state.get_log(address=addr(), node_id=node, filename="x", suffix="log"))
    out(isinstance(e, ValueError), "Invalid suffix: log. Must be one of 'out' or 'err'." in str(e))


@case
def cluster_events():
    events = state.list_cluster_events(address=addr())
    out(isinstance(events, list),
        all(set(e.asdict()) == {"severity", "time", "source_type", "message", "event_id", "custom_fields"}
            for e in events))


@case
def client():
    from ray.util.state import StateApiClient
    from ray.util.state.common import GetApiOptions, ListApiOptions, StateResource
    c = StateApiClient(address=addr())
    rows = c.list(StateResource.ACTORS, options=ListApiOptions(filters=[("name", "=", "keeper")]),
                  raise_on_missing_output=True)
    out([r.class_name for r in rows])
    out(c.get(StateResource.NODES, node_id(), options=GetApiOptions()).state)
    e = raised(c.get, StateResource.RUNTIME_ENVS, "x", options=GetApiOptions())
    out(type(e).__name__, str(e))
