"""One identity per engine instance (DESIGN 10): its endpoint ``host:port``.

The engine collector, the gateway's and proxy's request metrics and the spans all name an engine
instance the same way, so one PromQL ``on (instance)`` joins queue depth, KV usage, TTFT and
ejections of the same instance, and a trace's ``llm.instance`` links to its panels.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from infersight import attributes as attr


def instance_name(host: str, port: int) -> str:
    """``host:port``; an IPv6 address in brackets, as in a URL (``[::1]:8000``)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def split_instance(instance: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` instance name, or None when it is not one (a plain name).

    The host comes back without IPv6 brackets, as OpenTelemetry's ``server.address`` wants it.
    """
    host, sep, port = instance.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "/" in host:
        return None  # an unbracketed IPv6 address or a path: ambiguous, not an endpoint
    return host, int(port)


@functools.lru_cache(maxsize=4096)
def instance_attributes(instance: str) -> Mapping[str, str | int]:
    """Span attributes naming the engine instance: ``llm.instance`` and, for a ``host:port``
    instance, ``server.address`` and ``server.port``. Empty for no instance (not yet routed).

    Cached per instance (the hot path calls it once per request); the mapping must not be changed.
    """
    if not instance:
        return {}
    out: dict[str, str | int] = {attr.INSTANCE: instance}
    address = split_instance(instance)
    if address is not None:
        out[attr.SERVER_ADDRESS], out[attr.SERVER_PORT] = address
    return out
