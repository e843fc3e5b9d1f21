"""Ray Train scripts and the Ray-on-TPU guides' programs on simulated TPU slices, run unchanged by torus (`ray` resolved to torus): JaxTrainer with real
JAX (CPU devices, one per chip) whose jax.distributed spans every host of one or two v6e 4x4 slices, a worker killed
mid-run and the gang resumed to the same final parameters, and TorchTrainer's TPU backend failing by name instead of
falling back to the CPU.

The workers run the development venv's interpreter (it has jax; Debian's python3 does not), as a driver started from
a venv runs its workers with that venv's.
The Ray-on-TPU guides' other programs (examples/ray_tpu/) run here too: a TorchTrainer job submitted with Ray's own
`ray job submit` and with `torus job submit`, actors on every host of a slice_placement_group joined in an
allreduce, and tasks pinned to a slice by its ray.io/tpu-slice-name label."""

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from conftest import BIN_DIR, REPO, Torus, wait_until

SPEC = REPO / "tests" / "integration" / "specs" / "jax.yaml"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
EXAMPLE = REPO / "examples" / "train_jax.py"
GUIDE = REPO / "examples" / "ray_tpu"


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: run scripts/setup.sh (it makes the development venv with jax)")
    t = Torus(tmp_path_factory.mktemp("jax") / "torus")
    # As a user who activated the venv and put torus's `ray` first: the cluster's jobs see both.
    t.env["PATH"] = os.pathsep.join([str(VENV_PYTHON.parent), t.env.get("PATH", "")])
    t.env["PYTHONPATH"] = ray_env(t)["PYTHONPATH"]
    try:
        t.up(spec=SPEC)
        yield t
    finally:
        t.cleanup()


def ray_env(t):
    env = dict(t.env)
    paths = [str(REPO / "python" / "as_ray"), str(REPO / "python"), str(BIN_DIR.parent / "python")]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_example(t, tmp_path, *args, timeout=300):
    proc = subprocess.run([str(VENV_PYTHON), str(EXAMPLE), "--address", "auto", *args], env=ray_env(t),
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, f"example exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def run_script(t, tmp_path, source, timeout=300):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([str(VENV_PYTHON), str(script)], env=ray_env(t), capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def test_jax_psum_spans_every_chip_of_two_slices_with_megascale_env(slices, tmp_path):
    # 8 hosts (2 slices x 4), 4 chips each: 8 JAX processes, 32 devices; device d of process p holds p + 1.
    proc = run_script(slices, tmp_path, f"""
        import json, os
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.v2.jax import JaxTrainer

        def loop(config):
            import jax
            import numpy as np
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            ones = np.full((jax.local_device_count(),), float(jax.process_index() + 1), dtype=np.float32)
            total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(ones)
            keys = ["MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_PORT",
                    "TPU_WORKER_ID", "TORCH_TPU_TOPOLOGY", "JAX_PLATFORMS"]
            out = {{k: os.environ.get(k) for k in keys}}
            out.update(rank=ray.train.get_context().get_world_rank(), process_index=jax.process_index(),
                       process_count=jax.process_count(), devices=jax.device_count(),
                       local_devices=jax.local_device_count(), psum=[float(x) for x in total])
            with open(os.path.join(config["out"], f"rank{{out['rank']}}.json"), "w") as f:
                json.dump(out, f)
            ray.train.report({{"psum": float(total[0])}})

        ray.init(address="auto")
        result = JaxTrainer(loop, train_loop_config={{"out": {str(tmp_path)!r}}},
                            scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                                         num_workers=8),
                            run_config=RunConfig(storage_path={str(tmp_path / "runs")!r}, worker_runtime_env={{
                                "env_vars": {{"JAX_PLATFORMS": "cpu",
                                             "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}}}})).fit()
        print(json.dumps(result.metrics))
    """)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"psum": 144.0}  # 4 x (1 + ... + 8)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(8)]
    coordinator = ranks[0]["MEGASCALE_COORDINATOR_ADDRESS"]
    assert coordinator and ":" not in coordinator  # rank 0's host, no port (as Ray sets it)
    for r, got in enumerate(ranks):
        assert got["process_index"] == r and got["process_count"] == 8, got
        assert got["devices"] == 32 and got["local_devices"] == 4, got
        assert got["psum"] == [144.0] * 4, got
        assert got["MEGASCALE_COORDINATOR_ADDRESS"] == coordinator
        assert got["MEGASCALE_NUM_SLICES"] == "2" and got["MEGASCALE_SLICE_ID"] == str(r // 4), got
        assert got["MEGASCALE_PORT"] == "8081" and got["TPU_WORKER_ID"] == str(r % 4), got
        assert got["TORCH_TPU_TOPOLOGY"] == "4x4" and got["JAX_PLATFORMS"] == "cpu", got


def test_jax_example_killed_worker_resumes_the_gang_to_the_same_final_parameters(slices, tmp_path):
    plain, err = run_example(slices, tmp_path, "--storage-path", str(tmp_path / "runs"), "--name", "plain")
    metrics = plain["metrics"]
    assert plain["attempts"] == 1
    assert metrics["step"] == 12 and metrics["processes"] == 4 and metrics["devices"] == 16
    assert metrics["psum"] == metrics["expected_psum"] == 40.0  # 4 x (1 + 2 + 3 + 4)
    assert metrics["loss"] < 0.1
    assert plain["checkpoint"] == str(tmp_path / "runs" / "plain" / "checkpoint_12")
    assert "[torus] attempt 1: 4 workers" in err

    pids = tmp_path / "pids"
    pids.mkdir()
    runs = tmp_path / "runs"
    proc = subprocess.Popen([str(VENV_PYTHON), str(EXAMPLE), "--address", "auto", "--storage-path", str(runs),
                             "--name", "killed", "--step-sleep", "0.4", "--pid-dir", str(pids)],
                            env=ray_env(slices), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        wait_until(lambda: (runs / "killed" / "checkpoint_6").is_dir(), 120, interval=0.1,
                   message="the run's checkpoint of step 6")
        victim = int((pids / "rank2.pid").read_text())
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    killed = json.loads(out.strip().splitlines()[-1])
    assert killed["attempts"] == 2
    assert "rank 2 on " in err and "was killed by signal 9 (SIGKILL)" in err, err
    assert "resuming from " + str(runs / "killed" / "checkpoint_") in err, err
    # Resumed from a checkpoint of step 6 or later, it ends where the uninterrupted run ended, bit for bit.
    assert killed["metrics"]["step"] == 12
    assert killed["metrics"]["params_digest"] == metrics["params_digest"]
    assert killed["metrics"]["loss"] == metrics["loss"]


def test_torch_trainer_on_a_tpu_slice_fails_naming_torch_tpu_and_trains_with_gloo_when_asked(slices, tmp_path):
    source = f"""
        import json, os, sys
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        def loop():
            import torch
            import torch.distributed as dist
            t = torch.ones(1) * (dist.get_rank() + 1)
            dist.all_reduce(t)
            keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCH_TPU_TOPOLOGY",
                    "TORCH_TPU_SLICEBUILDER_ADDRESSES", "TPU_WORKER_HOSTNAMES"]
            env = {{k: os.environ.get(k) for k in keys}}
            env.update(backend=dist.get_backend(), sum=float(t[0]),
                       device=str(ray.train.torch.get_device()))
            with open(os.path.join({str(tmp_path)!r}, f"rank{{dist.get_rank()}}.json"), "w") as f:
                json.dump(env, f)

        ray.init(address="auto")
        config = TorchConfig(backend="gloo") if sys.argv[1] == "gloo" else None
        try:
            TorchTrainer(loop, torch_config=config,
                         scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                                      num_workers=4),
                         run_config=RunConfig(storage_path={str(tmp_path / "runs")!r})).fit()
            print("SUCCEEDED")
        except ray.train.TrainingFailedError as e:
            print("FAILED", str(e).splitlines()[0])
    """
    script = tmp_path / "tpu_backend.py"
    script.write_text(textwrap.dedent(source))
    started = time.monotonic()
    default = subprocess.run([str(VENV_PYTHON), str(script), "default"], env=ray_env(slices), capture_output=True,
                             text=True, timeout=180, cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    # The default backend on TPUs is tpu_dist: without torch_tpu the run fails, naming it, well before any timeout.
    last = default.stdout.strip().splitlines()[-1]
    assert last.startswith("FAILED "), default.stdout
    assert "The `torch_tpu` module is required to use PyTorch TPU distributed training." in last, last
    assert time.monotonic() - started < 120
    assert not (tmp_path / "rank0.json").exists()

    gloo = subprocess.run([str(VENV_PYTHON), str(script), "gloo"], env=ray_env(slices), capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert gloo.stdout.strip().splitlines()[-1] == "SUCCEEDED", gloo.stdout + gloo.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    hosts = ranks[0]["TPU_WORKER_HOSTNAMES"].split(",")
    assert len(hosts) == 4
    for r, env in enumerate(ranks):
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == "4" and env["LOCAL_RANK"] == "0", env
        assert env["MASTER_ADDR"] == hosts[0] and env["MASTER_PORT"], env
        assert env["backend"] == "gloo" and env["sum"] == 10.0 and env["device"] == "cpu", env
        assert env["TORCH_TPU_TOPOLOGY"] == "4x4", env
        assert env["TORCH_TPU_SLICEBUILDER_ADDRESSES"] == ",".join(f"{h}:8471" for h in hosts), env


def test_a_torch_xla_program_without_torch_xla_fails_at_once_with_the_import_error(slices, tmp_path):
    proc = run_script(slices, tmp_path, f"""
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        def loop():
            import torch_xla.core.xla_model as xm
            device = xm.xla_device()

        ray.init(address="auto")
        try:
            TorchTrainer(loop, torch_config=TorchConfig(backend="gloo"),
                         scaling_config=ScalingConfig(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4",
                                                      num_workers=4),
                         run_config=RunConfig(storage_path={str(tmp_path / "runs")!r})).fit()
        except ray.train.TrainingFailedError as e:
            print("FAILED", str(e).splitlines()[0])
    """, timeout=120)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("FAILED ") and "ModuleNotFoundError: No module named 'torch_xla'" in last, last


def run_guide(t, tmp_path, name):
    proc = subprocess.run([str(VENV_PYTHON), str(GUIDE / name), "--address", "auto"], env=ray_env(t),
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_guide_slice_placement_group_actors_allreduce_one_per_host(slices, tmp_path):
    got = run_guide(slices, tmp_path, "slice_actors.py")
    assert got["num_bundles"] == 4 and got["chips_per_host"] == 4
    results = got["results"]
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert all(r["sum"] == 10.0 for r in results), results  # 1 + 2 + 3 + 4
    assert len({r["node"] for r in results}) == 4  # one actor per host
    assert len({r["tpu_name"] for r in results}) == 1  # all on one slice
    assert sorted(r["tpu_worker_id"] for r in results) == ["0", "1", "2", "3"]


def test_guide_label_selector_pins_tasks_to_a_slice_by_name(slices, tmp_path):
    got = run_guide(slices, tmp_path, "label_selector_task.py")
    assert got["slices"] == ["v6e-0", "v6e-1"] and got["slice"] == "v6e-1"
    assert len(got["hosts"]) == 4
    for task in got["tasks"]:
        assert task["tpu_name"] == "v6e-1" and task["node"] in got["hosts"], task
    assert got["worker0"]["tpu_name"] == "v6e-1" and got["worker0"]["tpu_worker_id"] == "0"


def test_guide_torch_job_submitted_with_rays_cli_and_with_torus_job_submit(slices, tmp_path):
    session = slices.session
    url = "http://" + (session / "dashboard_address").read_text().strip()
    token = (session / "token").read_text().strip()
    ray_cli = subprocess.run(
        [str(VENV_PYTHON.parent / "ray"), "job", "submit", "--address", url, "--working-dir", str(GUIDE), "--",
         "python", "torch_job.py", "--storage-path", str(tmp_path / "runs"), "--name", "ray-cli"],
        # Ray's own client (PYTHONPATH without torus's `ray`); the job's driver gets the cluster's environment.
        env=dict({k: v for k, v in slices.env.items() if k != "PYTHONPATH"}, RAY_AUTH_MODE="token",
                 RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0"),
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ray_cli.returncode == 0, ray_cli.stdout + ray_cli.stderr
    assert "succeeded" in ray_cli.stdout, ray_cli.stdout
    summary = json.loads([line for line in ray_cli.stdout.splitlines() if line.startswith('{"metrics"')][-1])
    assert summary["metrics"]["epoch"] == 3 and summary["metrics"]["world_size"] == 2
    assert summary["metrics"]["loss"] < 0.05
    assert summary["checkpoint"] == str(tmp_path / "runs" / "ray-cli" / "checkpoint_3")

    torus_cli = slices.run("job", "submit", "--working-dir", GUIDE, "--", "python", "torch_job.py",
                           "--storage-path", tmp_path / "runs", "--name", "torus-cli", timeout=300)
    assert torus_cli.returncode == 0, torus_cli.stdout + torus_cli.stderr
    summary = json.loads([line for line in torus_cli.stdout.splitlines() if line.startswith('{"metrics"')][-1])
    assert summary["metrics"]["epoch"] == 3 and summary["metrics"]["world_size"] == 2
    assert summary["checkpoint"] == str(tmp_path / "runs" / "torus-cli" / "checkpoint_3")
