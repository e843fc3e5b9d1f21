"""Strict checks of Kubernetes objects against the Kubernetes API's own models (Debian's python3-kubernetes): every
field must be one the API knows, of the type it expects, and required fields must be present. The client's own
deserializer ignores unknown fields; this does not."""

import datetime
import json

import kubernetes.client as k8s
from kubernetes.client import ApiClient

# apiVersion/kind -> model class name, for the kinds torus creates or ships in deploy/.
MODELS = {
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("batch/v1", "Job"): "V1Job",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
}


def _check(value, typ, path, problems):
    if typ.startswith("list["):
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, typ[5:-1], f"{path}[{i}]", problems)
    elif typ.startswith("dict("):
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a map, got {type(value).__name__}")
            return
        inner = typ[typ.index(",") + 1:-1].strip()
        for key, item in value.items():
            _check(item, inner, f"{path}.{key}", problems)
    elif typ == "str":
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {value!r}")
    elif typ == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: expected an integer, got {value!r}")
    elif typ == "bool":
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, got {value!r}")
    elif typ == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append(f"{path}: expected a number, got {value!r}")
    elif typ in ("object", "datetime", "date"):
        pass  # int-or-string and free-form values; times are strings
    else:
        klass = getattr(k8s, typ, None)
        if klass is None:
            problems.append(f"{path}: unknown model {typ}")
            return
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object ({typ}), got {value!r}")
            return
        by_json = {json_key: attr for attr, json_key in klass.attribute_map.items()}
        for key, item in value.items():
            if key not in by_json:
                problems.append(f"{path}: unknown field {key!r} of {typ}; known: {', '.join(sorted(by_json))}")
                continue
            _check(item, klass.openapi_types[by_json[key]], f"{path}.{key}", problems)


class _Answer:
    def __init__(self, data):
        self.data = json.dumps(data)


def problems_of(obj):
    """Every way `obj` (a dict) is not a valid object of its apiVersion and kind; [] when it is."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in MODELS:
        return [f"apiVersion/kind {key} is not one this check knows"]
    problems = []
    _check(obj, MODELS[key], obj.get("kind", "?"), problems)
    if not problems:
        try:  # required fields: the model's constructor refuses None for them
            ApiClient().deserialize(_Answer(obj), MODELS[key])
        except (ValueError, TypeError) as error:
            problems.append(f"{obj.get('kind')}: {error}")
    return problems
