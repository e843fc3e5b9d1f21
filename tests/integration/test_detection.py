"""A real torus-node given a malformed TPU environment stops at start with exit code 2 and a message naming the
variable, its value and what is accepted (docs/detection.md), before it registers anywhere."""

import os
import subprocess

import pytest

from conftest import binary

CASES = [
    ({"TPU_ACCELERATOR_TYPE": "v9z-16"},
     'TPU_ACCELERATOR_TYPE "v9z-16" is invalid: pod type "v9z-16" is not valid'),
    ({"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "3x3"},
     'TPU_TOPOLOGY "3x3" is invalid: topology "3x3" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4'),
    ({"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "4x4", "TPU_NAME": "s", "TPU_WORKER_ID": "7"},
     'TPU_WORKER_ID "7" is invalid; accepted: an integer from 0 to 3 (the slice has 4 hosts)'),
    ({"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "4x4", "TPU_NAME": "s", "TPU_WORKER_ID": "1",
      "TPU_WORKER_HOSTNAMES": "a,b"},
     "TPU_WORKER_HOSTNAMES lists 2 hosts but v6e-16 (4x4) with 4 chips per host has 4"),
]


@pytest.mark.parametrize("tpu_env,message", CASES, ids=["pod type", "topology", "worker id", "host list"])
def test_a_malformed_tpu_environment_stops_the_agent_with_code_2(tmp_path, tpu_env, message):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TPU_SKIP_MDS_QUERY": "true", **tpu_env}
    # Port 1 on loopback: nothing listens, and the agent must stop before it tries.
    result = subprocess.run([binary("torus-node"), "--address", "127.0.0.1:1", "--token", "t", "--metadata-url", "off",
                             "--dev-root", str(tmp_path), "--work-dir", str(tmp_path / "work")],
                            env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr
    assert "registered as node" not in result.stderr + result.stdout
