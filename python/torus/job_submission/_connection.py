"""Where a job client's requests go and what they carry: the head's HTTP address, the cluster token and the CA that
checks a head serving TLS. Plain urllib: no compiled code is needed unless the address is a head's gRPC address
that this machine's session does not name.

Address (Ray's rules, then torus's): RAY_API_SERVER_ADDRESS, else RAY_ADDRESS, overrides the argument, as in Ray.
"http(s)://host:port" is the head's HTTP API as is. None or "auto": TORUS_DASHBOARD_ADDRESS, else the dashboard of
this machine's latest session ($TORUS_TEMP_DIR/session_latest, default /tmp/torus). "host:port" without a scheme is
a head's gRPC address (as for init()): the session's dashboard when it is that session's head, else the HTTP address
the head gives.

Token, unless the caller's headers carry an Authorization header: TORUS_TOKEN, else RAY_AUTH_TOKEN (or the file
RAY_AUTH_TOKEN_PATH) when RAY_AUTH_MODE=token, else the session's token when the address is that session's head —
a token is never sent to another cluster unasked.

TLS: verify=False checks nothing; a path is the CA file or directory; True checks against TORUS_TLS_CA, else the
session's ca.crt for that session's head, else the system's CAs. An address without a scheme gets https when one of
those cluster CAs is known (a head with TLS serves HTTPS only).
"""

import os
import ssl
import urllib.error
import urllib.parse
import urllib.request

from torus import exceptions

_NOT_FOUND = ("Could not find any running Ray instance. Please specify the one to connect to by setting `--address` "
              "flag or `RAY_ADDRESS` environment variable.")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class Session:
    """This machine's latest session (what `torus start` / `torus up` wrote), or None when there is none."""

    def __init__(self, path):
        self.path = path
        self.dashboard = _read(os.path.join(path, "dashboard_address"))
        self.head = _read(os.path.join(path, "head_address"))
        self.token = _read(os.path.join(path, "token"))
        ca = os.path.join(path, "ca.crt")
        self.ca = os.path.realpath(ca) if os.path.exists(ca) else None

    @classmethod
    def latest(cls):
        path = os.path.join(os.environ.get("TORUS_TEMP_DIR", "/tmp/torus"), "session_latest")
        session = cls(path)
        return session if session.dashboard else None

    def url(self):
        return f"{'https' if self.ca else 'http'}://{self.dashboard}"


def _same_host_port(a, b):
    def norm(hostport):
        host, _, port = hostport.rpartition(":")
        return ("127.0.0.1" if host in ("localhost", "[::1]", "::1") else host), port
    return a is not None and b is not None and norm(a) == norm(b)


def _env_token():
    token = os.environ.get("TORUS_TOKEN")
    if token:
        return token
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        token = os.environ.get("RAY_AUTH_TOKEN")
        if not token and os.environ.get("RAY_AUTH_TOKEN_PATH"):
            token = _read(os.environ["RAY_AUTH_TOKEN_PATH"])
        return token or None
    return None


def resolve_url(address, token_hint=None):
    """(the head's HTTP API URL without a trailing slash, the session it belongs to or None)."""
    address = os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or address
    session = Session.latest()
    if address and "://" in address:
        scheme = address.split("://", 1)[0]
        if scheme == "ray":
            raise ValueError(f"address: Ray Client addresses (ray://) are not served by torus; give the head's HTTP "
                             f"API (http://host:port), got {address!r}")
        if scheme not in ("http", "https"):
            raise ValueError(f"address: {address!r} is not an address torus serves; give the head's HTTP API "
                             f"(http://host:port or https://host:port), or its host:port")
        url = address.rstrip("/")
    elif address in (None, "", "auto"):
        dashboard = os.environ.get("TORUS_DASHBOARD_ADDRESS")
        if dashboard and "://" in dashboard:
            url = dashboard.rstrip("/")
        elif dashboard:
            mine = session is not None and _same_host_port(dashboard, session.dashboard)
            tls = os.environ.get("TORUS_TLS_CA") or (mine and session.ca)
            url = f"{'https' if tls else 'http'}://{dashboard}"
        elif session is not None:
            url = session.url()
        else:
            root = os.environ.get("TORUS_TEMP_DIR", "/tmp/torus")
            raise ConnectionError(f"{_NOT_FOUND} (torus: no TORUS_DASHBOARD_ADDRESS and no session under {root}; "
                                  f"start one with `torus up` or `torus start --head`)")
    elif session is not None and _same_host_port(address, session.head):
        url = session.url()
    else:
        url = _ask_head(address, token_hint or _env_token())
    netloc = urllib.parse.urlsplit(url).netloc
    return url, session if session is not None and _same_host_port(netloc, session.dashboard) else None


def _ask_head(head, token):
    if not token:
        raise ConnectionError(f"address {head!r} is a head's gRPC address, whose HTTP API only the head can tell, "
                              f"and no cluster token was given: set TORUS_TOKEN, or give the HTTP API "
                              f"(http://host:port) with headers={{'Authorization': 'Bearer <token>'}}")
    from torus._private import state as _st
    try:
        http = _st.import_core().head_http_address(head, token)
    except RuntimeError as e:
        raise ConnectionError(f"Failed to connect to Ray at address: {head}. ({e})") from None
    return f"{'https' if os.environ.get('TORUS_TLS_CA') else 'http'}://{http}"


def auth_headers(headers, session):
    """The Authorization header to add (empty when the caller's headers have one, or no token is known)."""
    if any(k.lower() == "authorization" for k in headers):
        return {}
    token = _env_token() or (session.token if session is not None else None)
    return {"Authorization": f"Bearer {token}"} if token else {}


def ssl_context(url, verify, session):
    """The SSLContext for `url` (None for http)."""
    if not url.startswith("https://"):
        return None
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        if os.path.isfile(verify):
            return ssl.create_default_context(cafile=verify)
        raise FileNotFoundError(f"Path to CA certificates: '{verify}', does not exist.")
    ca = os.environ.get("TORUS_TLS_CA") or (session.ca if session is not None else None)
    return ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()


class Response:
    def __init__(self, status_code, text):
        self.status_code = status_code
        self.text = text


def request(url, method, headers, context, data=None, timeout=None):
    """One HTTP request; a Response whatever its status. ConnectionError when the head cannot be reached;
    AuthenticationError for 401 and 403, with Ray's words."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as reply:
            response = Response(reply.status, reply.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        response = Response(e.code, e.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ConnectionError(f"Failed to connect to Ray at address: {url.split('/api/', 1)[0]}. ({reason})") from None
    if response.status_code == 401:
        raise exceptions.AuthenticationError(f"Authentication required: {response.text.strip()}")
    if response.status_code == 403:
        raise exceptions.AuthenticationError(f"Authentication failed: {response.text.strip()}")
    return response
