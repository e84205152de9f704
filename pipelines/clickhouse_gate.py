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
- refuses SQL calling ``file(...)``: in clickhouse-local that *function* (unlike the ``file`` table
  function, which needs the FILE grant neither role has) reads any path the process can;
- forwards the rest, streaming both ways, with the secret added.

ClickHouse then applies the role's grants and profile (readonly for the reader, no SOURCES for either).
"""

from __future__ import annotations

import base64
import hmac
import re
from urllib.parse import unquote_plus

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from infersight.pipelines.clickhouse_users import Credentials

SECRET_HEADER = "X-Infersight-Gate"
CREDENTIAL_PARAMS = frozenset({"user", "password", "quota_key"})
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length", "authorization",
                        "x-clickhouse-user", "x-clickhouse-key", "x-clickhouse-quota", SECRET_HEADER.lower()})
# SQL the gate refuses: functions of clickhouse-local that read the host without any privilege check.
_COMMENTS = re.compile(r"/\*.*?\*/|--[^\n]*|#[^\n]*", re.S)
_HOST_FUNCTIONS = re.compile(r"\b(file|catboostEvaluate)\s*\(", re.I)
_INSERT_WITH_FORMAT = re.compile(r"^\s*INSERT\b.*\bFORMAT\s+(\w+)\s*;?\s*$", re.I | re.S)
MAX_SQL_BODY = 16 * 1024 * 1024
PEEK_BYTES = 64 * 1024
_VALUES = re.compile(rb"\b(?:FORMAT\s+Values|VALUES)\b", re.I)
_INSERT_START = re.compile(r"^\s*(?:(?:--[^\n]*|#[^\n]*)\n\s*|/\*.*?\*/\s*)*INSERT\b", re.I | re.S)


def credential_params(query_string: str) -> set[str]:
    """Names of credential parameters in a raw query string, decoded as ClickHouse (Poco) decodes them."""
    found = set()
    for pair in query_string.split("&"):
        name = unquote_plus(pair.split("=", 1)[0])
        if name in CREDENTIAL_PARAMS:
            found.add(name)
    return found


def host_access(sql: str) -> str | None:
    """The host-touching function ``sql`` calls, if any (comments and identifier quotes ignored)."""
    text = _COMMENTS.sub(" ", sql).replace("`", "").replace('"', "")
    match = _HOST_FUNCTIONS.search(text)
    return match.group(1) if match else None


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
        query = request.rel_url.query.get("query", "")
        body: bytes = b""
        rest = False  # more body to stream after ``body``
        has_body = request.can_read_body  # false once the body is read
        insert = _INSERT_WITH_FORMAT.match(query)
        if has_body and insert and insert.group(1).lower() != "values" and not host_access(query):
            # The body is data. Values is the one format that evaluates expressions (file(...) too): checked below.
            return await self._forward(request, authorization, _chain(b"", request))
        if has_body:
            # The body holds (the rest of) the SQL, maybe followed by insert data: check the SQL; for an
            # INSERT check its first 64 KiB (statement and the start of the data: conservative) and stream on.
            body = await _read_up_to(request, PEEK_BYTES)
            if (_starts_insert(query + body[:1024].decode("latin-1")) and not insert and not _VALUES.search(body[:4096])
                    and len(body) == PEEK_BYTES):
                rest = True
            elif len(body) == PEEK_BYTES:
                body += await _read_up_to(request, MAX_SQL_BODY + 1 - PEEK_BYTES)
                if len(body) > MAX_SQL_BODY:
                    return _refuse(413, "query text over 16 MiB")
        function = host_access(query) or host_access(query + body.decode("utf-8", "replace"))
        if function:
            return _refuse(403, f"function {function}() reads the server's files and is refused by infersight "
                                "(ACCESS_DENIED)")
        if rest:
            return await self._forward(request, authorization, _chain(body, request))
        return await self._forward(request, authorization, body if has_body else None)

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

    async def _forward(self, request: web.Request, authorization: str, body) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
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
        except (TimeoutError, OSError) as exc:
            return _refuse(502, f"the embedded ClickHouse did not answer: {exc}")


def _starts_insert(sql: str) -> bool:
    return bool(_INSERT_START.match(sql))


async def _read_up_to(request: web.Request, limit: int) -> bytes:
    parts, size = [], 0
    while size < limit:
        chunk = await request.content.read(min(limit - size, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


async def _chain(head: bytes, request: web.Request):
    yield head
    async for chunk in request.content.iter_chunked(1 << 20):
        yield chunk


def _refuse(status: int, message: str) -> web.Response:
    code = {400: 27, 401: 516, 403: 497, 413: 252, 502: 210}.get(status, 1000)
    return web.Response(status=status, text=f"Code: {code}. DB::Exception: {message}. (infersight gate)\n",
                        headers={"X-ClickHouse-Exception-Code": str(code)})


async def serve(gate: Gate, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start the gate on ``host:port`` (0: a free port); returns the runner and the bound port."""
    # The receiver's INSERT ... SELECT (and its inline protobuf schema) travel in the URL: long request lines.
    runner = web.AppRunner(gate.app(), access_log=None,
                           max_line_size=4 * 1024 * 1024, max_field_size=64 * 1024)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]
