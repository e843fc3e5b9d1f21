"""The head's own record of one actor (GET /api/v0/actors/{id}: owner address, methods, restarts, ...), for this
process's runtime context; None when the head does not know it."""

import urllib.parse

from torus.util.state._client import StateApiClient


def actor_view(actor_id):
    view, _ = StateApiClient()._get(f"/api/v0/actors/{urllib.parse.quote(actor_id, safe='')}")
    return view
