"""Workers run on bundles: the agent starts a worker only on a bundle committed to its group and gives it exactly that
bundle's devices (TPU_VISIBLE_CHIPS and bounds, CUDA_VISIBLE_DEVICES), and a released bundle keeps its devices until
its workers are gone."""

import json
import os
import signal
import time

from conftest import pid_alive, wait_until
from test_gang_runs import V6E_4X4, env_dump, finish, rank_logs, run_view, start_train, worker_pids
from test_head_restart import assert_ledgers_equal_head_view, http

FAST = ("--node-timeout-ms", "1500")
ON_GPU_0 = json.dumps({"torus.io/node-id": "gpu-0"})


def job(torus, job_id):
    return http(torus, "GET", f"/api/jobs/{job_id}")[1]


def job_logs(torus, job_id):
    return http(torus, "GET", f"/api/jobs/{job_id}/logs")[1]["logs"]


def test_a_gpu_job_and_a_gpu_gang_on_one_host_get_distinct_gpus(torus, tmp_path):
    torus.up()
    code, reply = http(torus, "POST", "/api/jobs/", {
        "entrypoint": 'echo "CVD=$CUDA_VISIBLE_DEVICES"; sleep 30', "submission_id": "gpu-job",
        "entrypoint_num_gpus": 1, "entrypoint_label_selector": {"torus.io/node-id": "gpu-0"}})
    assert code == 200, reply
    wait_until(lambda: "CVD=" in job_logs(torus, "gpu-job"), 15, message="the job to print its devices")
    job_gpus = job_logs(torus, "gpu-job").split("CVD=")[1].split()[0]
    gang = start_train(torus, tmp_path, "--use-gpu", "--num-workers", "1", "--label-selector", ON_GPU_0, "--name",
                       "gpu-gang", command=["/usr/bin/python3", env_dump(tmp_path), "/bin/sleep", "30"])
    try:
        run = wait_until(lambda: (v := run_view(torus, "gpu-gang")) and v["status"] == "RUNNING" and v, 20,
                         message="the gang to run")
        env_line = wait_until(lambda: [l for l in rank_logs(torus, run["run_id"], 0).splitlines()
                                       if l.startswith("ENV ")], 10, message="the worker's environment")
        gang_gpus = json.loads(env_line[0][len("ENV "):])["CUDA_VISIBLE_DEVICES"]
        assert run["attempts"][-1]["ranks"][0]["node_id"] == "gpu-0"
        assert sorted([job_gpus, gang_gpus]) == ["0", "1"], (job_gpus, gang_gpus)
        assert run["attempts"][-1]["ranks"][0]["gpus"] == [int(gang_gpus)]
    finally:
        torus.run("train", "stop", "gpu-gang")
        http(torus, "POST", "/api/jobs/gpu-job/stop")
        finish(gang, 30)


def test_chips_of_a_degraded_slice_are_not_given_away_while_its_workers_still_run(torus, tmp_path):
    """A host of a run's slice dies: the slice is released whole, but its surviving workers take a grace period to
    stop (these ignore SIGTERM). A job placed at once on a surviving host's chips must start only after the old
    worker there is gone."""
    torus.up(*FAST)
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "stubborn",
                       command=["sh", "-c", "trap '' TERM; sleep 120"])
    try:
        run = wait_until(lambda: (v := run_view(torus, "stubborn")) and v["status"] == "RUNNING" and
                         all(worker_pids(v["run_id"], r) for r in range(4)) and v, 30, message="the run to start")
        ranks = run["attempts"][0]["ranks"]
        slice_name, rank0_node = ranks[0]["slice"], ranks[0]["node_id"]
        old_worker = min(worker_pids(run["run_id"], 0))
        os.kill(torus.pid_of(ranks[3]["node_id"]), signal.SIGKILL)
        wait_until(lambda: [s for s in torus.status()["slices"] if s["name"] == slice_name][0]["state"] == "DEGRADED",
                   10, message=f"{slice_name} to be DEGRADED")
        code, reply = http(torus, "POST", "/api/jobs/", {
            "entrypoint": f"kill -0 {old_worker} 2>/dev/null && echo SHARED || echo ALONE",
            "submission_id": "successor", "entrypoint_resources": {"TPU": 4},
            "entrypoint_label_selector": {"torus.io/node-id": rank0_node}})
        assert code == 200, reply
        assert pid_alive(old_worker), "the old worker must still be stopping for this test to mean anything"
        done = wait_until(lambda: (lambda j: j if j["status"] in ("SUCCEEDED", "FAILED") else None)(
            job(torus, "successor")), 30, message="the successor job to end")
        assert done["status"] == "SUCCEEDED", done
        assert job_logs(torus, "successor").strip() == "ALONE"
        assert not pid_alive(old_worker)
        finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_burst_of_jobs_with_resources_all_run(torus):
    """Each job's group is submitted with it, so a group placed at once can never leave its job PENDING."""
    torus.up()
    ids = []
    for i in range(40):
        code, reply = http(torus, "POST", "/api/jobs/", {"entrypoint": "true", "entrypoint_resources": {"CPU": 0.1},
                                                         "submission_id": f"burst-{i}"})
        assert code == 200, reply
        ids.append(reply["submission_id"])
    wait_until(lambda: all(job(torus, i)["status"] == "SUCCEEDED" for i in ids), 60,
               message="every job of the burst to succeed")
    assert_ledgers_equal_head_view(torus)
