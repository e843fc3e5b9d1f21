"""High availability on one machine (`torus up --ha`: a 3-member etcd and two heads on its journal): kill -9 of the
leading head during a storm of acknowledged changes from 8 clients loses none of them and runs none twice; a
4-host PyTorch gang trains through the failover in its first attempt; etcd losing one member changes nothing, losing
two refuses changes with a clear error while reads and running workers go on, and one member back resumes them."""

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

from conftest import binary, is_torus_process, pid_alive, wait_until
from test_gang_runs import PYTHON, TORCH_ARGS, TRAIN_TORCH, V6E_4X4, final_loss, finish, run_view, start_train
from test_head_restart import assert_ledgers_equal_head_view, groups, waiting_groups_settle

FAST = ("--node-timeout-ms", "1500")
HEADS = ("head-a", "head-b")


def leading_head(torus):
    """(name, pid) of the head that serves now: alive, and its log's last word on its role is that it listens."""
    for name in HEADS:
        pid = torus.pid_of(name, role="head")
        if not pid_alive(pid):
            continue
        log = (torus.session / "logs" / f"{name}.log").read_text()
        if log.rfind("listening on") > log.rfind("standing by:"):
            return name, pid
    return None


def standing_by(torus, name):
    log = (torus.session / "logs" / f"{name}.log").read_text()
    return pid_alive(torus.pid_of(name, role="head")) and log.rfind("standing by:") > log.rfind("listening on")


def fail_over(torus):
    """SIGKILL of the leading head; returns (killed, successor) once the other head serves."""
    killed, pid = leading_head(torus)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 5, message="the leader to exit")
    successor = wait_until(lambda: (lambda h: h if h and h[0] != killed else None)(leading_head(torus)), 20,
                           message="the standby to lead")
    return killed, successor[0]


def etcd_members(torus):
    return {name: pid for role, name, pid in torus.processes(torus.session) if role == "etcd"}


def test_up_ha_starts_three_etcd_members_and_two_heads_and_down_stops_them(torus):
    out = torus.up("--ha", *FAST).stdout
    records = torus.processes(torus.session)
    assert sorted(n for r, n, _ in records if r == "etcd") == ["etcd-1", "etcd-2", "etcd-3"]
    assert sorted(n for r, n, _ in records if r == "head") == list(HEADS)
    assert leading_head(torus)[0] == "head-a" and standing_by(torus, "head-b")
    # Agents, jobs and clients are given both heads; the journal is in the local etcd, not the state directory.
    addresses = torus.address.split(",")
    assert len(addresses) == 2 and addresses[0] in out, out
    launch = json.loads((torus.session / "agents" / "v6e-0-w0.json").read_text())
    assert launch["args"][launch["args"].index("--address") + 1] == torus.address
    assert not (torus.session / "state" / "journal.db").exists()
    assert torus.status()["nodes_alive"] == 16

    pids = [pid for _, _, pid in records]
    down = torus.ok("down").stdout
    assert f"stopped {len(pids)} torus processes" in down, down
    assert not any(pid_alive(p) for p in pids)


def test_head_restart_of_an_ha_cluster_brings_a_killed_head_back_as_a_standby(torus):
    torus.up("--ha", *FAST)
    killed, successor = fail_over(torus)
    out = torus.ok("head", "restart").stdout
    assert f"started again: {killed}" in out, out
    wait_until(lambda: standing_by(torus, killed), 15, message="the restarted head to stand by")
    assert leading_head(torus)[0] == successor
    again = torus.ok("head", "restart").stdout
    assert "every head of " in again and "is running; nothing to restart" in again, again


def test_kill_of_the_leader_during_a_storm_of_8_clients_loses_nothing_and_runs_nothing_twice(torus, tmp_path):
    torus.up("--ha", *FAST)
    ran_jobs, ran_runs = tmp_path / "jobs.txt", tmp_path / "runs.txt"
    groups_made, groups_removed, groups_unsure = {}, set(), set()
    jobs_acked, runs_acked, runs_unsure = set(), {}, set()
    errors = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def submit_job(job_id):
        """Submits until the head says it has the job (made now, or by an earlier try whose answer was lost)."""
        for _ in range(40):
            result = torus.run("job", "submit", "--no-wait", "--submission-id", job_id, "--",
                               "sh", "-c", f"echo {job_id} >> {ran_jobs}", timeout=30)
            if result.returncode == 0 or "already exists" in result.stderr:
                return True
            errors["job: " + result.stderr.strip()[:50]] += 1
            time.sleep(0.2)
        return False

    def client(i):
        n = 0
        while not stop.is_set():
            n += 1
            kind = (i + n) % 3
            if kind == 0:
                result = torus.run("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", f"g-{i}-{n}", "--json",
                                   timeout=30)
                if result.returncode != 0:
                    errors["pg: " + result.stderr.strip()[:50]] += 1
                    time.sleep(0.1)
                    continue
                group = json.loads(result.stdout)["id"]
                with lock:
                    groups_made[group] = f"g-{i}-{n}"
                if n % 2 == 0:
                    gone = torus.run("pg", "remove", group, timeout=30)
                    with lock:
                        (groups_removed if gone.returncode == 0 else groups_unsure).add(group)
            elif kind == 1:
                job_id = f"job-{i}-{n}"
                if submit_job(job_id):
                    with lock:
                        jobs_acked.add(job_id)
            else:
                name = f"run-{i}-{n}"
                result = torus.run("train", "--no-wait", "--name", name, "--num-workers", "1",
                                   "--resources-per-worker", '{"CPU": 0.1}', "--storage-path", tmp_path / "runs",
                                   "--", "sh", "-c", f"echo {name} >> {ran_runs}", timeout=30)
                with lock:
                    if result.returncode == 0:
                        runs_acked[name] = result.stdout.strip()
                    else:
                        runs_unsure.add(name)
                        errors["run: " + result.stderr.strip()[:50]] += 1

    def acknowledged():
        with lock:
            return len(groups_made) + len(jobs_acked) + len(runs_acked)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: acknowledged() >= 24, 90, message="the storm to get going")
        before = acknowledged()
        fail_over(torus)
        wait_until(lambda: acknowledged() >= before + 24, 90, message="the storm to go on with the new leader")
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    print("errors during the storm:", dict(errors))

    # Every acknowledged group exists, in the state its client was told.
    waiting_groups_settle(torus)
    by_id = {g["id"]: g for g in groups(torus)}
    for group_id, name in groups_made.items():
        assert group_id in by_id, f"acknowledged group {group_id} ({name}) was lost"
        expected = ({"REMOVED", "CREATED"} if group_id in groups_unsure
                    else {"REMOVED" if group_id in groups_removed else "CREATED"})
        assert by_id[group_id]["state"] in expected, by_id[group_id]
    assert_ledgers_equal_head_view(torus)

    # Every acknowledged job and run ends SUCCEEDED, having run once (a run in its first attempt) — a start the old
    # leader journaled but did not get to send is sent by the new one, from the launch it journaled with it.
    def jobs_ended():
        jobs = {j["submission_id"]: j for j in json.loads(torus.ok("job", "list", "--json").stdout)}
        return jobs if all(jobs.get(j, {}).get("status") in ("SUCCEEDED", "FAILED", "STOPPED")
                           for j in jobs_acked) else None
    jobs = wait_until(jobs_ended, 120, interval=0.5, message="every acknowledged job to end")
    for job_id in jobs_acked:
        assert jobs[job_id]["status"] == "SUCCEEDED", (jobs[job_id].get("message"), jobs[job_id])

    def runs_ended():
        views = {name: run_view(torus, name) for name in runs_acked}
        return views if all(v and v["status"] in ("SUCCEEDED", "FAILED", "STOPPED") for v in views.values()) else None
    runs = wait_until(runs_ended, 120, interval=0.5, message="every acknowledged run to end")
    for name, view in runs.items():
        assert view["status"] == "SUCCEEDED" and view["attempt"] == 1, view

    jobs_ran = Counter(ran_jobs.read_text().split()) if ran_jobs.exists() else Counter()
    runs_ran = Counter(ran_runs.read_text().split()) if ran_runs.exists() else Counter()
    assert {j: jobs_ran[j] for j in jobs_acked if jobs_ran[j] != 1} == {}
    assert {r: runs_ran[r] for r in runs_acked if runs_ran[r] != 1} == {}
    assert all(count == 1 for count in jobs_ran.values()), jobs_ran
    assert all(count == 1 for count in runs_ran.values()), runs_ran
    assert len(jobs_acked) >= 5 and len(runs_acked) >= 5 and len(groups_made) >= 5


def test_a_gang_keeps_training_through_a_failover_in_its_first_attempt(torus, tmp_path):
    torus.up("--ha", *FAST)
    slow = [a if a != "0.05" else "0.3" for a in TORCH_ARGS]
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "through", command=[PYTHON, TRAIN_TORCH, *slow])
    try:
        run = wait_until(lambda: (v := run_view(torus, "through")) and v["checkpoints"] and v, 60,
                         message="a committed checkpoint")
        assert run["status"] == "RUNNING" and run["attempt"] == 1
        fail_over(torus)
        code, out, err = finish(proc, 180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    after = run_view(torus, "through")
    assert after["status"] == "SUCCEEDED", after
    assert after["attempt"] == 1 and after["failures"] == 0 and len(after["attempts"]) == 1, after
    assert final_loss(out)  # rank 0 finished its steps and printed its loss
    assert_ledgers_equal_head_view(torus)


def test_etcd_losing_one_member_changes_nothing_two_refuse_changes_and_one_back_resumes(torus, tmp_path):
    # The default node timeout: nodes must stay ALIVE without a quorum (no write can bring back one declared dead),
    # and a loaded machine can delay a heartbeat past a short one.
    torus.up("--ha")
    job = torus.ok("job", "submit", "--no-wait", "--submission-id", "sleeper", "--", "sleep", "600").stdout
    wait_until(lambda: json.loads(torus.ok("job", "status", "sleeper", "--json").stdout)["status"] == "RUNNING", 30,
               message="the job to run")
    members = etcd_members(torus)
    command = {name: open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1] for name, pid in members.items()}

    os.kill(members["etcd-1"], signal.SIGKILL)
    torus.ok("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", "one-member-down")

    os.kill(members["etcd-2"], signal.SIGKILL)
    # A change under way as the quorum went waits for it (its client may time out, unsure); once the head knows, the
    # next are refused at once, saying why.
    refused = wait_until(lambda: (lambda r: r if "cannot commit now" in r.stderr else None)(
        torus.run("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", "no-quorum", timeout=30)), 40,
        interval=0.5, message="changes to be refused")
    assert refused.returncode != 0 and "until etcd has a quorum again" in refused.stderr, refused.stderr
    http_refused = torus.run("job", "submit", "--no-wait", "--", "true")
    assert http_refused.returncode != 0 and "cannot commit now" in http_refused.stderr, http_refused.stderr
    # Reads go on, from the head that still leads; the job's process runs on.
    leader = leading_head(torus)
    time.sleep(6)  # past the head's lease of 4 s: it keeps leading, since nobody else could take the journal
    assert leading_head(torus) == leader
    assert torus.status()["nodes_alive"] == 16
    assert any(g["name"] == "one-member-down" for g in groups(torus))
    assert json.loads(torus.ok("job", "status", "sleeper", "--json").stdout)["status"] == "RUNNING"

    restarted = subprocess.Popen(command["etcd-2"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    torus.record_process("etcd", "etcd-2", restarted.pid)
    wait_until(lambda: torus.run("pg", "create", "--bundles", '[{"CPU": 0.1}]', "--name", "back",
                                 timeout=30).returncode == 0, 60, interval=0.5, message="changes to resume")
    assert leading_head(torus) == leader
    torus.ok("job", "stop", "sleeper")
    assert {g["name"] for g in groups(torus)} >= {"one-member-down", "back"}
