"""A bare chdb-core ClickHouse HTTP listener (DESIGN 6) with the users it is given: for `db render --users`.

The same clickhouse-local listener as the embedded store, without the infersight gate and without
its users: clients talk to ClickHouse directly, as to a server. clickhouse-local reads users from
users.xml only (no access storage for CREATE USER), so the users under test come as users.xml text;
``default`` (password-less, loopback only) is the administrator that runs SHOW GRANTS.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHILD = """
import os, sys
from chdb import _chdb  # before the chdir: importing chdb opens a session without our config.xml
os.chdir(sys.argv[2])
_chdb.query("CREATE DATABASE IF NOT EXISTS default ENGINE = Atomic; SYSTEM START LISTEN HTTP; "
            "SELECT getServerPort('http_port') INTO OUTFILE 'port.txt' TRUNCATE FORMAT TabSeparated; "
            "SELECT sleepEachRow(1) FROM system.numbers FORMAT Null SETTINGS max_block_size = 1",
            "TabSeparated", path=sys.argv[1])
"""
CONFIG = """<clickhouse>
  <listen_host>127.0.0.1</listen_host>
  <http_port>0</http_port>
  <default_database>infersight_local_files</default_database>
  <user_directories><users_xml><path>users.xml</path></users_xml></user_directories>
</clickhouse>
"""
USERS = """<clickhouse>
  <profiles><default/>{profiles}</profiles>
  <quotas><default/></quotas>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota>
      <access_management>1</access_management>
    </default>
    {users}
  </users>
</clickhouse>
"""


class SqlUsersServer:
    def __init__(self, folder: Path, users: str = "", profiles: str = ""):
        self.folder = folder
        self.users, self.profiles = users, profiles
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def __enter__(self) -> SqlUsersServer:
        run = self.folder / "run"
        run.mkdir(parents=True)
        (run / "config.xml").write_text(CONFIG)
        (run / "users.xml").write_text(USERS.format(users=self.users, profiles=self.profiles))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(self.folder / "data"), str(run)],
                                     stdout=subprocess.DEVNULL, stderr=(self.folder / "stderr.log").open("w"))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clickhouse-local exited: {(self.folder / 'stderr.log').read_text()[-2000:]}")
            text = (run / "port.txt").read_text().strip() if (run / "port.txt").exists() else ""
            if text.isdigit():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{text}/ping", timeout=2) as resp:
                        if resp.read().strip() == b"Ok.":
                            self.port = int(text)
                            return self
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("clickhouse-local did not open its HTTP listener in 120 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, user: str = "default", password: str = "", database: str = "default"):
        import clickhouse_connect

        return clickhouse_connect.get_client(host="127.0.0.1", port=self.port, username=user, password=password,
                                             database=database, autogenerate_session_id=False)
