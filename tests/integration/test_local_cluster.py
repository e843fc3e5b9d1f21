"""`torus up examples/clusters/local.yaml`: what the head reports for the simulated cluster, and who may ask."""

import re
import time

import pytest

from conftest import alive_ids, node, slice_of

V6E_HOSTS = [f"v6e-{s}-w{w}" for s in range(2) for w in range(4)]
ALL_NODES = sorted(["head", *V6E_HOSTS, "v5e-0-w0", "v4-0-w0", "v4-0-w1", "cpu-0", "cpu-1", "gpu-0", "gpu-1"])

# name -> (accelerator type, topology, pod type, hosts, chips per host)
SLICES = {
    "v4-0": ("TPU-V4", "2x2x2", "v4-16", 2, 4),
    "v5e-0": ("TPU-V5LITEPOD", "2x4", "v5litepod-8", 1, 8),
    "v6e-0": ("TPU-V6E", "4x4", "v6e-16", 4, 4),
    "v6e-1": ("TPU-V6E", "4x4", "v6e-16", 4, 4),
}

TPU_LABELS = ("torus.io/accelerator-type", "torus.io/tpu-slice-name", "torus.io/tpu-worker-id",
              "torus.io/tpu-topology", "torus.io/tpu-pod-type", "torus.io/tpu-chips-per-host")

GiB = 1 << 30


@pytest.fixture(scope="module")
def status(local_cluster):
    return local_cluster.status()


def test_up_registers_all_sixteen_nodes(status, local_cluster):
    assert sorted(n["node_id"] for n in status["nodes"]) == ALL_NODES
    assert alive_ids(status) == ALL_NODES
    assert status["nodes_alive"] == 16
    assert status["nodes_dead"] == 0
    assert all(n["death_reason"] == "" for n in status["nodes"])
    assert sorted(n["node_id"] for n in local_cluster.nodes("--alive")) == ALL_NODES


def test_up_forms_four_ready_slices(status):
    assert [s["name"] for s in status["slices"]] == sorted(SLICES)
    for name, (accelerator, topology, pod_type, hosts, chips) in SLICES.items():
        s = slice_of(status, name)
        assert (s["accelerator_type"], s["topology"], s["pod_type"]) == (accelerator, topology, pod_type), name
        assert s["state"] == "READY", s
        assert s["reason"] == ""
        assert s["expected_hosts"] == hosts
        assert s["hosts_alive"] == hosts
        assert s["chips_per_host"] == chips
        assert [h["worker_id"] for h in s["hosts"]] == list(range(hosts))
        assert [h["node_id"] for h in s["hosts"]] == [f"{name}-w{w}" for w in range(hosts)]
        assert all(h["state"] == "ALIVE" and h["chips"] == chips for h in s["hosts"])


def test_tpu_hosts_carry_slice_labels(status):
    labels = node(status, "v6e-0-w2")["labels"]
    assert labels["torus.io/accelerator-type"] == "TPU-V6E"
    assert labels["torus.io/tpu-slice-name"] == "v6e-0"
    assert labels["torus.io/tpu-worker-id"] == "2"
    assert labels["torus.io/tpu-topology"] == "4x4"
    assert labels["torus.io/tpu-pod-type"] == "v6e-16"
    assert labels["torus.io/tpu-chips-per-host"] == "4"
    assert labels["torus.io/node-group"] == "v6e"
    assert labels["torus.io/market-type"] == "on-demand"

    for name, (accelerator, topology, pod_type, hosts, chips) in SLICES.items():
        for worker in range(hosts):
            labels = node(status, f"{name}-w{worker}")["labels"]
            assert labels["torus.io/accelerator-type"] == accelerator
            assert labels["torus.io/tpu-slice-name"] == name
            assert labels["torus.io/tpu-worker-id"] == str(worker)
            assert labels["torus.io/tpu-topology"] == topology
            assert labels["torus.io/tpu-pod-type"] == pod_type

    assert node(status, "v5e-0-w0")["labels"]["torus.io/market-type"] == "spot"
    assert "torus.io/market-type" not in node(status, "v4-0-w0")["labels"]


def test_non_tpu_hosts_have_no_slice_labels(status):
    for node_id in ("head", "cpu-0", "cpu-1", "gpu-0", "gpu-1"):
        labels = node(status, node_id)["labels"]
        assert not any(k in labels for k in TPU_LABELS if k != "torus.io/accelerator-type"), (node_id, labels)
        assert "TPU" not in node(status, node_id)["resources_total"]
    assert node(status, "cpu-0")["labels"]["team"] == "data"
    assert node(status, "head")["labels"] == {"torus.io/node-id": "head"}


def test_resources_per_host_and_in_total(status):
    for node_id in V6E_HOSTS + ["v4-0-w0", "v4-0-w1"]:
        assert node(status, node_id)["resources_total"] == {"CPU": 8, "TPU": 4, "memory": 16 * GiB}, node_id
    assert node(status, "v5e-0-w0")["resources_total"] == {"CPU": 8, "TPU": 8, "memory": 16 * GiB}
    for node_id in ("gpu-0", "gpu-1"):
        n = node(status, node_id)
        assert n["resources_total"] == {"CPU": 8, "GPU": 2, "memory": 16 * GiB}
        assert n["labels"]["torus.io/accelerator-type"] == "L4"
    assert node(status, "head")["resources_total"] == {"CPU": 4, "memory": 8 * GiB}
    assert node(status, "cpu-1")["resources_total"] == {"CPU": 4, "memory": 8 * GiB}

    assert status["resources_total"] == {"CPU": 116, "GPU": 4, "TPU": 48, "memory": 232 * GiB}
    assert status["resources_available"] == status["resources_total"]


def test_status_text_lists_slices(local_cluster):
    text = local_cluster.ok("status").stdout
    assert f"at {local_cluster.address}\n" in text
    assert "Nodes: 16 alive, 0 dead\n" in text
    assert "Slices (4, 4 READY)\n" in text
    rows = [
        ("v4-0", "TPU-V4", "2x2x2", "v4-16", "2/2"),
        ("v5e-0", "TPU-V5LITEPOD", "2x4", "v5litepod-8", "1/1"),
        ("v6e-0", "TPU-V6E", "4x4", "v6e-16", "4/4"),
        ("v6e-1", "TPU-V6E", "4x4", "v6e-16", "4/4"),
    ]
    for row in rows:
        assert re.search(r"^\s+" + r"\s+".join(map(re.escape, row + ("READY", "-"))) + r"$", text, re.M), (row, text)
    assert re.search(r"^\s+TPU\s+0\s+48$", text, re.M), text
    assert "Dead nodes" not in text


def test_wrong_token_is_refused(local_cluster):
    result = local_cluster.run("status", "--token", "wrong")
    assert result.returncode != 0
    assert "wrong cluster token" in result.stderr
    assert result.stdout == ""

    result = local_cluster.run("status", "--json", env={"TORUS_TOKEN": "wrong"})
    assert result.returncode != 0
    assert "wrong cluster token" in result.stderr


def test_token_and_address_from_environment(local_cluster, tmp_path):
    token = local_cluster.token
    assert local_cluster.status()["nodes_alive"] == 16  # from the latest session's files
    by_env = local_cluster.run("status", "--json", env={"TORUS_TOKEN": token})
    assert by_env.returncode == 0, by_env.stderr
    # The flag wins over the environment.
    flag_wins = local_cluster.run("status", "--json", "--token", token, env={"TORUS_TOKEN": "wrong"})
    assert flag_wins.returncode == 0, flag_wins.stderr
    # With no session at all, TORUS_ADDRESS and TORUS_TOKEN are enough.
    no_session = tmp_path / "empty"
    no_session.mkdir()
    result = local_cluster.run("nodes", "--json", env={"TORUS_TEMP_DIR": str(no_session),
                                                       "TORUS_ADDRESS": local_cluster.address, "TORUS_TOKEN": token})
    assert result.returncode == 0, result.stderr
    assert '"node_id": "v6e-0-w0"' in result.stdout


def test_agent_with_wrong_token_exits_2_without_registering(local_cluster, tmp_path):
    before = sorted(n["node_id"] for n in local_cluster.nodes())
    empty_root = tmp_path / "root"
    empty_root.mkdir()
    started = time.monotonic()
    result = local_cluster.run("--address", local_cluster.address, "--token", "wrong", "--node-id", "x",
                               "--metadata-url", "off", "--no-nvml", "--dev-root", empty_root,
                               binary_name="torus-node", timeout=20)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert "refused the cluster token" in result.stderr
    assert elapsed < 5, f"torus-node took {elapsed:.1f} s to give up"
    after = sorted(n["node_id"] for n in local_cluster.nodes())
    assert after == before
    assert "x" not in after
