"""Where a Serve deployment lives on torus: the name of its service and the route prefix of it.

A service name is 1-40 of a-z, 0-9 and '-', starting and ending with a letter or digit (docs/serving.md). An
application's deployment maps to `<app>-<deployment>-<hash>`: both names lowercased with every other character as
'-', each cut to 16, and 6 hex digits of SHA-256 over the exact names, so names that differ only in case or
punctuation ("Model" and "model", "a_b" and "a-b") get services of their own, and deploying the same application
again finds the same services. Ray's names travel in the service's env (TORUS_SERVE_APP, TORUS_SERVE_DEPLOYMENT).

The ingress deployment takes the application's route_prefix; every other deployment (and the ingress of an
application run with route_prefix=None) an internal one, `/-/serve/<service name>`, which handle calls use.
Pure functions; thread-safe.
"""

import hashlib
import re

INTERNAL_PREFIX = "/-/serve/"
PART_MAX = 16


def _slug(name, fallback):
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name.lower())).strip("-")[:PART_MAX].strip("-")
    return slug or fallback


def service_name(app_name: str, deployment_name: str) -> str:
    digest = hashlib.sha256(f"{app_name}\0{deployment_name}".encode()).hexdigest()[:6]
    return f"{_slug(app_name, 'app')}-{_slug(deployment_name, 'deployment')}-{digest}"


def internal_route_prefix(service: str) -> str:
    return INTERNAL_PREFIX + service


def route_prefix_of(service: str, is_ingress: bool, app_route_prefix) -> str:
    if is_ingress and app_route_prefix is not None:
        return app_route_prefix
    return internal_route_prefix(service)
