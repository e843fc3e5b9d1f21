"""deploy/: every manifest deserializes into the Kubernetes API's models without an unknown field (k8s_schema.py),
each kustomization names only files that exist and fields kustomize knows, the head's autoscaler config is valid
(`torus autoscaler check`), and the head's arguments are flags torus-head has."""

import subprocess
from pathlib import Path

import yaml

from conftest import binary
from k8s_schema import problems_of

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator", "secretGenerator",
                    "images", "labels", "commonLabels", "commonAnnotations", "patches", "namePrefix", "nameSuffix",
                    "generatorOptions", "replicas", "components"}
NOT_OBJECTS = {"kustomization.yaml", "autoscaler.yaml"}


def manifests():
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name in NOT_OBJECTS:
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                yield f"{path.relative_to(DEPLOY)}#{i}", doc


def test_every_manifest_is_a_valid_kubernetes_object():
    seen = [name for name, _ in manifests()]
    assert len(seen) >= 8, seen
    for name, doc in manifests():
        assert problems_of(doc) == [], name


def test_kustomizations_name_existing_files_and_known_fields():
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(kustomization.read_text())
        assert set(doc) <= KUSTOMIZE_FIELDS, (kustomization, set(doc) - KUSTOMIZE_FIELDS)
        for resource in doc.get("resources", []):
            assert (kustomization.parent / resource).is_file(), (kustomization, resource)
        for generator in doc.get("configMapGenerator", []):
            for entry in generator["files"]:
                assert (kustomization.parent / entry.split("=", 1)[-1]).is_file(), (kustomization, entry)
        # Every manifest of the directory is applied by it (or by the kustomization of its own directory).
        listed = {(kustomization.parent / r).resolve() for r in doc.get("resources", [])}
        for path in kustomization.parent.rglob("*.yaml"):
            if path.name in NOT_OBJECTS or any((p / "kustomization.yaml").exists()
                                               for p in path.parents if kustomization.parent in p.parents):
                continue
            assert path.resolve() in listed, f"{path} is not in {kustomization}"


def test_the_heads_autoscaler_config_is_valid():
    result = subprocess.run([binary("torus"), "autoscaler", "check", DEPLOY / "head" / "autoscaler.yaml"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "provider kubernetes" in result.stdout


def test_the_head_and_agents_are_given_flags_they_have():
    heads = [doc for _, doc in manifests() if doc["kind"] == "StatefulSet"]
    assert len(heads) == 1
    head_help = subprocess.run([binary("torus-head"), "--help"], capture_output=True, text=True, timeout=30).stdout
    for arg in heads[0]["spec"]["template"]["spec"]["containers"][0]["args"]:
        assert arg.split("=", 1)[0] in head_help, arg
    node_help = subprocess.run([binary("torus-node"), "--help"], capture_output=True, text=True, timeout=30).stdout
    jobs = [doc for _, doc in manifests() if doc["kind"] == "Job"]
    for job in jobs:
        for arg in job["spec"]["template"]["spec"]["containers"][0]["args"]:
            assert arg.split("=", 1)[0] in node_help, arg


def _mounted_secrets(pod_spec):
    """{mount path: (secret name, keys mounted or None for all)} of the pod's first container."""
    volumes = {v["name"]: v["secret"] for v in pod_spec["volumes"] if "secret" in v}
    out = {}
    for mount in pod_spec["containers"][0]["volumeMounts"]:
        if mount["name"] in volumes:
            secret = volumes[mount["name"]]
            keys = [item["key"] for item in secret["items"]] if "items" in secret else None
            out[mount["mountPath"]] = (secret["secretName"], keys)
    return out


def _file_flags(args):
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}


def test_the_head_serves_tls_with_the_secret_whose_ca_and_join_token_its_hosts_mount_without_the_ca_key():
    head = next(doc for _, doc in manifests() if doc["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    flags = _file_flags(head["containers"][0]["args"])
    assert flags["--host"] == "0.0.0.0" and "--plaintext" not in head["containers"][0]["args"]
    secrets = _mounted_secrets(head)
    for flag, key in (("--tls-ca", "ca.crt"), ("--tls-ca-key", "ca.key"), ("--join-token-file", "join_token")):
        directory, name = flags[flag].rsplit("/", 1)
        assert name == key and secrets[directory] == ("torus-tls", None), (flag, secrets)
    assert head["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    config = yaml.safe_load((DEPLOY / "head" / "autoscaler.yaml").read_text())
    assert config["provider"]["tls_secret"] == "torus-tls"
    for _, job in ((n, d) for n, d in manifests() if d["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        flags = _file_flags(pod["containers"][0]["args"])
        secrets = _mounted_secrets(pod)
        for flag, key in (("--tls-ca", "ca.crt"), ("--join-token-file", "join_token")):
            directory, name = flags[flag].rsplit("/", 1)
            assert name == key and secrets[directory] == ("torus-tls", ["ca.crt", "join_token"]), (flag, secrets)


def test_the_image_builds_with_the_setup_script_and_the_targets_exist():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "scripts/setup.sh" in dockerfile and (DEPLOY.parent / "scripts" / "setup.sh").is_file()
    targets = dockerfile.split('TORUS_TARGETS="', 1)[1].split('"', 1)[0].split()
    for target in targets:
        if target != "_torus_core":
            binary(target)  # built by this build
