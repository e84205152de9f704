"""Open a clickhouse-connect client from the config's DSN, with errors worded for the CLI.

``http(s)://host:port/database`` talks to a ClickHouse server (the embedded one from ``infersight up``
included). ``chdb://PATH`` opens the data folder in-process; clickhouse-connect needs the separate
``chdb`` package for that (``pip install 'clickhouse-connect[chdb]'``), which chdb-core alone does not
provide, and the folder must not be open in a running server at the same time.

Clients connect to the server's ``default`` database and qualify every table with the DSN's
database, so ``infersight db migrate`` can create that database first.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit


class ConnectionFailed(Exception):
    """ClickHouse could not be reached or opened; the message says how to fix it."""


def database_of(dsn: str) -> str:
    """The database named in a DSN's path (``default`` when none)."""
    parts = urlsplit(dsn)
    path = parts.path.strip("/")
    if dsn.startswith("chdb:"):
        # chdb:///abs/path has no database part; chdb://memory/db does.
        return path if parts.netloc and path else "default"
    return path or "default"


def connect(dsn: str, **kwargs):
    """A clickhouse-connect client for ``dsn`` (its session database is ``default``)."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import ClickHouseError

    if dsn.startswith("chdb:"):
        try:
            import chdb  # noqa: F401 - only to give a clear message when it is missing
            from clickhouse_connect.driver._chdbclient import ChdbClient  # noqa: F401
        except ImportError:
            raise ConnectionFailed(f"{dsn}: the chdb:// DSN needs the 'chdb' package "
                                   "(pip install 'clickhouse-connect[chdb]'); or run `infersight up` "
                                   "and use its http:// address") from None
    parts = urlsplit(dsn)
    if dsn.startswith("http"):
        base = f"{parts.scheme}://{parts.netloc}/default"
    elif parts.netloc:  # chdb://memory/db
        base = f"chdb://{parts.netloc}"
    else:
        base = f"chdb://{parts.path}"
    # clickhouse-connect also logs the failure it raises; the caller reports it once, worded for people.
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
    try:
        return clickhouse_connect.get_client(dsn=base, **kwargs)
    except ClickHouseError as exc:
        text = str(exc)
        reason = re.search(r"\[Errno -?\d+\] [^)\"']+", text)
        raise ConnectionFailed(f"cannot reach ClickHouse at {dsn}: "
                               f"{reason.group(0) if reason else text.splitlines()[0][:300]}\n"
                               "Start it with `infersight up`, or set clickhouse.dsn in infersight.yaml") from None
