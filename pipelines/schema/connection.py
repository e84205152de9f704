"""Open a clickhouse-connect client from a DSN, with errors worded for the CLI.

``http(s)://host:port/database`` talks to a ClickHouse server (the embedded one from ``infersight up``
included). ``chdb://PATH`` opens the data folder in-process; clickhouse-connect needs the separate
``chdb`` package for that (``pip install 'clickhouse-connect[chdb]'``), which chdb-core alone does not
provide, and the folder must not be open in a running server at the same time.

Parsing and validation live in :mod:`infersight.dsn`. A DSN without a user gets the credentials of
the embedded store in ``clickhouse.data_dir`` when it has some: its **reader** for commands that
only read (queries, reports, ``db status``), its **writer** for the receiver and ``db migrate``.

Clients connect to the server's ``default`` database and qualify every table with the DSN's
database, so ``infersight db migrate`` can create that database first.
"""

from __future__ import annotations

import logging
import re

from infersight import dsn as dsn_mod
from infersight.dsn import Dsn, DsnError

READER = "reader"
WRITER = "writer"


class ConnectionFailed(Exception):
    """ClickHouse could not be reached or opened; the message says how to fix it."""


def database_of(dsn: str | Dsn) -> str:
    """The database named in a DSN (``default`` when none)."""
    if isinstance(dsn, Dsn):
        return dsn.database
    try:
        return dsn_mod.parse(dsn, must_exist=False).database
    except DsnError as exc:
        raise ConnectionFailed(str(exc)) from None


def resolve(dsn: str | Dsn, role: str = READER, data_dir: str | None = None, must_exist: bool = True) -> Dsn:
    """``dsn`` parsed and validated, with the embedded store's ``role`` credentials when it names no user."""
    try:
        parsed = dsn if isinstance(dsn, Dsn) else dsn_mod.parse(dsn, must_exist=must_exist)
    except DsnError as exc:
        raise ConnectionFailed(str(exc)) from None
    if parsed.is_http and parsed.user is None and data_dir:
        from infersight.pipelines import clickhouse_users

        try:
            credentials = clickhouse_users.load(data_dir)
        except clickhouse_users.CredentialsError as exc:
            raise ConnectionFailed(str(exc)) from None
        if credentials is not None:
            who = credentials.role(role)
            parsed = parsed.with_user(who.user, password_file=str(credentials.path))
    return parsed


# What every clickhouse-connect client of ours is given (the CLI's, the receiver's, the embedded server's).
# No session: nothing here needs one (no temporary tables, no SET), a session costs the server a lookup
# and a lock per query (SELECT 1 over the gate 1.6 against 2.1 ms), and it refuses two concurrent
# queries from one client.
CLIENT_DEFAULTS = {"autogenerate_session_id": False}


def connect(dsn: str | Dsn, role: str = READER, data_dir: str | None = None, **kwargs):
    """A clickhouse-connect client for ``dsn`` (its session database is ``default``)."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import ClickHouseError

    parsed = resolve(dsn, role, data_dir, must_exist=role == READER)
    if parsed.scheme == "chdb":
        try:
            import chdb  # noqa: F401 - only to give a clear message when it is missing
            from clickhouse_connect.driver._chdbclient import ChdbClient  # noqa: F401
        except ImportError:
            raise ConnectionFailed(f"{parsed}: the chdb:// DSN needs the 'chdb' package "
                                   "(pip install 'clickhouse-connect[chdb]'); or run `infersight up` "
                                   "and use its http:// address") from None
        options = {"dsn": f"chdb://{parsed.path}"}
    else:
        try:
            password = parsed.resolve_password()
        except DsnError as exc:
            raise ConnectionFailed(str(exc)) from None
        options = {"interface": parsed.scheme, "host": parsed.host, "port": parsed.port,
                   "username": parsed.user or "default", "password": password, "database": "default"}
    # clickhouse-connect also logs the failure it raises; the caller reports it once, worded for people.
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
    try:
        return clickhouse_connect.get_client(**options, **{**CLIENT_DEFAULTS, **kwargs})
    except ClickHouseError as exc:
        raise ConnectionFailed(describe_failure(parsed, exc)) from None


def describe_failure(dsn: Dsn, exc: Exception) -> str:
    text = str(exc)
    if "Code: 516" in text or "AUTHENTICATION_FAILED" in text:
        who = dsn.user or "default"
        return (f"ClickHouse at {dsn} refused the credentials of {who!r}: {_first_line(text)}\n"
                "Name the user in clickhouse.dsn with its password_file (e.g. http://infersight_reader@HOST:PORT/DB"
                "?password_file=DATA_DIR/credentials.json), or set clickhouse.data_dir to the folder of "
                "`infersight up`")
    reason = re.search(r"\[Errno -?\d+\] [^)\"']+", text)
    return (f"cannot reach ClickHouse at {dsn}: {reason.group(0) if reason else _first_line(text)}\n"
            "Start it with `infersight up`, or set clickhouse.dsn in infersight.yaml")


def _first_line(text: str) -> str:
    match = re.search(r"Code: \d+\. DB::Exception: [^\n]*", text)
    return (match.group(0) if match else text.splitlines()[0])[:300]
