"""The head's journal: kill -9 of torus-head at a bad moment, then `torus head restart`, loses nothing and leaks
nothing. After each restart the ledgers of all agents equal the head's view (every bundle a live group holds is
committed on its node, and nothing else is), and every acknowledged placement group, job and run exists with its
state; running jobs and runs are adopted (same attempt, same workers, logs continue)."""

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from conftest import REPO, binary, pid_alive, wait_until
from test_gang_runs import (PYTHON, TORCH_ARGS, TRAIN_TORCH, V6E_4X4, final_loss, finish, run_view, start_train,
                            storage, train_ok, worker_pids)

FAST = ("--node-timeout-ms", "1500")


def kill_head(torus):
    """SIGKILL of the session's head; waits until it is gone."""
    pid = torus.pid_of("head", role="head")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 5, message="the head to exit")
    return pid


def restart_head(torus):
    """`torus head restart`, asserted to succeed; waits until every agent registered with the new head."""
    result = torus.ok("head", "restart")
    assert "torus head restarted at " in result.stdout, result.stdout
    wait_until(lambda: (lambda s: s if s["nodes_alive"] == 16 else None)(torus.status()), 20,
               message="every agent to register with the restarted head")
    return result


def http(torus, method, path, body=None):
    """A request to the head's HTTP API with the token; (status, parsed JSON or text)."""
    import urllib.error
    import urllib.request
    address = (torus.session / "dashboard_address").read_text().strip()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {torus.token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def groups(torus):
    return json.loads(torus.ok("pg", "list", "--all", "--json").stdout)


def head_view(torus):
    """Counter of (node, group id, slice) over every bundle a live group holds."""
    held = Counter()
    for g in groups(torus):
        if g["state"] in ("REMOVED", "FAILED"):
            continue
        for b in g["bundles"]:
            if b.get("node_id"):
                held[(b["node_id"], g["id"], b.get("slice_name", ""))] += 1
    return held


def agents_view(torus):
    """Counter of (node, group id, slice) over every committed, not released bundle of every agent's ledger."""
    held = Counter()
    for n in torus.status()["nodes"]:
        if n["state"] != "ALIVE":
            continue
        ledger = json.loads(torus.ok("node", "ledger", n["node_id"], "--json").stdout)
        for e in ledger["entries"]:
            assert e["committed"], f"{n['node_id']} still holds an uncommitted prepare: {e}"
            if e.get("released"):
                continue
            group, _, slice_name = e["group_id"].partition("/")
            held[(n["node_id"], group, slice_name)] += 1
    return held


def assert_ledgers_equal_head_view(torus, timeout=15):
    """Every agent holds exactly what the head's live groups hold there (releases and reconciles may take a moment
    after a restart; nothing may stay in between)."""
    def equal():
        head, agents = head_view(torus), agents_view(torus)
        return head == agents or None
    try:
        wait_until(equal, timeout, interval=0.2, message="the agents' ledgers to equal the head's view")
    except BaseException:
        head, agents = head_view(torus), agents_view(torus)
        print("held by the head only:", head - agents)
        print("held by agents only:", agents - head)
        raise


def waiting_groups_settle(torus, timeout=20):
    wait_until(lambda: all(g["state"] in ("CREATED", "REMOVED", "FAILED") for g in groups(torus)), timeout,
               message="every group to be CREATED or ended")


# (a) A storm of placement-group creates and removes from 8 clients.

def test_restart_during_a_storm_of_group_creates_and_removes(torus):
    torus.up(*FAST)
    created, removed, unsure, errors = {}, set(), set(), Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def client(i):
        n = 0
        while not stop.is_set():
            name = f"storm-{i}-{n}"
            n += 1
            result = torus.run("pg", "create", "--bundles", '[{"CPU": 0.1}, {"CPU": 0.1}]', "--strategy", "SPREAD",
                               "--name", name, "--json", timeout=30)
            if result.returncode != 0:
                errors[result.stderr.strip()[:60]] += 1
                time.sleep(0.05)
                continue
            group = json.loads(result.stdout)
            with lock:
                created[group["id"]] = name
            if n % 2 == 0:  # every other group is removed again
                gone = torus.run("pg", "remove", group["id"], timeout=30)
                with lock:
                    # A removal that failed (the head died under it) may or may not have been made.
                    (removed if gone.returncode == 0 else unsure).add(group["id"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(created) >= 20, 60, message="the storm to get going")
        kill_head(torus)
        time.sleep(0.5)  # clients fail meanwhile; what they were told failed may or may not exist
        restart_head(torus)
        wait_until(lambda: len(created) >= 60, 60, message="the storm to go on after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(60)

    waiting_groups_settle(torus)
    by_id = {g["id"]: g for g in groups(torus)}
    for group_id, name in created.items():
        assert group_id in by_id, f"acknowledged group {group_id} ({name}) was lost"
        expected = {"REMOVED", "CREATED"} if group_id in unsure else {"REMOVED" if group_id in removed else "CREATED"}
        assert by_id[group_id]["state"] in expected, by_id[group_id]
    assert_ledgers_equal_head_view(torus)


# (b) Mid two-phase commit of a 2-slice reservation.

def test_restart_mid_reservation_of_two_slices_leaks_nothing(torus):
    torus.up(*FAST, "--agent-rpc-timeout-ms", "4000")
    # A paused host of v6e-1 holds up the prepare round: the other seven hosts hold prepared bundles meanwhile.
    paused = torus.pid_of("v6e-1-w3")
    os.kill(paused, signal.SIGSTOP)
    try:
        torus.ok("slice", "reserve", *V6E_4X4, "--num-slices", "2", "--name", "two", "--json")
        wait_until(lambda: any(e for e in json.loads(torus.ok("node", "ledger", "v6e-0-w0", "--json").stdout)
                               ["entries"]), 10, message="the prepares to reach the agents")
        prepared = json.loads(torus.ok("node", "ledger", "v6e-0-w0", "--json").stdout)["entries"]
        assert not prepared[0]["committed"], prepared
        kill_head(torus)
    finally:
        os.kill(paused, signal.SIGCONT)
    restart_head(torus)
    group = wait_until(lambda: (lambda g: g if g["state"] == "CREATED" else None)(
        json.loads(torus.ok("pg", "get", "two", "--json").stdout)), 30, message="the reservation to complete")
    assert sorted(group["slices"]) == ["v6e-0", "v6e-1"]
    assert_ledgers_equal_head_view(torus)


# (c) While a 4-host PyTorch gang run trains.

def test_gang_run_survives_a_head_restart_in_its_same_attempt(torus, tmp_path):
    torus.up(*FAST)
    reference = train_ok(torus, tmp_path, *V6E_4X4, "--name", "reference",
                         command=[PYTHON, TRAIN_TORCH, *TORCH_ARGS])
    slow = [a if a != "0.05" else "0.3" for a in TORCH_ARGS]  # the same steps and seed, slower
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "restarted", command=[PYTHON, TRAIN_TORCH, *slow])
    try:
        run = wait_until(lambda: (v := run_view(torus, "restarted")) and v["checkpoints"] and v, 60,
                         message="a committed checkpoint")
        assert run["status"] == "RUNNING" and run["attempt"] == 1
        pids = {rank: worker_pids(run["run_id"], rank) for rank in range(4)}
        kill_head(torus)
        time.sleep(1.5)  # long enough for `torus train`, which follows the output, to find the head gone
        restart_head(torus)
        code, out, err = finish(proc, 180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert "[torus] the head is unreachable" in err and "[torus] the head is back" in err, err
    after = run_view(torus, "restarted")
    assert after["status"] == "SUCCEEDED", after
    assert after["attempt"] == 1 and after["failures"] == 0 and len(after["attempts"]) == 1, after
    assert all(after["attempts"][0]["ranks"][r]["pid"] in pids[r] for r in range(4)), (after, pids)
    assert final_loss(out) == final_loss(reference.stdout)
    assert_ledgers_equal_head_view(torus)


# (d) While a job runs.

def test_running_job_keeps_its_status_and_full_log(torus):
    torus.up(*FAST)
    code, submitted = http(torus, "POST", "/api/jobs/", {
        "entrypoint": "for i in $(seq 1 40); do echo line $i; sleep 0.1; done",
        "entrypoint_resources": {"CPU": 1}, "submission_id": "across-restart", "metadata": {"owner": "test"}})
    assert code == 200, submitted
    running = wait_until(lambda: (lambda j: j if j["status"] == "RUNNING" else None)(
        http(torus, "GET", "/api/jobs/across-restart")[1]), 10, message="the job to run")
    kill_head(torus)
    restart_head(torus)
    details = http(torus, "GET", "/api/jobs/across-restart")[1]
    assert details["status"] in ("RUNNING", "SUCCEEDED"), details
    for field in ("submission_id", "entrypoint", "start_time", "metadata", "driver_info", "driver_node_id"):
        assert details[field] == running[field], field
    done = wait_until(lambda: (lambda j: j if j["status"] == "SUCCEEDED" else None)(
        http(torus, "GET", "/api/jobs/across-restart")[1]), 30, message="the job to succeed")
    assert done["driver_exit_code"] == 0
    logs = http(torus, "GET", "/api/jobs/across-restart/logs")[1]["logs"]
    assert logs.splitlines() == [f"line {i}" for i in range(1, 41)]
    assert_ledgers_equal_head_view(torus)


# (e) A worker died while the head was away.

def test_worker_that_died_while_the_head_was_away_restarts_the_run(torus, tmp_path):
    torus.up(*FAST)
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "sleepy", "--max-failures", "1",
                       command=["sh", "-c", "sleep 60"])
    try:
        run = wait_until(lambda: (v := run_view(torus, "sleepy")) and v["status"] == "RUNNING" and
                         all(worker_pids(v["run_id"], r) for r in range(4)) and v, 30, message="the run to start")
        kill_head(torus)
        victim = worker_pids(run["run_id"], 2)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not pid_alive(victim), 5, message="rank 2 to die")
        time.sleep(1)  # the agent reports the exit into the void for a while
        restart_head(torus)
        after = wait_until(lambda: (v := run_view(torus, "sleepy")) and v["attempt"] == 2 and
                           v["status"] == "RUNNING" and v, 30, message="attempt 2")
        assert after["failures"] == 1
        ended = after["attempts"][0]
        assert ended["end_reason"].startswith(
            f"rank 2 on {ended['ranks'][2]['node_id']} was killed by signal 9 (SIGKILL) from outside torus"), ended
        torus.ok("train", "stop", "sleepy")
        finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_ledgers_equal_head_view(torus)


def test_start_head_on_an_existing_state_dir_brings_the_cluster_back(torus):
    """`torus start --head --state-dir D` on the state of a head that died serves its groups, token and all."""
    torus.start_head("--no-local-node")
    first_session = torus.session
    state_dir = first_session / "state"
    group = json.loads(torus.ok("pg", "create", "--bundles", '[{"no_such_resource": 1}]', "--name", "kept",
                                "--json").stdout)
    token = torus.token
    kill_head(torus)
    torus.start_head("--no-local-node", "--state-dir", state_dir)
    assert torus.session != first_session
    assert torus.token == token
    back = json.loads(torus.ok("pg", "get", "kept", "--json").stdout)
    assert back["id"] == group["id"] and back["state"] == "PENDING"
    assert (state_dir / "journal.db").exists()


def test_agents_stop_their_workers_once_the_head_is_gone_longer_than_the_grace(torus, tmp_path):
    """An agent keeps its workers while the head is away, for --head-grace-ms; after that it stops them (SIGTERM) and
    releases its bundles, and the head that comes back learns how the job's entrypoint ended."""
    torus.start_head("--no-local-node")
    torus.spawn([binary("torus-node"), "--address", torus.address, "--token-file", torus.session / "token",
                 "--node-id", "graceful", "--work-dir", tmp_path / "work", "--metadata-url", "off",
                 "--head-grace-ms", "2000"], tmp_path / "agent.log")
    wait_until(lambda: torus.status()["nodes_alive"] == 1, 10, message="the agent to join")
    code, reply = http(torus, "POST", "/api/jobs/", {"entrypoint": "sleep 120", "submission_id": "orphan",
                                                    "entrypoint_resources": {"CPU": 1}})
    assert code == 200, reply
    running = wait_until(lambda: (lambda j: j if j["status"] == "RUNNING" else None)(
        http(torus, "GET", "/api/jobs/orphan")[1]), 10, message="the job to run")
    pid = int(running["driver_info"]["pid"])
    kill_head(torus)
    time.sleep(1)
    assert pid_alive(pid), "within the grace the worker keeps running"
    wait_until(lambda: not pid_alive(pid), 10, message="the agent to stop its worker after the grace")
    torus.ok("head", "restart")
    done = wait_until(lambda: (lambda j: j if j["status"] != "RUNNING" else None)(
        http(torus, "GET", "/api/jobs/orphan")[1]), 15, message="the job to end")
    assert done["status"] == "FAILED", done
    assert (done["error_type"], done["message"]) == ("JOB_ENTRYPOINT_COMMAND_ERROR",
                                                     "Job entrypoint was stopped by torus (signal 15)."), done
    ledger = json.loads(torus.ok("node", "ledger", "graceful", "--json").stdout)
    assert ledger["entries"] == [], ledger
