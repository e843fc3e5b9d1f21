"""Local code sent with jobs and gang runs: Ray's package routes (GET, then PUT if absent) spoken as Ray's job client
speaks them, `torus job submit --working-dir` and `torus train --working-dir` uploading a local directory, agents
unpacking a package once per node, bad archives refused, unused packages removed, and packages across a head
restart."""

import hashlib
import io
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from conftest import binary, wait_until

PYTHON = "/usr/bin/python3"
GRACE_S = 5  # --package-unused-grace-s of this module's cluster
SPEC = """\
head:
  num_cpus: 2
  memory: 4Gi
node_groups:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    slices: 1
    num_cpus: 2
    memory: 4Gi
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from conftest import Torus
    root = tmp_path_factory.mktemp("packages")
    spec = root / "one_v6e.yaml"
    spec.write_text(SPEC)
    t = Torus(root / "torus")
    try:
        t.up("--package-unused-grace-s", str(GRACE_S), spec=spec)
        yield t
    finally:
        t.cleanup()


def http(torus, method, path, body=None, content_type="application/json", token=True):
    """(status, parsed JSON or text) of METHOD on the head's HTTP API; `body` bytes are sent as they are."""
    address = (torus.session / "dashboard_address").read_text().strip()
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if token:
        req.add_header("Authorization", f"Bearer {torus.token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            text, code = response.read().decode(), response.status
    except urllib.error.HTTPError as error:
        text, code = error.read().decode(), error.code
    try:
        return code, json.loads(text)
    except json.JSONDecodeError:
        return code, text


# Ray's client (runtime_env/packaging.py): a stored zip of the directory's files, paths relative to it (py_modules:
# to its parent), an entry for each empty directory; named _ray_pkg_<hash>.zip, the hash being the XOR of the MD5s of
# every path's relative name and contents (as _hash_directory computes it, truncation to 8 bytes included).

def ray_package(directory, include_parent_dir=False):
    directory = Path(directory).absolute()
    hash_val = b"0" * 8
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path in [directory, *sorted(directory.rglob("*"))]:
            md5 = hashlib.md5(str(path.relative_to(directory)).encode())
            if not path.is_dir():
                md5.update(path.read_bytes())
            hash_val = bytes(a ^ b for a, b in zip(hash_val, md5.digest()))
            if path.is_file() or (path.is_dir() and next(path.iterdir(), None) is None):
                to_path = path.relative_to(directory)
                if include_parent_dir:
                    to_path = directory.name / to_path
                z.write(path, to_path)
    return f"_ray_pkg_{hash_val.hex()}.zip", buffer.getvalue()


def upload_as_ray_does(torus, name, data):
    """GET, then PUT when the head does not have it; returns whether it was uploaded."""
    code, _ = http(torus, "GET", f"/api/packages/gcs/{name}")
    if code == 200:
        return False
    assert code == 404
    code, reply = http(torus, "PUT", f"/api/packages/gcs/{name}", data, content_type="application/zip")
    assert code == 200, reply
    return True


def submit(torus, **fields):
    code, reply = http(torus, "POST", "/api/jobs/", fields)
    assert code == 200, reply
    return reply["submission_id"]


def finished(torus, job_id, timeout=30):
    def done():
        code, details = http(torus, "GET", f"/api/jobs/{job_id}")
        assert code == 200, details
        return details if details["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None
    return wait_until(done, timeout, message=f"job {job_id} to end")


def job_logs(torus, job_id):
    code, reply = http(torus, "GET", f"/api/jobs/{job_id}/logs")
    assert code == 200, reply
    return reply["logs"]


def project(tmp_path):
    """A small project: a module imported by the entrypoint, a data file in a subdirectory, an empty directory."""
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "empty").mkdir()
    (proj / "helper.py").write_text("def greet():\n    return 'hello from helper'\n")
    (proj / "data" / "numbers.txt").write_text("1 2 3\n")
    (proj / "main.py").write_text(
        "import os, helper\n"
        "print(helper.greet(), open('data/numbers.txt').read().split(), os.path.isdir('empty'))\n")
    return proj


def test_a_ray_client_uploads_once_and_the_job_imports_from_the_package(cluster, tmp_path):
    name, data = ray_package(project(tmp_path))
    assert upload_as_ray_does(cluster, name, data)
    job_id = submit(cluster, entrypoint=f"{PYTHON} main.py", runtime_env={"working_dir": f"gcs://{name}"})
    details = finished(cluster, job_id)
    assert details["status"] == "SUCCEEDED", (details, job_logs(cluster, job_id))
    assert job_logs(cluster, job_id) == "hello from helper ['1', '2', '3'] True\n"
    assert details["runtime_env"] == {"working_dir": f"gcs://{name}"}

    # The second client finds it on the head and does not upload it again.
    assert not upload_as_ray_does(cluster, name, data)
    again = submit(cluster, entrypoint=f"{PYTHON} -c 'import helper; print(helper.greet())'",
                   runtime_env={"working_dir": f"gcs://{name}"})
    assert finished(cluster, again)["status"] == "SUCCEEDED"
    assert job_logs(cluster, again) == "hello from helper\n"


def test_py_modules_go_on_the_pythonpath(cluster, tmp_path):
    module = tmp_path / "mymod"
    module.mkdir()
    (module / "__init__.py").write_text("VALUE = 42\n")
    name, data = ray_package(module, include_parent_dir=True)
    upload_as_ray_does(cluster, name, data)
    job_id = submit(cluster, entrypoint=f"cd / && {PYTHON} -c 'import mymod; print(mymod.VALUE)'",
                    runtime_env={"py_modules": [f"gcs://{name}"]})
    assert finished(cluster, job_id)["status"] == "SUCCEEDED", job_logs(cluster, job_id)
    assert job_logs(cluster, job_id) == "42\n"


def test_cli_py_module_uploads_a_module_onto_the_pythonpath(cluster, tmp_path):
    module = tmp_path / "clilib"
    module.mkdir()
    (module / "__init__.py").write_text("NAME = 'clilib'\n")
    result = cluster.run("job", "submit", "--py-module", module, "--", "sh", "-c",
                         f"cd / && {PYTHON} -c 'import clilib; print(clilib.NAME)'")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "clilib\n"
    assert "[torus] uploaded " in result.stderr


def test_a_package_not_on_the_head_is_refused(cluster):
    code, text = http(cluster, "POST", "/api/jobs/",
                      {"entrypoint": "true", "runtime_env": {"working_dir": "gcs://_ray_pkg_absent.zip"}})
    assert code == 400
    assert text == ("runtime_env.working_dir: package gcs://_ray_pkg_absent.zip is not on the head; upload it "
                    "first (PUT /api/packages/gcs/_ray_pkg_absent.zip)")
    code, text = http(cluster, "POST", "/api/jobs/",
                      {"entrypoint": "true", "runtime_env": {"working_dir": "s3://bucket/pkg.zip"}})
    assert code == 400
    assert text.startswith('runtime_env.working_dir "s3://bucket/pkg.zip" is not supported; use a string: a package')


def zip_of(entries):
    """A zip archive of (name, bytes, unix mode or None) entries, written as given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.create_system = 3
                info.external_attr = mode << 16
            z.writestr(info, data)
    return buffer.getvalue()


@pytest.mark.parametrize("label, data, fragment", [
    ("corrupt", b"PK\x03\x04this is no zip archive", "not a zip archive"),
    ("dot-dot", zip_of([("ok.py", b"1", None), ("../../evil.py", b"x", None)]), "../../evil.py"),
    ("absolute", zip_of([("/tmp/evil.py", b"x", None)]), "/tmp/evil.py"),
    ("escaping symlink", zip_of([("link", b"../../../etc", 0o120777)]), "link"),
])
def test_bad_archives_are_refused_and_nothing_is_unpacked(cluster, tmp_path, label, data, fragment):
    name = f"_ray_pkg_bad_{label.replace(' ', '_')}.zip"
    code, reply = http(cluster, "PUT", f"/api/packages/gcs/{name}", data, content_type="application/zip")
    assert code == 400, reply
    assert reply["error"].startswith(f"package {name}: "), reply
    assert fragment in reply["error"], reply
    assert http(cluster, "GET", f"/api/packages/gcs/{name}")[0] == 404
    packages = cluster.session / "state" / "packages"
    assert sorted(p.name for p in packages.iterdir() if name in p.name) == []


def test_cli_job_submit_uploads_a_local_directory_once_without_what_is_excluded(cluster, tmp_path):
    proj = project(tmp_path)
    (proj / "weights.bin").write_bytes(b"\0" * 1000)
    (proj / "scratch").mkdir()
    (proj / "scratch" / "notes.txt").write_text("x")
    (proj / ".gitignore").write_text("scratch/\n")
    probe = f"{PYTHON} -c \"import os; print(sorted(os.listdir('.')))\""
    first = cluster.run("job", "submit", "--working-dir", proj, "--exclude", "*.bin", "--", "sh", "-c", probe)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "['.gitignore', 'data', 'empty', 'helper.py', 'main.py']\n"
    assert "[torus] uploaded " in first.stderr, first.stderr
    second = cluster.run("job", "submit", "--working-dir", proj, "--exclude", "*.bin", "--", PYTHON, "main.py")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "hello from helper ['1', '2', '3'] True\n"
    assert "is on the head already" in second.stderr, second.stderr
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "python").symlink_to("/usr/bin/python3")
    refused = cluster.run("job", "submit", "--working-dir", venv, "--", "true")
    assert refused.returncode != 0
    assert f"{venv} cannot be sent: symlink \"python\" -> \"/usr/bin/python3\": absolute targets" in refused.stderr
    assert "[torus] uploaded" not in refused.stderr
    missing = cluster.run("job", "submit", "--working-dir", tmp_path / "nope", "--", "true")
    assert missing.returncode != 0
    assert f'--working-dir "{tmp_path / "nope"}" is not a local directory' in missing.stderr


def test_cli_remembers_names_of_settled_trees_and_rereads_changed_ones(cluster, tmp_path):
    """Unchanged code is not read again: the CLI remembers a settled tree's package name by its metadata, and a
    change of a file (its ctime moves whatever else stays) makes it read the tree again."""
    names = Path(cluster.env["TORUS_TEMP_DIR"]) / "package_names"
    proj = tmp_path / "remembered"
    proj.mkdir()
    (proj / "which.py").write_text("print('original')\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "which.py").write_text("print('other!!!')\n")
    time.sleep(2.1)  # both trees settle: their newest change is older than the clock's tick guard
    run = lambda d: cluster.run("job", "submit", "--working-dir", d, "--", PYTHON, "which.py")
    assert run(other).stdout == "other!!!\n"
    first = run(proj)
    assert first.stdout == "original\n", first.stderr
    remembered = dict(line.split() for line in names.read_text().splitlines())
    other_name = first_name = None
    for fingerprint, name in remembered.items():
        if f"gcs://{name}" in first.stderr:
            first_name = fingerprint
        else:
            other_name = name
    assert first_name and other_name, (remembered, first.stderr)
    # Point proj's fingerprint at the other package: a remembered name is used without reading the files.
    remembered[first_name] = other_name
    names.write_text("".join(f"{f} {n}\n" for f, n in remembered.items()))
    assert run(proj).stdout == "other!!!\n"
    # A changed file (same size) is noticed: the tree is read again and the right package is sent.
    (proj / "which.py").write_text("print('changed!')\n")
    changed = run(proj)
    assert changed.stdout == "changed!\n", changed.stderr
    assert "[torus] uploaded " in changed.stderr


TRAIN = """\
import os, sys
import trainlib
rank = int(os.environ["TORUS_RANK"])
print(f"rank {rank} cwd={os.getcwd() == os.path.dirname(os.path.abspath(__file__))} "
      f"data={open('data/numbers.txt').read().split()} host={os.environ.get('TPU_WORKER_ID')} "
      f"lib={trainlib.VALUE}", flush=True)
"""


def test_train_runs_every_host_of_the_gang_from_the_uploaded_copy(cluster, tmp_path):
    proj = project(tmp_path)
    (proj / "train.py").write_text(TRAIN)
    lib = tmp_path / "trainlib"
    lib.mkdir()
    (lib / "__init__.py").write_text("VALUE = 'from --py-module'\n")
    result = cluster.run("train", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--working-dir", proj,
                         "--py-module", lib, "--storage-path", tmp_path / "runs", "--", PYTHON, "train.py",
                         timeout=120)
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        assert (f"rank {rank} cwd=True data=['1', '2', '3'] host={rank} lib=from --py-module"
                in result.stdout), result.stdout
    # Each host unpacked it once, into its own cache, and kept no archive beside it.
    caches = sorted(cluster.session.glob("hosts/*/work/packages"))
    with_train = sorted(p.parents[3].name for p in cluster.session.glob("hosts/*/work/packages/*/train.py"))
    assert with_train == ["v6e-0-w0", "v6e-0-w1", "v6e-0-w2", "v6e-0-w3"], caches
    for cache in caches:
        assert not [p for p in cache.iterdir() if p.name.startswith(".fetch-")], list(cache.iterdir())


def test_an_unused_package_is_removed_after_its_last_user_ends(cluster, tmp_path):
    proj = tmp_path / "gc"
    proj.mkdir()
    (proj / "x.py").write_text("print('x')\n")
    name, data = ray_package(proj)
    upload_as_ray_does(cluster, name, data)
    job_id = submit(cluster, entrypoint=f"sleep {GRACE_S + 2}; {PYTHON} x.py",
                    runtime_env={"working_dir": f"gcs://{name}"})
    # In use past the grace: kept.
    time.sleep(GRACE_S + 1)
    code, listed = http(cluster, "GET", "/api/v0/packages")
    mine = [p for p in listed if p["name"] == name]
    assert mine and mine[0]["users"] == 1 and mine[0]["unused_since_ms"] is None, listed
    assert finished(cluster, job_id)["status"] == "SUCCEEDED"
    ended = time.monotonic()
    # Watched through the listing: a GET of the package itself would start its grace again (a client that finds it
    # may name it next).
    listed = lambda: [p["name"] for p in http(cluster, "GET", "/api/v0/packages")[1]]
    wait_until(lambda: name not in listed(), GRACE_S + 10, message="the unused package to be removed")
    assert time.monotonic() - ended >= GRACE_S - 1
    assert not (cluster.session / "state" / "packages" / name).exists()


def test_packages_survive_a_head_restart(cluster, tmp_path):
    name, data = ray_package(project(tmp_path))
    upload_as_ray_does(cluster, name, data)
    result = cluster.ok("head", "restart")
    assert "torus head restarted at " in result.stdout
    wait_until(lambda: http(cluster, "GET", f"/api/packages/gcs/{name}")[0] == 200, 15,
               message="the restarted head to serve")
    wait_until(lambda: len([n for n in cluster.status()["nodes"] if n["state"] == "ALIVE"]) == 5, 30,
               message="every agent to register with the restarted head")
    job_id = submit(cluster, entrypoint=f"{PYTHON} main.py", runtime_env={"working_dir": f"gcs://{name}"})
    assert finished(cluster, job_id)["status"] == "SUCCEEDED", job_logs(cluster, job_id)
