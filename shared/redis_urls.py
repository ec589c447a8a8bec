"""Redis URLs: a ``redis+cluster://`` (or ``rediss+cluster://``) URL names a Redis
Cluster by any of its nodes; other URLs name one server."""

from __future__ import annotations

_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://host:port``)."""
    return url.partition("://")[0].lower() in _CLUSTER_SCHEMES


def node_url(url: str) -> str:
    """A cluster URL as the plain URL of the node it names (other URLs unchanged)."""
    scheme, sep, rest = url.partition("://")
    return f"{_CLUSTER_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}"
