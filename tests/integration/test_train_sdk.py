"""torus.train from Python against a real `torus up` cluster: TorchTrainer and JaxTrainer run a function on every
worker of a gang run on a v6e 4x4 slice, with the distributed environment of the placement, checkpoints, restarts
from the newest checkpoint, and clear errors."""

import json
import os
import re
import signal
import subprocess
import textwrap

import pytest

from conftest import REPO
from test_tasks import PYTHON, cluster, driver_json, python_env, run_driver  # noqa: F401 - the module's cluster


def run_example(t, tmp_path, *args):
    proc = subprocess.run([PYTHON, str(REPO / "examples" / "train_torch_trainer.py"), *args],
                          env=python_env(t), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, f"example exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout, proc.stderr


def test_torch_trainer_example_trains_on_the_slice_and_resumes_after_a_failure(cluster, tmp_path):
    plain, out, err = run_example(cluster, tmp_path, "--storage-path", str(tmp_path / "runs"))
    assert plain["attempts"] == 1
    assert [m["epoch"] for m in plain["history"]] == [1, 2, 3, 4]
    last = plain["metrics"]
    assert last["world_size"] == 4 and last["samples"] == 512 and last["replicas_equal"] is True
    assert last["tpu_worker_id"] == "0"  # rank 0 is worker 0 of the slice
    assert last["accuracy"] > 0.9
    assert plain["checkpoint"] == str(tmp_path / "runs" / plain["name"] / "checkpoint_4")
    assert os.path.isfile(os.path.join(plain["checkpoint"], "state.pt"))
    assert "[torus] attempt 1: 4 workers" in err
    assert "SUCCEEDED" in err

    failed_once, out, err = run_example(cluster, tmp_path, "--fail-once", "--storage-path", str(tmp_path / "runs"))
    assert failed_once["attempts"] == 2
    assert "rank 1 fails once after epoch 2" in out + err
    assert "resuming from " + str(tmp_path / "runs" / failed_once["name"] / "checkpoint_2") in err
    # The second attempt starts after the committed epoch 2 and ends with the uninterrupted run's model.
    assert [m["epoch"] for m in failed_once["history"]] == [3, 4]
    assert failed_once["metrics"]["attempt"] == 2
    for key in ("loss", "accuracy", "samples", "replicas_equal"):
        assert failed_once["metrics"][key] == last[key], key


def test_jax_trainer_gives_each_worker_the_jax_and_tpu_environment_of_its_placement(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, f"""
        import json, os, torus
        from torus.train import ScalingConfig, RunConfig
        from torus.train.jax import JaxConfig, JaxTrainer

        def loop(config):
            ctx = torus.train.get_context()
            keys = ["JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "TPU_WORKER_ID",
                    "TPU_WORKER_HOSTNAMES", "TPU_VISIBLE_CHIPS", "MEGASCALE_NUM_SLICES", "TORUS_TRAIN_TEST"]
            env = {{k: os.environ.get(k) for k in keys}}
            env["rank"] = ctx.get_world_rank()
            env["local_rank"] = ctx.get_local_rank()
            env["node_rank"] = ctx.get_node_rank()
            with open(os.path.join(config["out"], f"rank{{ctx.get_world_rank()}}.json"), "w") as f:
                json.dump(env, f)
            torus.train.report({{"rank0": ctx.get_world_rank() == 0}})

        torus.init()
        # The environment alone (JAX without a platform to initialize; /usr/bin/python3 has no jax): real JAX runs
        # are in test_jax_trainer.py.
        result = JaxTrainer(loop, train_loop_config={{"out": {str(tmp_path)!r}}}, jax_config=JaxConfig(),
                            scaling_config=ScalingConfig(use_tpu=True, accelerator_type="v6e", topology="4x4",
                                                         num_workers=8, resources_per_worker={{"TPU": 2}}),
                            run_config=RunConfig(storage_path={str(tmp_path / "runs")!r})).fit()
        print(json.dumps({{"metrics": result.metrics, "checkpoint": result.checkpoint, "name": result.name}}))
    """, timeout=300)
    assert result["metrics"] == {"rank0": True}
    assert result["checkpoint"] is None
    assert result["name"].startswith("ray_train_run-")  # RunConfig's default name, as Ray's
    envs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(8)]
    coordinators = {e["JAX_COORDINATOR_ADDRESS"] for e in envs}
    assert len(coordinators) == 1 and coordinators.pop().count(":") == 1
    for r, e in enumerate(envs):
        assert e["rank"] == r and e["JAX_PROCESS_ID"] == str(r) and e["JAX_NUM_PROCESSES"] == "8"
        # Two workers per host, each on its own aligned pair of chips, numbered by host.
        assert e["local_rank"] == r % 2 and e["node_rank"] == r // 2
        assert e["TPU_VISIBLE_CHIPS"] == ["0,1", "2,3"][r % 2]
        # A worker holding part of a host is a one-host slice of its own (docs/training.md).
        assert e["TPU_WORKER_ID"] == "0" and e["TPU_WORKER_HOSTNAMES"] == "localhost"
        assert e["MEGASCALE_NUM_SLICES"] is None


def test_a_failing_function_raises_training_failed_error_with_its_cause(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        from torus.train import ScalingConfig, TrainingFailedError
        from torus.train.torch import TorchTrainer

        def loop():
            import torch.distributed as dist
            if dist.get_rank() == 1:
                raise ValueError("bad batch 7")
            dist.barrier()

        torus.init()
        try:
            TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2)).fit()
            print(json.dumps({"raised": False}))
        except TrainingFailedError as e:
            print(json.dumps({"raised": True, "message": str(e), "attempts": e.result.attempts}))
    """, timeout=300)
    assert result["raised"] is True
    assert result["attempts"] == 1
    assert "FAILED" in result["message"] and "rank 1" in result["message"]
    assert "ValueError: bad batch 7" in result["message"]


def test_torch_trainer_joins_cpu_workers_into_one_process_group(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import contextlib, io, json, torus
        from torus.train import ScalingConfig
        from torus.train.torch import TorchTrainer

        def loop(config):
            import torch, torch.distributed as dist
            print(f"hello from rank {dist.get_rank()}")
            t = torch.tensor([float(dist.get_rank() + 1)])
            dist.all_reduce(t)
            torus.train.report({"sum": t.item(), "world": dist.get_world_size(), "backend": dist.get_backend(),
                                "config": config, "device": str(torus.train.torch.get_device())})

        torus.init()
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):  # the ranks' output goes through sys.stdout (as in a notebook)
            result = TorchTrainer(loop, train_loop_config={"x": 1},
                                  scaling_config=ScalingConfig(num_workers=3, placement_strategy="SPREAD")).fit()
        print(json.dumps({"metrics": result.metrics, "captured": sorted(
            line for line in captured.getvalue().splitlines() if "hello" in line)}))
    """, timeout=300)
    assert result["metrics"] == {"sum": 6.0, "world": 3, "backend": "gloo", "config": {"x": 1}, "device": "cpu"}
    assert result["captured"] == ["[rank 0] hello from rank 0", "[rank 1] hello from rank 1",
                                  "[rank 2] hello from rank 2"]


def test_a_scaling_config_that_cannot_be_placed_names_the_field(cluster, tmp_path):
    rc, out, err = run_driver(cluster, tmp_path, """
        import torus
        from torus.train import ScalingConfig
        from torus.train.torch import TorchTrainer
        torus.init()
        for kwargs in [dict(use_tpu=True, accelerator_type="TPU-V6E", topology="4x4", num_workers=3),
                       dict(use_tpu=True, accelerator_type="TPU-V6E", topology="4x5", num_workers=5)]:
            try:
                TorchTrainer(lambda: None, scaling_config=ScalingConfig(**kwargs)).fit()
            except ValueError as e:
                print("ValueError:", e)
        try:
            TorchTrainer("train.py")
        except TypeError as e:
            print("TypeError:", e)
    """)
    assert rc == 0, err
    lines = out.strip().splitlines()
    # Ray Train's own check and words before anything reaches the head; then what only the head knows.
    assert lines[0] == ("ValueError: The configured `num_workers` (3) must be a multiple of 4 for the specified "
                        "topology (4x4). TPU workloads typically require symmetric resource distribution across all "
                        "slices to function correctly."), out
    assert lines[1].startswith('ValueError: TorchTrainer: topology "4x5" is not valid for TPU-V6E'), out
    assert lines[2] == "TypeError: train_loop_per_worker: a function is required, got str"


def test_the_worker_api_runs_standalone_outside_a_run(cluster, tmp_path):
    rc, out, err = run_driver(cluster, tmp_path, """
        import torus.train
        ctx = torus.train.get_context()
        print(ctx.get_world_rank(), ctx.get_world_size(), torus.train.get_checkpoint())
        torus.train.report({"loss": 0.5})
        try:
            torus.train.report({"loss": 1}, checkpoint="/tmp")
        except TypeError as e:
            print("TypeError:", e)
    """)
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "0 1 None"
    assert "0.5" in lines[1]
    assert lines[-1] == "TypeError: report: checkpoint must be a torus.train.Checkpoint, got str"


def test_ctrl_c_in_fit_stops_the_run(cluster, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import time, torus
        from torus.train import DataParallelTrainer, ScalingConfig

        def loop():
            print("started", flush=True)
            time.sleep(600)

        torus.init()
        DataParallelTrainer(loop, scaling_config=ScalingConfig(num_workers=2)).fit()
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "[rank 1] started" in line or "[rank 0] started" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    out = "".join(lines) + out
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in out
    run_id = re.search(r"submitted as (run-\w+)", out).group(1)
    assert "stopped run " in out
    status = json.loads(cluster.run("train", "status", run_id, "--json").stdout)
    assert status["status"] == "STOPPED"
