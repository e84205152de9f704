"""Where the gate lets a body be data: only after one complete INSERT ... FORMAT X (not Values) statement."""

import pytest

from infersight.pipelines.clickhouse_gate import STATEMENT_WINDOW, StatementEnd, data_format


@pytest.mark.parametrize(("query", "expected"), [
    ("INSERT INTO t FORMAT TSV", "TSV"),
    ("INSERT INTO `db`.`t` (`a`, `b.c`) FORMAT Native", "Native"),
    ("INSERT INTO t SELECT * FROM input('x String') FORMAT Protobuf;", "Protobuf"),  # the receiver's insert
    ("INSERT INTO t FORMAT Values", "Values"),  # the caller reads Values as SQL
    # A FORMAT word before the last one: the data after it would still be the first format's.
    ("INSERT INTO t FORMAT Values (1 FORMAT TSV", None),
    ("INSERT INTO t FORMAT Values ('x'),\n(1 FORMAT TSV", None),
    ("INSERT INTO t FORMAT TSV -- comment", None),
    ("INSERT INTO t VALUES ('open string FORMAT TSV", None),
    ("SELECT 1 FORMAT TSV", None),
])
def test_data_format_trusts_only_a_complete_insert_ending_in_its_first_format(query, expected):
    assert data_format(query) == expected


def test_statement_end_finds_the_data_after_the_statement_line():
    head = b"INSERT INTO t (a) FORMAT TSV\n1\tfile('x')\n2\n"
    assert StatementEnd("").find(head) == head.index(b"\n") + 1
    # The statement begun in the query parameter and ended in the body, as ClickHouse joins them.
    assert StatementEnd("INSERT INTO t").find(b"FORMAT TSV\n1\n") == len(b"FORMAT TSV\n")


@pytest.mark.parametrize("head", [
    b"INSERT INTO t FORMAT Values\n(1)\n",
    b"INSERT INTO t SELECT length(file('/etc/hostname')) FORMAT TSV\n1\n",
    b"SELECT 1\nFORMAT TSV\n",
    b"INSERT INTO t FORMAT Values (1),\n(2 FORMAT TSV\n, 3)\n",
])
def test_statement_end_never_calls_sql_or_values_data(head):
    assert StatementEnd("").find(head) is None


def test_statement_end_resumes_where_it_stopped_and_gives_up_past_its_window():
    finder = StatementEnd("")
    assert finder.find(b"INSERT INTO t\n") is None  # no FORMAT yet: the next piece may bring it
    assert finder.find(b"INSERT INTO t\nFORMAT CSV\n1,2\n") == len(b"INSERT INTO t\nFORMAT CSV\n")
    late = b"--\n" * (STATEMENT_WINDOW // 3) + b"INSERT INTO t FORMAT TSV\n1\n"
    assert StatementEnd("").find(late) is None  # then the body is read whole as SQL
