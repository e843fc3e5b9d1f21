"""ray.serve on torus: deployments as torus services behind the head's HTTP ingress (docs/serving.md, "From
Python: ray.serve").

    from ray import serve

    @serve.deployment(num_replicas=2)
    class Hello:
        def __call__(self, request):
            return f"hello {request.query_params['name']}"

    handle = serve.run(Hello.bind())           # one service; its replicas are processes the head supervises
    print(handle.remote(...).result())         # or GET http://<ingress>/?name=x

Ray 2.60's public names, signatures, defaults and errors; what torus does differently is in docs/serving.md.
"""

from torus.serve.api import (Application, Deployment, RunTarget, _run, _run_many, delete, deployment,
                             get_app_handle, get_deployment_handle, get_replica_context, ingress, run, run_many,
                             shutdown, shutdown_async, start, status)
from torus.serve.batching import batch
from torus.serve.config import HTTPOptions, gRPCOptions

__all__ = ["_run", "_run_many", "batch", "start", "HTTPOptions", "gRPCOptions", "get_replica_context", "shutdown", "shutdown_async",
           "ingress", "deployment", "run", "run_many", "RunTarget", "delete", "Application", "Deployment", "status", "get_app_handle",
           "get_deployment_handle"]
