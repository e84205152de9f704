"""The HTTP gate in front of the embedded ClickHouse: credentials required, whatever the bind address.

chdb-core's clickhouse-local logs itself in as ``default`` with an empty password from the loopback
address, so that user must exist in its users.xml, and its HTTP handler would accept it from any
local client (even one that also sends other credentials: ``?user=default`` wins). So the listener
itself is private: it binds 127.0.0.1 on a port of its own and answers queries only to requests
that carry a random gate secret and the Basic credentials of one of our two roles (its
``http_handlers``; everything else gets 401). This gate is the public endpoint, on the DSN's host
and port. For each request it:

- refuses credentials in the URL (``user``, ``password``, ``quota_key``): they would override the
  Authorization header inside ClickHouse;
- accepts Basic auth or ``X-ClickHouse-User``/``X-ClickHouse-Key`` (turned into Basic), for the writer
  or the reader only, checked in constant time against the credentials file;
- refuses a URL parameter given twice, and SQL calling ``file(...)`` in any URL setting (some hold SQL:
  ``additional_result_filter``) or the query: in clickhouse-local that *function* (unlike the ``file`` table
  function, which needs the FILE grant neither role has) reads any path the process can. The body of
  an ``INSERT ... FORMAT X`` whose query parameter is one complete statement (X not Values) is data and
  streams unread, compressed or not, as sent. Any other body is read as ClickHouse reads it: decompressed
  by its ``Content-Encoding`` (gzip, deflate, lz4, zstd; ``content_encoding``; others and ``decompress=1``
  refused), joined to the query parameter by the newline ClickHouse puts between them, until its head
  ends such an INSERT statement (``StatementEnd``: the statement is checked, its data streams on) or the
  body ends (all of it checked, 16 MiB at most). What is forwarded is what was checked, decompressed,
  so ClickHouse cannot read another text out of the same bytes;
- forwards the rest, streaming both ways, with the secret added.

ClickHouse then applies the role's grants and profile (readonly for the reader, no SOURCES for either).
"""

from __future__ import annotations

import base64
import hmac
import re
from urllib.parse import unquote_plus

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from infersight.pipelines.clickhouse_users import Credentials
from infersight.pipelines.content_encoding import ACCEPTED, BodyRefused, Inflater, is_identity

SECRET_HEADER = "X-Infersight-Gate"
CREDENTIAL_PARAMS = frozenset({"user", "password", "quota_key"})
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length", "authorization",
                        "x-clickhouse-user", "x-clickhouse-key", "x-clickhouse-quota", SECRET_HEADER.lower()})
# SQL the gate refuses: functions of clickhouse-local that read the host without any privilege check.
# Nothing is stripped before matching (a comment marker inside a string literal would hide the call):
# comments may only sit between the name and its parenthesis, where ClickHouse allows them too.
_BETWEEN = r"(?:\s|/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)*"
_HOST_FUNCTIONS = re.compile(rf"\b(file|catboostEvaluate)\b{_BETWEEN}\(", re.I | re.S)
# Backslash escapes as ClickHouse reads them in quoted names and strings (`fil\x65` is `file`).
_ESCAPE = re.compile(r"\\([xX][0-9a-fA-F]{2}|.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}
# A query parameter that is one complete statement: whole string literals and quoted names, no comment,
# no heredoc ($$). Only then can its trailing FORMAT clause be trusted to end the SQL.
_COMPLETE_SQL = re.compile(r"""(?:'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`\\]|\\.|``)*`"""
                           r"""|[^'"`$#/\-]++|/(?!\*)|-(?!-))*+""", re.S)
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`\\]|\\.|``)*`""", re.S)
# The FORMAT clause must be the statement's first FORMAT word and its end: in `... FORMAT Values (x,
# 1 FORMAT TSV` the data that follows would still be Values (expressions), not TSV.
_INSERT_WITH_FORMAT = re.compile(r"^\s*INSERT\b(?:(?!\bFORMAT\b).)*\bFORMAT\s+(\w+)\s*;?\s*$", re.I | re.S)
MAX_SQL_BODY = 16 * 1024 * 1024
# Where an INSERT's statement may end inside a body that goes on with its data (clickhouse-connect puts
# the statement at the head of its compressed body): the first 64 KiB, at most 256 line ends tried.
STATEMENT_WINDOW = 64 * 1024
STATEMENT_TRIES = 256


def credential_params(query_string: str) -> set[str]:
    """Names of credential parameters in a raw query string, decoded as ClickHouse (Poco) decodes them."""
    found = set()
    for pair in query_string.split("&"):
        name = unquote_plus(pair.split("=", 1)[0])
        if name in CREDENTIAL_PARAMS:
            found.add(name)
    return found


def host_access(sql: str) -> str | None:
    """The host-touching function ``sql`` may call, if any (identifier quotes and escapes such as
    ``\\x65`` undone; conservative: the name followed by a parenthesis anywhere, string literals included)."""
    text = _ESCAPE.sub(_unescape, sql).replace("`", "").replace('"', "")
    match = _HOST_FUNCTIONS.search(text)
    return match.group(1) if match else None


def _unescape(match: re.Match) -> str:
    code = match.group(1)
    if code[0] in "xX" and len(code) == 3:
        return chr(int(code[1:], 16))
    return _ESCAPES.get(code, code)


def data_format(query: str) -> str | None:
    """The format of an ``INSERT ... FORMAT X`` query parameter whose body is then data only, or None
    when the body may continue the SQL (an open comment, string or heredoc, or no FORMAT clause)."""
    if not _COMPLETE_SQL.fullmatch(query):
        return None
    insert = _INSERT_WITH_FORMAT.match(_QUOTED.sub("''", query))
    return insert.group(1) if insert else None


class StatementEnd:
    """Where the head of a body ends an ``INSERT ... FORMAT X`` statement (X not Values) begun by the query
    parameter, so that what follows is data; fed the growing head, it tries each line end once."""

    def __init__(self, query: str) -> None:
        self.query = query + "\n"  # ClickHouse joins the parameter and the body with a newline
        self.searched = 0
        self.tries = 0

    def find(self, head: bytes) -> int | None:
        """The offset in ``head`` where the data begins, or None (not yet, or not an insert of data)."""
        while self.tries < STATEMENT_TRIES:
            end = head.find(b"\n", self.searched, STATEMENT_WINDOW)
            if end < 0:
                return None
            self.searched, self.tries = end + 1, self.tries + 1
            statement = self.query + head[:end].decode("utf-8", "replace")
            found = data_format(statement)
            if found is not None and found.lower() != "values" and not host_access(statement):
                return end + 1
        return None


class Gate:
    def __init__(self, credentials: Credentials, upstream: str, secret: str):
        self.credentials = credentials
        self.upstream = upstream.rstrip("/")
        self.secret = secret
        self.session: ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)  # bodies are streamed, never held whole
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app) -> None:
        self.session = ClientSession(connector=TCPConnector(limit=64), timeout=ClientTimeout(total=None),
                                     auto_decompress=False)

    async def _close(self, _app) -> None:
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/ping":
            return web.Response(text="Ok.\n")
        named = credential_params(request.rel_url.raw_query_string)
        if named:
            return _refuse(400, f"credentials in the URL ({', '.join(sorted(named))}) are not accepted; "
                                "send them as HTTP Basic auth")
        authorization, problem = self._authorize(request)
        if problem:
            return _refuse(401, problem)
        params = request.rel_url.query
        twice = sorted({name for name in params if len(params.getall(name)) > 1})
        if twice:
            # ClickHouse and the gate might each read a different one of them.
            return _refuse(400, f"parameter given more than once: {', '.join(twice)}")
        # Settings in the URL can hold SQL the server evaluates (additional_result_filter,
        # additional_table_filters): check every value but query parameters' (typed literals, never SQL).
        for name, value in params.items():
            function = host_access(value) if name != "query" and not name.startswith("param_") else None
            if function:
                return _refuse(403, f"function {function}() in the URL setting {name} reads the server's files "
                                    "and is refused by infersight (ACCESS_DENIED)")
        query = params.get("query", "")
        has_body = request.can_read_body  # false once the body is read
        data = data_format(query) if has_body else None
        if data is not None and data.lower() != "values" and not host_access(query):
            # The body is data. Values is the one format that evaluates expressions (file(...) too).
            return await self._forward(request, authorization, _decoded(request, None))
        # Otherwise the body holds (the rest of) the SQL, maybe followed by insert data.
        if params.get("decompress", "0") not in ("", "0"):
            return _refuse(400, "a query body in ClickHouse's compressed format (decompress=1) is not accepted; "
                                f"send the SQL uncompressed or with a Content-Encoding ({ACCEPTED})")
        if not has_body:
            return await self._checked(request, authorization, query, None)
        encoding = request.headers.get("Content-Encoding", "")
        try:
            pieces = _decoded(request, None if is_identity(encoding) else Inflater(encoding))
            # Read until the head ends an insert's statement (the rest is its data) or the body ends.
            head, statement_end, ends = bytearray(), StatementEnd(query), None
            async for piece in pieces:
                head += piece
                ends = statement_end.find(head)
                if ends is not None:
                    break
                if len(head) > MAX_SQL_BODY:
                    return _refuse(413, f"query text over {MAX_SQL_BODY >> 20} MiB (decompressed)")
        except BodyRefused as refused:
            return _refuse(refused.status, str(refused))
        if ends is None:
            return await self._checked(request, authorization, query + "\n" + head.decode("utf-8", "replace"),
                                       bytes(head))
        # StatementEnd checked the statement; the data streams on, decompressed as it was read.
        return await self._forward(request, authorization, _Resumed(bytes(head), pieces), drop=("content-encoding",))

    async def _checked(self, request: web.Request, authorization: str, sql: str,
                       body: bytes | None) -> web.StreamResponse:
        function = host_access(sql)
        if function:
            return _refuse(403, f"function {function}() reads the server's files and is refused by infersight "
                                "(ACCESS_DENIED)")
        # Forwarded as checked: decompressed, so ClickHouse cannot read another text out of the same bytes.
        return await self._forward(request, authorization, body, drop=("content-encoding",))

    def _authorize(self, request: web.Request) -> tuple[str, str | None]:
        header = request.headers.get("Authorization")
        x_user = request.headers.get("X-ClickHouse-User")
        if header and x_user is not None:
            return "", "use either the Authorization header or X-ClickHouse-User/Key, not both"
        if x_user is not None:
            user, password = x_user, request.headers.get("X-ClickHouse-Key", "")
        elif header and header[:6].lower() == "basic ":
            try:
                user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return "", "malformed Basic Authorization header"
        else:
            return "", ("ClickHouse here needs credentials: the infersight reader or writer "
                        f"(passwords in {self.credentials.path})")
        role = self.credentials.by_user(user)
        if role is None or not hmac.compare_digest(password.encode(), role.password.encode()):
            return "", f"{user}: authentication failed: password is incorrect, or there is no user with such name"
        token = base64.b64encode(f"{role.user}:{role.password}".encode()).decode()
        return f"Basic {token}", None

    async def _forward(self, request: web.Request, authorization: str, body,
                       drop: tuple[str, ...] = ()) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in drop}
        headers["Authorization"] = authorization
        headers[SECRET_HEADER] = self.secret
        data = body
        url = self.upstream + request.raw_path
        try:
            async with self.session.request(request.method, url, headers=headers, data=data) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in HOP_BY_HOP:
                        response.headers.add(key, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (TimeoutError, OSError, ClientError) as exc:
            refused = getattr(body, "refused", None)
            if refused is not None:  # the body turned corrupt while it streamed on: ClickHouse got it cut off
                return _refuse(refused.status, str(refused))
            return _refuse(502, f"the embedded ClickHouse did not answer: {exc}")


async def _decoded(request: web.Request, inflater: Inflater | None):
    """The body's bytes in pieces: decompressed by ``inflater``, or as sent when it is None (data streamed on
    with its Content-Encoding, or a body without one)."""
    async for chunk in request.content.iter_chunked(1 << 20):
        if inflater is None:
            yield chunk
            continue
        for piece in inflater.feed(chunk):
            yield piece
    if inflater is not None:
        inflater.finish()


class _Resumed:
    """The head already read, then the rest of the body; keeps why the rest failed (aiohttp wraps it)."""

    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest, self.refused = head, rest, None

    async def __aiter__(self):
        yield self.head
        try:
            async for piece in self.rest:
                yield piece
        except BodyRefused as refused:
            self.refused = refused
            raise


def _refuse(status: int, message: str) -> web.Response:
    code = {400: 27, 401: 516, 403: 497, 413: 252, 415: 36, 502: 210}.get(status, 1000)
    return web.Response(status=status, text=f"Code: {code}. DB::Exception: {message}. (infersight gate)\n",
                        headers={"X-ClickHouse-Exception-Code": str(code)})


async def serve(gate: Gate, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start the gate on ``host:port`` (0: a free port); returns the runner and the bound port."""
    # The receiver's INSERT ... SELECT (and its inline protobuf schema) travel in the URL: long request lines.
    # Bodies arrive as sent (auto_decompress off): a compressed insert streams on compressed, with its
    # Content-Encoding, as ClickHouse expects it; a compressed SQL body is inflated by the gate itself.
    runner = web.AppRunner(gate.app(), access_log=None, auto_decompress=False,
                           max_line_size=4 * 1024 * 1024, max_field_size=64 * 1024)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]
