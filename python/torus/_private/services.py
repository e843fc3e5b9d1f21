"""This machine as the cluster sees it (as ray._private.services): its node's IP address and its cloud instance id.

get_node_ip_address(): in a connected process, the IP of its node (the host of the node's agent, as ray.nodes()
gives it in NodeManagerAddress); otherwise the address this host would use to reach `address` (default 8.8.8.8:53;
no packet is sent), or 127.0.0.1 when it has no route there.
get_node_instance_id(): RAY_CLOUD_INSTANCE_ID, else "" (as Ray).
"""

import os
import socket

from torus._private import state as _st

_PERSPECTIVE = "8.8.8.8:53"


def _connected_node_ip(state):
    if os.environ.get("TORUS_NODE_IP") and state.is_worker:
        return os.environ["TORUS_NODE_IP"]
    for refresh in (False, True):
        if refresh:
            state.core.refresh_nodes()
        for node_id, agent, _, _ in state.core.nodes():
            if node_id == state.node_id:
                return agent.rsplit(":", 1)[0]
    return None


def _ip_toward(address):
    host, _, port = (address or _PERSPECTIVE).rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.connect((host, int(port)))  # a UDP "connect" only picks the route and source address
        return sock.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        sock.close()


def get_node_ip_address(address=None):
    state = _st.current()
    if state is not None:
        ip = _connected_node_ip(state)
        if ip:
            return ip
    return _ip_toward(address)


def get_node_instance_id():
    return os.getenv("RAY_CLOUD_INSTANCE_ID", "")
