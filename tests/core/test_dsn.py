"""DSNs are parsed and validated in one place (infersight.dsn), before anything is created."""

from __future__ import annotations

import json

import pytest

from infersight.cli import main
from infersight.config import ConfigError, parse_config
from infersight.dsn import Dsn, DsnError, parse


def test_http_dsn_parts():
    dsn = parse("http://infersight_reader@ch.internal:9123/traces?password_file=/run/secrets/ch")
    assert (dsn.scheme, dsn.host, dsn.port, dsn.database, dsn.user, dsn.password_file) == \
        ("http", "ch.internal", 9123, "traces", "infersight_reader", "/run/secrets/ch")
    assert parse("https://ch.internal/").port == 8443 and parse("http://h").database == "default"
    assert "s3cret" not in str(parse("http://u:s3cret@h:1/db"))


@pytest.mark.parametrize(("text", "words"), [
    ("foo://bar", "scheme 'foo'"),
    ("127.0.0.1:8123", "expected http://, https:// or chdb://"),
    ("http://:8123/db", "no host"),
    ("http://h:0/db", "out of range"),
    ("http://h:99999/db", "not a valid URL"),
    ("http://h:8123/bad-name", "not a plain name"),
    ("http://h:8123/db?pasword_file=x", "unknown option 'pasword_file'"),
    ("http://u:p@h:8123/db?password_file=x", "not both"),
    ("chdb://", "no data folder"),
])
def test_bad_dsns_are_refused_with_the_reason(text, words):
    with pytest.raises(DsnError, match=words):
        parse(text)


def test_chdb_path_must_exist_unless_it_is_being_created(tmp_path):
    missing = f"chdb://{tmp_path / 'typo'}"
    with pytest.raises(DsnError, match="no ClickHouse data folder"):
        parse(missing)
    assert parse(missing, must_exist=False).path == str(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


def test_config_validates_the_dsn():
    with pytest.raises(ConfigError, match="clickhouse.dsn.*scheme 'foo'"):
        parse_config({"clickhouse": {"dsn": "foo://bar"}})


def test_password_file_plain_or_credentials(tmp_path):
    plain = tmp_path / "pw"
    plain.write_text("hunter2\n")
    assert Dsn("http", host="h", port=1, user="u", password_file=str(plain)).resolve_password() == "hunter2"
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"reader": {"user": "r", "password": "rp"}, "writer": {"user": "w", "password": "wp"}}))
    assert Dsn("http", host="h", port=1, user="w", password_file=str(creds)).resolve_password() == "wp"
    with pytest.raises(DsnError, match="no password for user 'x'"):
        Dsn("http", host="h", port=1, user="x", password_file=str(creds)).resolve_password()


@pytest.mark.parametrize("argv", [
    ["traces", "slowest", "--dsn", "foo://bar"],
    ["db", "status", "--dsn", "chdb:///no/such/folder"],
])
def test_cli_refuses_a_mistyped_dsn_without_creating_anything(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) in (1, 2)
    err = capsys.readouterr().err
    assert ("scheme 'foo'" in err or "no ClickHouse data folder" in err) and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
