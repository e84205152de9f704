"""ClickHouse DSNs, parsed and validated in one place.

Forms accepted (``clickhouse.dsn``, every ``--dsn``)::

    http://HOST:PORT/DATABASE                      a ClickHouse server (the embedded one of `infersight up` too)
    https://USER@HOST:PORT/DATABASE?password_file=PATH
    chdb:///ABSOLUTE/PATH[?database=DB]            the in-process engine on a data folder
    chdb://RELATIVE/PATH                           (relative to the working folder)

A DSN without a user is resolved against the credentials file of the embedded store
(``<clickhouse.data_dir>/credentials.json``, see :mod:`infersight.pipelines.clickhouse_users`):
commands that only read use its reader, the receiver and ``db migrate`` its writer. A password is
never taken from the command line by default: ``password_file`` names a file holding it (either
the password alone, or our credentials file, from which the user's entry is taken).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit

SCHEMES = ("http", "https", "chdb")
DEFAULT_PORTS = {"http": 8123, "https": 8443}
DATABASE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
OPTIONS = ("password_file", "database")
EXAMPLES = "e.g. http://127.0.0.1:8123/default or chdb:///var/lib/infersight/clickhouse"


class DsnError(ValueError):
    """A DSN that cannot be used; the message says what is wrong and gives an example."""


@dataclass(frozen=True)
class Dsn:
    scheme: str  # http, https or chdb
    database: str = "default"
    host: str | None = None  # http(s) only
    port: int | None = None  # http(s) only
    path: str | None = None  # chdb only: the data folder
    user: str | None = None
    password: str | None = None  # inline (user:password@); prefer password_file
    password_file: str | None = None

    @property
    def is_http(self) -> bool:
        return self.scheme in ("http", "https")

    @property
    def base_url(self) -> str:
        """``scheme://host:port`` of an HTTP DSN (no credentials, no database)."""
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def with_user(self, user: str, password: str | None = None, password_file: str | None = None) -> Dsn:
        return replace(self, user=user, password=password, password_file=password_file)

    def resolve_password(self) -> str:
        """The password for ``user``: inline, from ``password_file``, or empty."""
        if self.password is not None:
            return self.password
        if self.password_file is None:
            return ""
        file = Path(self.password_file).expanduser()
        try:
            text = file.read_text()
        except OSError as exc:
            raise DsnError(f"password_file {file}: cannot read it ({exc.strerror})") from None
        try:
            document = json.loads(text)
        except ValueError:
            return text.strip()
        if isinstance(document, dict):  # our credentials file: the entry of this user
            for entry in document.values():
                if isinstance(entry, dict) and entry.get("user") == self.user and "password" in entry:
                    return str(entry["password"])
            raise DsnError(f"password_file {file}: no password for user {self.user!r} in it")
        return text.strip()

    def __str__(self) -> str:
        """The DSN as text, without any inline password (safe to print)."""
        query = f"?password_file={quote(self.password_file)}" if self.password_file else ""
        if self.scheme == "chdb":
            database = f"{'&' if query else '?'}database={self.database}" if self.database != "default" else ""
            return f"chdb://{self.path}{query}{database}"
        user = f"{quote(self.user, safe='')}@" if self.user else ""
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{self.scheme}://{user}{host}:{self.port}/{self.database}{query}"


def parse(text: str, *, must_exist: bool = True) -> Dsn:
    """Parse and validate ``text``; for ``chdb://`` the folder must exist unless ``must_exist`` is false."""
    if not isinstance(text, str) or not text.strip():
        raise DsnError(f"empty ClickHouse DSN; {EXAMPLES}")
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise DsnError(f"{_safe(text)}: not a valid URL ({exc}); {EXAMPLES}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        got = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise DsnError(f"{_safe(text)}: {got}; expected http://, https:// or chdb:// ({EXAMPLES})")
    options = _options(text, parts.query)
    if scheme == "chdb":
        return _chdb(text, parts, options, must_exist)
    if parts.fragment:
        raise DsnError(f"{_safe(text)}: a DSN has no #fragment")
    if not parts.hostname:
        raise DsnError(f"{_safe(text)}: no host; {EXAMPLES}")
    if port is None:
        port = DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise DsnError(f"{_safe(text)}: port {port} is out of range 1..65535")
    path = parts.path.strip("/")
    if "database" in options:
        raise DsnError(f"{_safe(text)}: put the database in the path (/{options['database']}), not in ?database=")
    database = unquote(path) if path else "default"
    _check_database(text, database)
    user = unquote(parts.username) if parts.username else None
    if user is not None and not USER.match(user):
        raise DsnError(f"{_safe(text)}: user {user!r} is not a valid ClickHouse user name")
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and "password_file" in options:
        raise DsnError(f"{_safe(text)}: give the password inline or as password_file, not both")
    return Dsn(scheme=scheme, host=parts.hostname, port=port, database=database, user=user, password=password,
               password_file=options.get("password_file"))


def _chdb(text: str, parts, options: dict[str, str], must_exist: bool) -> Dsn:
    # Everything between chdb:// and ?options is the folder: chdb:///abs/path, or chdb://relative/path.
    path = unquote(text.split("://", 1)[1].split("?", 1)[0])
    if "@" in path.split("/", 1)[0]:
        raise DsnError(f"{_safe(text)}: chdb:// opens a folder in-process and takes no user or password")
    if not path:
        raise DsnError(f"{_safe(text)}: no data folder; {EXAMPLES}")
    database = options.get("database", "default")
    _check_database(text, database)
    folder = Path(path)
    if must_exist and not folder.is_dir():
        raise DsnError(f"{text}: no ClickHouse data folder at {folder} (a typo? `infersight db migrate --dsn "
                       f"{text}` creates it)")
    return Dsn(scheme="chdb", path=str(folder), database=database, password_file=options.get("password_file"))


def _options(text: str, query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in OPTIONS:
            raise DsnError(f"{_safe(text)}: unknown option {key!r}; known: {', '.join(OPTIONS)}")
        if not value:
            raise DsnError(f"{_safe(text)}: option {key!r} has no value")
        options[key] = value
    return options


def _check_database(text: str, database: str) -> None:
    if not DATABASE.match(database):
        raise DsnError(f"{_safe(text)}: database {database!r} is not a plain name (letters, digits, _)")


def _safe(text: str) -> str:
    """The DSN for an error message, with any inline password masked."""
    return re.sub(r"(//[^:/@]+:)[^@/]*@", r"\1***@", text)
