"""`torus up` starts torus-tpu-sim, a simulator of libtpu's runtime metrics service, for each simulated TPU host;
its agent finds it through TPU_RUNTIME_METRICS_PORTS and its logs through --tpu-log-dir; `torus down` stops it."""

import json
import os
import signal

from conftest import binary, is_torus_process, node, node_state, pid_alive, wait_until

# head (no TPU), one 8-chip v6e host, one 4-chip v4 host.
SPEC = """
head: {num_cpus: 2, memory: 4Gi}
node_groups:
  - name: v6e
    tpu: {pod_type: v6e-8, topology: 2x4}
    num_cpus: 4
    memory: 8Gi
  - name: v4
    tpu: {pod_type: v4-8, topology: 2x2x1}
    num_cpus: 4
    memory: 8Gi
"""
TPU_HOSTS = {"v6e-0-w0": (8, 33_554_432_000), "v4-0-w0": (4, 32 << 30)}
USAGE = "tpu.runtime.hbm.memory.usage.bytes"
TOTAL = "tpu.runtime.hbm.memory.total.bytes"
DUTY = "tpu.runtime.tensorcore.dutycycle.percent"


def write_spec(tmp_path):
    path = tmp_path / "tpu_sim.yaml"
    path.write_text(SPEC)
    return path


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.split("=", 1) for e in f.read().decode(errors="replace").split("\0") if "=" in e)


def cmdline_of(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\0")


def query(torus, port):
    result = torus.run("--query", f"127.0.0.1:{port}", binary_name="torus-tpu-sim", timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def sim_records(torus):
    return {name: pid for role, name, pid in torus.processes(torus.session) if role == "sim"}


def test_up_starts_one_sim_per_tpu_host_and_down_stops_them(torus, tmp_path):
    binary("torus-tpu-sim")
    torus.up(spec=write_spec(tmp_path))
    session = torus.session
    sims = sim_records(torus)
    assert sorted(sims) == sorted(TPU_HOSTS), "one simulator per simulated TPU host, none for the head"

    for name, (chips, total) in TPU_HOSTS.items():
        pid = sims[name]
        assert is_torus_process(pid)
        with open(f"/proc/{pid}/comm") as f:
            assert f.read().strip() == "torus-tpu-sim"
        port = int((session / "hosts" / name / "tpu_sim_port").read_text())

        agent = torus.pid_of(name)
        assert environ_of(agent).get("TPU_RUNTIME_METRICS_PORTS") == str(port)
        argv = cmdline_of(agent)
        log_dir = session / "hosts" / name / "tpu_logs"
        assert argv[argv.index("--tpu-log-dir") + 1] == str(log_dir)
        logs = list(log_dir.glob("tpu_driver.*"))
        assert len(logs) == 1, logs
        assert "SIMULATED libtpu" in logs[0].read_text()

        answer = query(torus, port)
        assert sorted(answer["supported"]) == sorted([USAGE, TOTAL, DUTY])
        assert [v["device_id"] for v in answer["metrics"][TOTAL]] == list(range(chips))
        assert all(v["value"] == total for v in answer["metrics"][TOTAL])
        assert [v["device_id"] for v in answer["metrics"][DUTY]] == list(range(chips))

    head_env = environ_of(torus.pid_of("head"))
    assert "TPU_RUNTIME_METRICS_PORTS" not in head_env, "no simulator for a host without TPUs"

    # A restarted agent keeps its simulator's port; the simulator outlived the agent's crash.
    name = "v4-0-w0"
    port = (session / "hosts" / name / "tpu_sim_port").read_text().strip()
    old_agent = torus.pid_of(name)
    os.kill(old_agent, signal.SIGKILL)
    wait_until(lambda: not pid_alive(old_agent), timeout=10, message="the agent to die")
    torus.ok("node", "restart", name)
    new_agent = torus.pid_of(name)
    assert new_agent != old_agent
    # The restarted agent is read once it has registered: until its exec completes, its environment reads empty.
    wait_until(lambda: node(torus.status(), name)["pid"] == new_agent and node_state(torus.status(), name) == "ALIVE",
               timeout=10, message=f"the restarted agent {name} to register")
    assert environ_of(new_agent).get("TPU_RUNTIME_METRICS_PORTS") == port
    assert is_torus_process(sims[name])
    assert sim_records(torus) == sims, "node restart starts no simulator"

    torus.ok("down")
    for name, pid in sims.items():
        assert not pid_alive(pid), f"simulator of {name} still runs after torus down"


def test_sim_values_follow_a_job_holding_a_chip(torus, tmp_path):
    torus.up(spec=write_spec(tmp_path))
    port = int((torus.session / "hosts" / "v6e-0-w0" / "tpu_sim_port").read_text())
    idle = query(torus, port)["metrics"]
    assert all(v["value"] == 0 for v in idle[DUTY] + idle[USAGE])

    submitted = torus.ok("job", "submit", "--no-wait", "--resources", '{"TPU": 1}', "--label-selector",
                         '{"torus.io/accelerator-type": "TPU-V6E"}', "--", "sh", "-c", "while :; do :; done")
    job_id = submitted.stdout.strip().split()[-1]

    def busy_chip():
        metrics = query(torus, port)["metrics"]
        busy = [v["device_id"] for v in metrics[DUTY] if v["value"] > 1]
        used = [v["device_id"] for v in metrics[USAGE] if v["value"] > 0]
        return busy if len(busy) == 1 and busy == used else None

    busy = wait_until(busy_chip, timeout=30, interval=0.5, message="one chip busy with the job")
    log_dir = torus.session / "hosts" / "v6e-0-w0" / "tpu_logs"
    wait_until(lambda: f"TPU chip {busy[0]} opened by pid" in "".join(p.read_text() for p in log_dir.iterdir()),
               timeout=10, message="the simulated libtpu log to name the chip's holder")

    torus.ok("job", "stop", job_id)

    def all_idle():
        metrics = query(torus, port)["metrics"]
        return all(v["value"] == 0 for v in metrics[DUTY] + metrics[USAGE])

    wait_until(all_idle, timeout=30, interval=0.5, message="the chip to be released")


def test_no_tpu_sim_starts_none(torus, tmp_path):
    torus.up("--no-tpu-sim", spec=write_spec(tmp_path))
    assert sim_records(torus) == {}
    for name in TPU_HOSTS:
        agent = torus.pid_of(name)
        assert "TPU_RUNTIME_METRICS_PORTS" not in environ_of(agent)
        assert "--tpu-log-dir" not in cmdline_of(agent)
        assert not (torus.session / "hosts" / name / "tpu_sim_port").exists()
