"""The same queries on the in-process engine (``chdb://`` DSN).

clickhouse-connect's ``chdb://`` backend needs the ``chdb`` package (a dependency, over chdb-core).
"""

from __future__ import annotations

import datetime as dt

import pytest

from infersight.cli import main
from infersight.pipelines.schema.connection import connect
from tests.conftest import IN_CI
from tests.pipelines import incident_data

pytestmark = pytest.mark.real  # the in-process ClickHouse engine (chdb)


def _chdb_backend_available() -> bool:
    try:
        import chdb  # noqa: F401
        from clickhouse_connect.driver._chdbclient import ChdbClient  # noqa: F401
    except ImportError:
        return False
    return True


def test_queries_on_the_embedded_engine(tmp_path, capsys, monkeypatch):
    if not _chdb_backend_available():
        message = "the chdb package is not installed (pip install -e '.[test]')"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    monkeypatch.chdir(tmp_path)  # the in-process engine keeps caches in its working directory
    dsn = f"chdb://{tmp_path / 'data'}"
    assert main(["db", "migrate", "--dsn", dsn]) == 0
    client = connect(dsn)
    t0 = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=30)).replace(second=0, microsecond=0)
    data = incident_data.build(t0)
    incident_data.load(client, "default", data)  # as the Collector would insert them
    client.close()
    capsys.readouterr()
    assert main(["traces", "slowest", "--dsn", dsn, "--since", "1h", "--limit", "1", "--format", "csv"]) == 0
    assert data.trace_id("long-prefill") in capsys.readouterr().out
    assert main(["traces", "stalls", data.trace_id("victim-1"), "--dsn", dsn, "--top", "1", "--format", "csv"]) == 0
    assert ",3000.0," in capsys.readouterr().out
