"""runtime_env: env_vars on tasks and actors and in ray.init (the job's, which a task's or actor's extend and
override), a job-level working_dir holding a module that tasks import, inheritance by nested tasks, and the errors
Ray itself gives for a malformed runtime_env (compared by type).

(Keys Ray accepts and torus refuses — pip, conda, uv, py_modules, ..., and keys Ray ignores — are not compared:
torus names them in a ValueError where Ray installs or ignores them.)"""

import os
import tempfile

import ray
from harness import case, out, raised


def _working_dir():
    path = tempfile.mkdtemp(prefix="working-dir-")
    with open(os.path.join(path, "helper_module.py"), "w") as f:
        f.write("VALUE = 42\n\ndef double(x):\n    return 2 * x\n")
    with open(os.path.join(path, "data.txt"), "w") as f:
        f.write("read from the working dir\n")
    return path


INIT = {"num_cpus": 2, "include_dashboard": False,
        "runtime_env": {"env_vars": {"JOB_ONLY": "job", "OVERRIDDEN": "job"}, "working_dir": _working_dir()}}
NAMES = ("JOB_ONLY", "OVERRIDDEN", "TASK_ONLY")


@ray.remote
def env(*names):
    return [os.environ.get(n) for n in names]


@ray.remote
def nested_env(*names):
    return ray.get(env.remote(*names))


@ray.remote
def uses_working_dir():
    import helper_module
    with open("data.txt") as f:
        return helper_module.VALUE, helper_module.double(21), f.read().strip()


@ray.remote
class Holder:
    def __init__(self):
        self.at_creation = os.environ.get("ACTOR_ONLY")

    def env(self, *names):
        return self.at_creation, [os.environ.get(n) for n in names]

    def child_env(self, *names):
        return ray.get(env.remote(*names))

    def import_helper(self):
        import helper_module
        return helper_module.VALUE


@case
def job_env_vars_reach_every_task():
    out(ray.get(env.remote(*NAMES)))


@case
def task_env_vars_extend_and_override_the_jobs():
    task = env.options(runtime_env={"env_vars": {"OVERRIDDEN": "task", "TASK_ONLY": "task"}})
    out(ray.get(task.remote(*NAMES)), ray.get(env.remote(*NAMES)))


@ray.remote(runtime_env={"env_vars": {"TASK_ONLY": "decorator"}})
def decorated_env(*names):
    return [os.environ.get(n) for n in names]


@case
def env_vars_in_the_decorator_and_in_options():
    out(ray.get(decorated_env.remote(*NAMES)),
        ray.get(decorated_env.options(runtime_env={"env_vars": {"TASK_ONLY": "options"}}).remote(*NAMES)))


@case
def nested_tasks_inherit_their_parents_env():
    parent = nested_env.options(runtime_env={"env_vars": {"TASK_ONLY": "parent"}})
    out(ray.get(parent.remote(*NAMES)))
    # An actor's tasks too; a child's own env_vars still go over its parent's.
    a = Holder.options(runtime_env={"env_vars": {"TASK_ONLY": "actor"}}).remote()
    out(ray.get(a.child_env.remote(*NAMES)))
    out(ray.get(nested_env.options(runtime_env={"env_vars": {"OVERRIDDEN": "parent"}}).remote(*NAMES)))


@case
def actor_env_vars_hold_for_its_life():
    a = Holder.options(runtime_env={"env_vars": {"ACTOR_ONLY": "actor", "OVERRIDDEN": "actor"}}).remote()
    out(ray.get(a.env.remote("ACTOR_ONLY", "JOB_ONLY", "OVERRIDDEN")))
    plain = Holder.remote()
    out(ray.get(plain.env.remote("ACTOR_ONLY", "JOB_ONLY", "OVERRIDDEN")))


@case
def working_dir_modules_and_files_are_there():
    out(ray.get(uses_working_dir.remote()))
    # A task's own env_vars keep the job's working_dir.
    out(ray.get(uses_working_dir.options(runtime_env={"env_vars": {"TASK_ONLY": "x"}}).remote()))
    out(ray.get(Holder.remote().import_helper.remote()))


@case
def malformed_runtime_envs_are_refused():
    def error(options):
        e = raised(lambda: env.options(runtime_env=options).remote("TASK_ONLY"))
        return None if e is None else type(e).__name__

    out(error("not a dict"), error(["env_vars"]), error({"env_vars": ["A"]}), error({"env_vars": {"A": 1}}),
        error({"env_vars": {1: "A"}}), error({"working_dir": 5}), error({"pip": ["x"], "conda": "y"}))
    e = raised(lambda: Holder.options(runtime_env={"env_vars": {"A": 1}}).remote())
    out(type(e).__name__)


@case
def env_var_values_are_strings():
    e = raised(lambda: env.options(runtime_env={"env_vars": {"A": 1}}).remote())
    out(str(e))
    e = raised(lambda: env.options(runtime_env={"env_vars": {2: "A"}}).remote())
    out(str(e))
    e = raised(lambda: env.options(runtime_env={"env_vars": ["A"]}).remote())
    out(str(e))
    e = raised(lambda: env.options(runtime_env={"working_dir": 5}).remote())
    out(str(e))
