"""get_runtime_context(): ids, names, resources and environment in the driver, in tasks and in actors, with Ray's
types (hex strings) and Ray's answers where there is nothing to report."""

import json

import ray
from harness import case, out, raised


def _is_hex(s):
    return isinstance(s, str) and len(s) > 0 and all(c in "0123456789abcdef" for c in s)


@ray.remote
def task_context():
    ctx = ray.get_runtime_context()
    return {"task_id": _is_hex(ctx.get_task_id()), "actor_id": ctx.get_actor_id(),
            "actor_name": ctx.get_actor_name(), "job_id": ctx.get_job_id(), "node_id": ctx.get_node_id(),
            "task_name": ctx.get_task_name(),
            # Ray names a script's functions by the script's file, torus by "__main__".
            "function_name": ctx.get_task_function_name().endswith(".task_context"),
            "resources": ctx.get_assigned_resources(), "namespace": ctx.namespace,
            "worker_id": isinstance(ctx.get_worker_id(), str), "pg": ctx.get_placement_group_id(),
            "accelerators": ctx.get_accelerator_ids()}


@case
def in_the_driver():
    ctx = ray.get_runtime_context()
    node_ids = [n["NodeID"] for n in ray.nodes()]
    out(isinstance(ctx.get_job_id(), str), ctx.get_node_id() in node_ids, ctx.get_task_id(), ctx.get_actor_id(),
        ctx.get_actor_name(), ctx.get_task_name(), ctx.get_placement_group_id(), isinstance(ctx.namespace, str),
        isinstance(ctx.get_worker_id(), str), ctx.get_runtime_env_string(), ctx.get_accelerator_ids()["GPU"])


@case
def in_a_task():
    ctx = ray.get_runtime_context()
    got = ray.get(task_context.remote())
    out(got["task_id"], got["actor_id"], got["actor_name"], got["job_id"] == ctx.get_job_id(),
        got["node_id"] == ctx.get_node_id(), got["task_name"], got["function_name"], got["resources"],
        got["namespace"] == ctx.namespace, got["worker_id"], got["pg"], sorted(got["accelerators"].items()))


@case
def task_names_and_resources_follow_options():
    got = ray.get(task_context.options(name="renamed", num_cpus=2).remote())
    out(got["task_name"], got["resources"])


@case
def task_ids_differ_between_tasks():
    @ray.remote
    def tid():
        return ray.get_runtime_context().get_task_id()
    a, b = ray.get([tid.remote(), tid.remote()])
    out(_is_hex(a), a != b)


@ray.remote
class Context:
    def ids(self):
        ctx = ray.get_runtime_context()
        return ctx.get_actor_id(), ctx.get_actor_name(), ctx.get_task_name(), ctx.get_assigned_resources()

    def me(self):
        return ray.get_runtime_context().current_actor

    def reconstructed(self):
        return ray.get_runtime_context().was_current_actor_reconstructed


@case
def in_actors():
    plain = Context.remote()
    named = Context.options(name="ctx_actor", num_cpus=1).remote()
    pid, pname, ptask, pres = ray.get(plain.ids.remote())
    nid, nname, _, nres = ray.get(named.ids.remote())
    out(pid == plain._actor_id.hex(), pname, ptask, pres, nid == named._actor_id.hex(), nname, nres,
        ray.get(plain.reconstructed.remote()))
    ray.kill(plain)
    ray.kill(named)


@case
def current_actor_is_a_handle_on_itself():
    a = Context.remote()
    me = ray.get(a.me.remote())
    out(me._actor_id == a._actor_id, ray.get(me.ids.remote())[0] == a._actor_id.hex())
    e = raised(ray.get, ray.remote(lambda: ray.get_runtime_context().current_actor).remote())
    out(isinstance(e, RuntimeError), "This method is only available in an actor." in str(e))
    ray.kill(a)


@case
def assigned_resources_in_the_driver():
    e = raised(ray.get_runtime_context().get_assigned_resources)
    out(type(e).__name__)


@case
def runtime_env_string():
    @ray.remote
    def env():
        return json.loads(ray.get_runtime_context().get_runtime_env_string()).get("env_vars")
    out(ray.get(env.options(runtime_env={"env_vars": {"A": "1"}}).remote()), ray.get(env.remote()))
