"""Fault tolerance: Ray Core's guide — task retries after a worker's death and after errors, actor restarts and the
retry of their calls, dead actors, actors that exit themselves, the fate of an actor whose owner dies, cancellation.

Attempts and constructions are counted in files (one character per attempt): they survive the worker that dies."""

import os
import sys
import tempfile
import time

import ray
from harness import case, out, raised


def counter_file():
    fd, path = tempfile.mkstemp(prefix="attempts-")
    os.close(fd)
    return path


def mark(path):
    """Adds an attempt to `path`; returns how many there are now."""
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        return len(f.read())


def count(path):
    with open(path) as f:
        return len(f.read())


def nap(seconds):
    """Sleeps in short steps: Ray's cancel raises KeyboardInterrupt between Python bytecodes, not inside a sleep."""
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.05)


def wait_for(path, deadline=60):
    end = time.time() + deadline
    while not os.path.exists(path) and time.time() < end:
        time.sleep(0.05)
    return os.path.exists(path)


# --- tasks ---


@ray.remote
def dies_until(path, deaths):
    """Its worker exits at each of the first `deaths` attempts; then it returns the attempt's number."""
    n = mark(path)
    if n <= deaths:
        os._exit(1)
    return n


@ray.remote
def raises_until(path, failures, kind="value"):
    n = mark(path)
    if n <= failures:
        raise (KeyError if kind == "key" else ValueError)(f"attempt {n}")
    return n


@case(timeout=180)
def task_retried_after_its_worker_dies():
    # Ray retries a task whose worker died up to max_retries times (3 by default).
    path = counter_file()
    out(ray.get(dies_until.remote(path, 3)), count(path))
    path = counter_file()
    out(ray.get(dies_until.options(max_retries=1).remote(path, 1)), count(path))


@case(timeout=180)
def retries_spent_is_worker_crashed():
    path = counter_file()
    e = raised(ray.get, dies_until.options(max_retries=2).remote(path, 5))
    out(type(e).__name__, isinstance(e, ray.exceptions.RayError), count(path),
        str(e).startswith("The worker died unexpectedly while executing this task."))


@case(timeout=120)
def max_retries_zero_is_worker_crashed_at_once():
    path = counter_file()
    e = raised(ray.get, dies_until.options(max_retries=0).remote(path, 1))
    out(type(e).__name__, count(path))


@case
def application_errors_are_not_retried_by_default():
    path = counter_file()
    e = raised(ray.get, raises_until.options(max_retries=3).remote(path, 1))
    out(type(e).__name__, isinstance(e, ValueError), str(e.cause), count(path))


@case(timeout=120)
def retry_exceptions_true_retries_any_error():
    path = counter_file()
    out(ray.get(raises_until.options(max_retries=2, retry_exceptions=True).remote(path, 2)), count(path))
    path = counter_file()
    e = raised(ray.get, raises_until.options(max_retries=2, retry_exceptions=True).remote(path, 5, "key"))
    out(type(e).__name__, isinstance(e, KeyError), str(e.cause), count(path))


@case(timeout=120)
def retry_exceptions_list_retries_only_its_types():
    listed = raises_until.options(max_retries=2, retry_exceptions=[KeyError])
    path = counter_file()
    out(ray.get(listed.remote(path, 1, "key")), count(path))
    path = counter_file()
    e = raised(ray.get, listed.remote(path, 1, "value"))
    out(type(e).__name__, isinstance(e, ValueError), count(path))


# --- actors ---


@ray.remote
class Phoenix:
    """Counts its constructions in `path`; its state starts again at each."""

    def __init__(self, path):
        self.path = path
        self.built = mark(path)
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def state(self):
        return [self.built, self.n, ray.get_runtime_context().was_current_actor_reconstructed]

    def die(self):
        os._exit(1)

    def die_once(self, marker):
        # The first call's worker exits; the same call retried on the restarted actor returns.
        if mark(marker) == 1:
            os._exit(1)
        return "retried"

    def die_until(self, marker, deaths):
        n = mark(marker)
        if n <= deaths:
            os._exit(1)
        return n

    def leave(self):
        ray.actor.exit_actor()
        return "not reached"

    def sys_exit(self, code):
        sys.exit(code)


def after_restart(call, deadline=60):
    """The value of call() once the actor answers again (a call may meet it while it restarts)."""
    end = time.time() + deadline
    while True:
        try:
            return ray.get(call(), timeout=deadline)
        except ray.exceptions.RayActorError:
            if time.time() > end:
                raise
            time.sleep(0.2)


def dead_error(actor, deadline=60):
    """The error of a call once the actor is dead."""
    end = time.time() + deadline
    while True:
        e = raised(ray.get, actor.incr.remote(), timeout=deadline)
        if e is not None or time.time() > end:
            return e
        time.sleep(0.2)


@case(timeout=180)
def actor_restarts_with_its_constructor_run_again():
    path = counter_file()
    a = Phoenix.options(max_restarts=1).remote(path)
    out(ray.get([a.incr.remote(), a.incr.remote()]), ray.get(a.state.remote()))
    # (Ray raises ActorUnavailableError here, the actor restarting; torus ActorDiedError.)
    e = raised(ray.get, a.die.remote())
    out(isinstance(e, ray.exceptions.RayActorError))
    # The restarted actor: built again with the same arguments, its state new, and it knows it was rebuilt.
    out(after_restart(a.incr.remote), ray.get(a.state.remote()), count(path))


@case(timeout=180)
def actor_with_no_restarts_left_is_dead():
    path = counter_file()
    a = Phoenix.options(max_restarts=1).remote(path)
    ray.get(a.incr.remote())
    raised(ray.get, a.die.remote())
    after_restart(a.incr.remote)
    raised(ray.get, a.die.remote())
    e = dead_error(a)
    out(type(e).__name__, isinstance(e, ray.exceptions.RayActorError), e.actor_init_failed,
        str(e).startswith("The actor died unexpectedly before finishing this task."), count(path))
    # It stays dead.
    again = raised(ray.get, a.state.remote(), timeout=60)
    out(type(again).__name__)


@case(timeout=180)
def max_task_retries_retries_the_call_on_the_restarted_actor():
    path, marker = counter_file(), counter_file()
    a = Phoenix.options(max_restarts=1, max_task_retries=1).remote(path)
    ray.get(a.incr.remote())
    out(ray.get(a.die_once.remote(marker), timeout=120), count(marker), count(path), ray.get(a.state.remote()))


@case(timeout=180)
def method_options_override_max_task_retries():
    path, marker = counter_file(), counter_file()
    a = Phoenix.options(max_restarts=2, max_task_retries=1).remote(path)
    ray.get(a.incr.remote())
    # max_task_retries=0 on the call: it fails with the actor's death, not retried; the actor itself restarts.
    e = raised(ray.get, a.die_once.options(max_task_retries=0).remote(marker), timeout=120)
    out(isinstance(e, ray.exceptions.RayActorError), count(marker))
    out(after_restart(lambda: a.die_once.remote(marker)), count(marker), count(path))


@case(timeout=240)
def infinite_restarts_and_retries():
    path, marker = counter_file(), counter_file()
    a = Phoenix.options(max_restarts=-1, max_task_retries=-1).remote(path)
    out(ray.get(a.die_until.remote(marker, 3), timeout=180), count(marker), count(path))


def rebuilt(path, times, deadline=60):
    """Waits until the actor of `path` has been built `times` times."""
    end = time.time() + deadline
    while count(path) < times and time.time() < end:
        time.sleep(0.1)
    return count(path)


@case(timeout=180)
def kill_without_no_restart_restarts_the_actor():
    path = counter_file()
    a = Phoenix.options(max_restarts=1).remote(path)
    ray.get([a.incr.remote(), a.incr.remote()])
    ray.kill(a, no_restart=False)
    out(rebuilt(path, 2), after_restart(a.state.remote))
    # No restart is left: the next kill leaves it dead.
    ray.kill(a, no_restart=False)
    e = dead_error(a)
    out(type(e).__name__, count(path))


@case(timeout=120)
def kill_without_no_restart_of_an_actor_with_no_restarts():
    path = counter_file()
    a = Phoenix.remote(path)
    ray.get(a.incr.remote())
    ray.kill(a, no_restart=False)
    e = dead_error(a)
    out(type(e).__name__, count(path))


@case(timeout=120)
def kill_with_no_restart_ignores_max_restarts():
    path = counter_file()
    a = Phoenix.options(max_restarts=3).remote(path)
    ray.get(a.incr.remote())
    ray.kill(a)
    e = dead_error(a)
    out(type(e).__name__, count(path))


@case(timeout=120)
def exit_actor_ends_it_for_good():
    # The call fails with the actor's death; no restart, whatever max_restarts says; its message says why.
    path = counter_file()
    a = Phoenix.options(max_restarts=2).remote(path)
    ray.get(a.incr.remote())
    during = raised(ray.get, a.leave.remote(), timeout=60)
    after = dead_error(a)
    for e in (during, after):
        out(type(e).__name__, str(e).startswith("The actor died unexpectedly before finishing this task."),
            "exit_actor()" in str(e), "exit code 0" in str(e))
    out("exit_actor() is called" in str(during))
    time.sleep(1)
    out(count(path))


@case(timeout=120)
def sys_exit_zero_in_a_method_is_an_intended_exit():
    path = counter_file()
    a = Phoenix.options(max_restarts=2).remote(path)
    ray.get(a.incr.remote())
    during = raised(ray.get, a.sys_exit.remote(0), timeout=60)
    after = dead_error(a)
    out(type(during).__name__, type(after).__name__, "exit code 0" in str(after))
    time.sleep(1)
    out(count(path))


@case(timeout=120)
def sys_exit_with_an_error_code_restarts_the_actor():
    path = counter_file()
    a = Phoenix.options(max_restarts=2).remote(path)
    ray.get(a.incr.remote())
    # (Ray raises ActorUnavailableError here, the actor restarting; torus ActorDiedError.)
    e = raised(ray.get, a.sys_exit.remote(3), timeout=60)
    out(isinstance(e, ray.exceptions.RayActorError), after_restart(a.state.remote), count(path))


@ray.remote(max_concurrency=4)
class ThreadedLeaver:
    def slow(self, seconds):
        nap(seconds)
        return "finished"

    def leave(self):
        ray.actor.exit_actor()

    def ping(self):
        return "pong"


@ray.remote
class AsyncLeaver:
    async def slow(self, seconds):
        import asyncio
        await asyncio.sleep(seconds)
        return "finished"

    async def leave(self):
        ray.actor.exit_actor()

    async def ping(self):
        return "pong"


@case(timeout=120)
def exit_actor_of_concurrent_actors_lets_running_calls_end():
    for name, cls in (("threaded", ThreadedLeaver), ("async", AsyncLeaver)):
        a = cls.options(max_restarts=1).remote()
        ray.get(a.ping.remote())
        slow = a.slow.remote(2)
        time.sleep(0.5)
        during = raised(ray.get, a.leave.remote(), timeout=60)
        # (Ray raises ActorUnavailableError, which does not say why, for an async actor's call, and for a threaded
        # one's an ActorDiedError that says so only when its report wins a race. torus raises ActorDiedError saying
        # why for both.)
        out(name, ray.get(slow, timeout=60), isinstance(during, ray.exceptions.RayActorError))
        end = time.time() + 60
        while True:
            e = raised(ray.get, a.ping.remote(), timeout=60)
            if e is not None or time.time() > end:
                break
            time.sleep(0.2)
        out(type(e).__name__)


@ray.remote
def exits_outside_an_actor():
    try:
        ray.actor.exit_actor()
    except BaseException as e:  # noqa: BLE001 - the case compares it
        return type(e).__name__, str(e).startswith("exit_actor API is called on a non-actor worker")
    return None


@case
def exit_actor_outside_an_actor_is_a_type_error():
    e = raised(ray.actor.exit_actor)
    out(type(e).__name__, str(e).startswith("exit_actor API is called on a non-actor worker"))
    out(ray.get(exits_outside_an_actor.remote()))


@case
def was_current_actor_reconstructed_is_false_at_first():
    a = Phoenix.options(max_restarts=1).remote(counter_file())
    out(ray.get(a.state.remote()))


# --- owners ---


@ray.remote
class Keeper:
    def __init__(self):
        self.kept = None

    def keep(self, handles):
        self.kept = handles[0]

    def get(self):
        return [self.kept]


@ray.remote(max_retries=0)
def creates_and_exits(keeper, path):
    a = Phoenix.remote(path)
    ray.get(a.incr.remote())
    ray.get(keeper.keep.remote([a]))
    os._exit(1)


@ray.remote
class Parent:
    def make(self, path):
        self.child = Phoenix.remote(path)
        ray.get(self.child.incr.remote())
        return [self.child]


@case(timeout=180)
def actor_dies_with_the_task_worker_that_owns_it():
    keeper, path = Keeper.remote(), counter_file()
    e = raised(ray.get, creates_and_exits.remote(keeper, path))
    out(type(e).__name__)
    [orphan] = ray.get(keeper.get.remote())
    after = dead_error(orphan)
    out(type(after).__name__, isinstance(after, ray.exceptions.RayActorError), count(path))


@case(timeout=180)
def actor_dies_with_the_actor_that_owns_it():
    parent, path = Parent.remote(), counter_file()
    [child] = ray.get(parent.make.remote(path))
    out(ray.get(child.incr.remote()))
    ray.kill(parent)
    after = dead_error(child)
    out(type(after).__name__, count(path))


@case(timeout=180)
def actor_whose_owner_dies_is_not_restarted():
    parent, path = Parent.remote(), counter_file()
    [child] = ray.get(parent.make.remote(path))
    ray.kill(parent)
    out(type(dead_error(child)).__name__, count(path))


# --- cancellation ---


@ray.remote
def sleeps_marked(started, seconds, done=None):
    open(started, "w").close()
    try:
        nap(seconds)
    except KeyboardInterrupt:
        if done:
            open(done, "w").write("interrupted")
        raise
    if done:
        open(done, "w").write("finished")
    return seconds


@case(timeout=120)
def cancel_of_a_running_task_is_task_cancelled():
    d = tempfile.mkdtemp()
    ref = sleeps_marked.remote(os.path.join(d, "started"), 120, os.path.join(d, "done"))
    wait_for(os.path.join(d, "started"))
    ray.cancel(ref)
    # It raised TaskCancelledError where it ran: a RayTaskError(TaskCancelledError), its traceback ending there.
    e = raised(ray.get, ref, timeout=60)
    out(type(e).__name__, isinstance(e, ray.exceptions.TaskCancelledError), isinstance(e, ray.exceptions.RayTaskError),
        type(e.cause).__name__, str(e).rstrip().endswith("was cancelled."), wait_for(os.path.join(d, "done")),
        open(os.path.join(d, "done")).read())


@case(timeout=120)
def cancel_of_a_queued_task_never_runs_it():
    d = tempfile.mkdtemp()
    hold = sleeps_marked.options(num_cpus=2).remote(os.path.join(d, "hold"), 3)
    wait_for(os.path.join(d, "hold"))
    queued = sleeps_marked.remote(os.path.join(d, "queued"), 0)
    ray.cancel(queued)
    e = raised(ray.get, queued, timeout=60)
    out(type(e).__name__, ray.get(hold, timeout=60), os.path.exists(os.path.join(d, "queued")))


@case(timeout=120)
def cancelled_tasks_are_not_retried():
    d = tempfile.mkdtemp()
    ref = sleeps_marked.options(max_retries=3, retry_exceptions=True).remote(os.path.join(d, "started"), 120)
    wait_for(os.path.join(d, "started"))
    os.remove(os.path.join(d, "started"))
    ray.cancel(ref)
    e = raised(ray.get, ref, timeout=60)
    time.sleep(2)
    out(type(e).__name__, os.path.exists(os.path.join(d, "started")))


@case(timeout=120)
def force_cancel_kills_the_worker():
    d = tempfile.mkdtemp()
    ref = sleeps_marked.remote(os.path.join(d, "started"), 120, os.path.join(d, "done"))
    wait_for(os.path.join(d, "started"))
    ray.cancel(ref, force=True)
    e = raised(ray.get, ref, timeout=60)
    out(type(e).__name__, isinstance(e, ray.exceptions.RayError), os.path.exists(os.path.join(d, "done")))


@case(timeout=120)
def cancel_of_a_finished_task_does_nothing():
    ref = sleeps_marked.remote(counter_file(), 0)
    ray.get(ref)
    ray.cancel(ref)
    out(ray.get(ref))


@case
def cancel_of_a_non_ref_is_a_type_error():
    e = raised(ray.cancel, "not a ref")
    out(type(e).__name__, str(e).startswith("ray.cancel() only supported for object refs. For actors, try ray.kill()"))
