"""The state API's errors (as ray.util.state.exception).

RayStateApiException: the head could not answer a query (it refused it, or its answer is missing data the caller
asked not to miss). ServerUnavailable: the head's HTTP API could not be reached at all.
DataSourceUnavailable: a source behind the API did not answer (kept for programs that import it).
"""


class DataSourceUnavailable(Exception):
    pass


class RayStateApiException(Exception):
    pass


class ServerUnavailable(RayStateApiException):
    """The head's HTTP API could not be reached."""
