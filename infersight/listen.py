"""``HOST:PORT`` listen addresses, parsed in one place for every listener and CLI flag.

The config's ``listeners``, ``--listen`` of the collectors and the proxy, the receiver's
``--otlp-http``/``--otlp-grpc`` and ``prometheus render --alertmanager`` all take the same form, so
they share one parser and one wording of its errors. IPv6 hosts are written in brackets, as in a URL
(``[::1]:9835``); port 0 asks the OS for a free port.
"""

from __future__ import annotations

from dataclasses import dataclass

from infersight.instances import instance_name

IPV4_ANY = ("0.0.0.0", "")
IPV6_ANY = ("::",)


@dataclass(frozen=True)
class Listen:
    """A parsed ``HOST:PORT``: ``host`` as a socket wants it (IPv6 without brackets), ``port`` 0..65535."""

    host: str
    port: int

    def __str__(self) -> str:
        return instance_name(self.host, self.port)

    @property
    def url_host(self) -> str:
        """The host as it stands in a URL (IPv6 in brackets)."""
        return str(self).rpartition(":")[0]

    @property
    def is_wildcard(self) -> bool:
        """Bound to every address of the machine (``0.0.0.0``, ``[::]``)."""
        return self.host in IPV4_ANY or self.host in IPV6_ANY

    def with_port(self, port: int) -> Listen:
        """The same host on ``port`` (the port a server bound when it was asked for port 0)."""
        return Listen(self.host, port)

    def dialable(self) -> Listen:
        """Where a client on this machine reaches the listener: a wildcard bind on loopback."""
        if self.host in IPV4_ANY:
            return Listen("127.0.0.1", self.port)
        if self.host in IPV6_ANY:
            return Listen("::1", self.port)
        return self


def parse_listen(value: str, *, what: str = "listen address", example: str = "127.0.0.1:9835") -> Listen:
    """Parse ``HOST:PORT``; a ValueError says which ``what`` is wrong, how, and shows ``example``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{what} {value!r}: expected HOST:PORT, e.g. {example}")
    if int(port) > 65535:
        raise ValueError(f"{what} {value!r}: expected HOST:PORT with the port between 0 and 65535, e.g. {example}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Listen(host, int(port))
