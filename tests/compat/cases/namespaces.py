"""Namespaces and named actors: ray.init(namespace=...), the anonymous namespace each driver gets, get_actor across
namespaces, get_if_exists, list_named_actors, and detached actors, which outlive the driver that made them.

A second driver is a second process (python -c) that connects to this cluster by its address, as another program
on the same cluster would; it prints one JSON line, its result."""

import json
import os
import subprocess
import sys
import textwrap
import time

import ray
from harness import case, out, raised


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self):
        self.n += 1
        return self.n

    def namespace(self):
        return ray.get_runtime_context().namespace


@ray.remote
def namespace_in_a_task():
    return ray.get_runtime_context().namespace


@ray.remote
def incr_named(name):
    return ray.get(ray.get_actor(name).incr.remote())


def other_driver(body, namespace=None):
    """Runs `body` in another driver connected to this cluster (in `namespace`, or its own anonymous one); its
    `result` as JSON."""
    code = textwrap.dedent("""
        import json, sys
        import ray
        ray.init(address=sys.argv[1], namespace=json.loads(sys.argv[2]))

        @ray.remote
        class Counter:
            def __init__(self, start=0):
                self.n = start

            def incr(self):
                self.n += 1
                return self.n

        def lookup(name, namespace=None):
            try:
                return ray.get(ray.get_actor(name, namespace=namespace).incr.remote())
            except ValueError as e:
                return type(e).__name__
    """) + textwrap.dedent(body) + "\nprint('@@RESULT ' + json.dumps(result), flush=True)\n"
    proc = subprocess.run([sys.executable, "-c", code, ray.get_runtime_context().gcs_address, json.dumps(namespace)],
                          capture_output=True, text=True, timeout=180)
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT "):
            return json.loads(line[len("@@RESULT "):])
    raise RuntimeError(f"the other driver failed ({proc.returncode}): {proc.stderr[-2000:]}")


def lookup(name, namespace=None):
    try:
        return ray.get(ray.get_actor(name, namespace=namespace).incr.remote())
    except ValueError as e:
        return type(e).__name__


def gone(name, namespace=None, deadline=60):
    """Whether the name is free (its actor dead) within the deadline."""
    end = time.time() + deadline
    while time.time() < end:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return True
        time.sleep(0.2)
    return False


@case
def a_driver_has_an_anonymous_namespace_of_its_own():
    mine = ray.get_runtime_context().namespace
    # (The handle is kept: Ray ends an actor, named or not, once no handle on it is left; torus keeps it.)
    actor = Counter.options(name="mine").remote()
    ray.get(actor.incr.remote())
    theirs = other_driver("result = [ray.get_runtime_context().namespace, lookup('mine')]")
    out(isinstance(mine, str) and len(mine) > 0, theirs[0] != mine, theirs[1])
    # Named explicitly, the namespace is found from anywhere.
    out(other_driver(f"result = lookup('mine', namespace={mine!r})"))


@case
def init_namespace_is_where_names_are_registered_and_found():
    result = other_driver("""
        ns = ray.get_runtime_context().namespace
        Counter.options(name="c1", lifetime="detached").remote(10)
        result = [ns, lookup("c1")]
    """, namespace="team")
    out(result, lookup("c1"), lookup("c1", namespace="team"), lookup("c1", namespace="team"))
    ray.kill(ray.get_actor("c1", namespace="team"))


@case
def tasks_and_actors_share_their_drivers_namespace():
    mine = ray.get_runtime_context().namespace
    a = Counter.options(name="shared-counter").remote()
    out(ray.get(namespace_in_a_task.remote()) == mine, ray.get(a.namespace.remote()) == mine,
        ray.get(incr_named.remote("shared-counter")))


@case
def the_same_name_in_two_namespaces_is_two_actors():
    a = Counter.options(name="twin", namespace="left").remote(0)
    b = Counter.options(name="twin", namespace="right").remote(100)
    out(ray.get([a.incr.remote(), b.incr.remote()]), lookup("twin", "left"), lookup("twin", "right"), lookup("twin"))


@case
def get_if_exists_looks_in_the_given_namespace():
    a = Counter.options(name="gie", namespace="ns-a", get_if_exists=True).remote(0)
    ray.get(a.incr.remote())
    again = Counter.options(name="gie", namespace="ns-a", get_if_exists=True).remote(50)
    elsewhere = Counter.options(name="gie", namespace="ns-b", get_if_exists=True).remote(50)
    out(ray.get(again.incr.remote()), ray.get(elsewhere.incr.remote()), again == a)


@case
def list_named_actors_of_this_namespace_and_of_all():
    mine = ray.get_runtime_context().namespace
    ours = [Counter.options(name=n).remote() for n in ("list-a", "list-b")]
    theirs = Counter.options(name="list-c", namespace="listing").remote()
    unnamed = Counter.remote()
    ray.get([a.incr.remote() for a in ours + [theirs, unnamed]])
    here = ray.util.list_named_actors()
    everywhere = ray.util.list_named_actors(all_namespaces=True)
    out(sorted(n for n in here if n.startswith("list-")),
        sorted((d["namespace"] == mine, d["name"]) for d in everywhere if d["name"].startswith("list-")),
        sorted(everywhere[0]) if everywhere else None)
    # A dead actor is not listed.
    ray.kill(ours[0])
    gone("list-a")
    out(sorted(n for n in ray.util.list_named_actors() if n.startswith("list-")))


@case
def a_dead_actors_name_can_be_taken_again():
    a = Counter.options(name="reused").remote(0)
    ray.get(a.incr.remote())
    ray.kill(a)
    gone("reused")
    b = Counter.options(name="reused").remote(40)
    out(ray.get(b.incr.remote()), lookup("reused"))


@case(timeout=240)
def detached_actor_outlives_its_driver():
    result = other_driver("""
        keeper = Counter.options(name="keeper", lifetime="detached").remote(5)
        owned = Counter.options(name="owned").remote(5)
        result = ray.get([keeper.incr.remote(), owned.incr.remote()])
    """, namespace="outliving")
    out(result)
    # Its driver is gone: the actor it owned died with it, the detached one lives on with its state.
    out(gone("owned", "outliving"), lookup("keeper", "outliving"))
    out(sorted(d["name"] for d in ray.util.list_named_actors(all_namespaces=True) if d["namespace"] == "outliving"))
    # Another driver finds it too; it lives until it is killed.
    out(other_driver("result = lookup('keeper')", namespace="outliving"))
    ray.kill(ray.get_actor("keeper", namespace="outliving"))
    out(gone("keeper", "outliving"))


@case
def detached_actor_needs_no_name():
    a = Counter.options(lifetime="detached").remote(1)
    out(ray.get(a.incr.remote()))
    ray.kill(a)


@case
def bad_names_and_namespaces():
    def err(f):
        e = raised(f)
        return None if e is None else [type(e).__name__, str(e)]

    out(err(lambda: Counter.options(name="").remote()),
        err(lambda: Counter.options(name="x", namespace="").remote()),
        err(lambda: ray.get_actor("x", namespace="")),
        err(lambda: ray.get_actor("x", namespace=5)),
        err(lambda: ray.get_actor(None)),
        err(lambda: ray.get_actor("")))
    e = raised(lambda: Counter.options(name="x", namespace=5))
    out(type(e).__name__)
