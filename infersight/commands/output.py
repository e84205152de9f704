"""Shared output helpers: aligned tables for terminals, JSON and CSV for scripts, and failing with a message."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any


class Format(StrEnum):
    """The commands' ``--format`` values, one name each (``simulate`` writes series files, its own kind)."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    YAML = "yaml"
    PROMETHEUS = "prometheus"  # the Prometheus text exposition, as /metrics serves it


# Rows of a result: what :func:`render` writes.
FORMATS = (Format.TABLE, Format.JSON, Format.CSV)
# Old names still accepted, each with a note naming the one to use.
ALIASES = {"prom": Format.PROMETHEUS}


def _format_name(value: str) -> str:
    canonical = ALIASES.get(value)
    if canonical is None:
        return value
    print(f"note: --format {value} is deprecated; use --format {canonical}", file=sys.stderr)
    return canonical.value


def add_format_flag(parser, default: Format = Format.TABLE, choices: Sequence[Format] = FORMATS,
                    help: str | None = None) -> None:
    """``--format`` with ``choices``; an old name from :data:`ALIASES` maps to its canonical one."""
    scripts = [f.value for f in choices if f in (Format.JSON, Format.CSV)]
    parser.add_argument("--format", type=_format_name, choices=[f.value for f in choices], default=default.value,
                        help=help or (f"output format (default: {default.value})"
                                      + (f"; {' and '.join(scripts)} {'are' if len(scripts) > 1 else 'is'} for "
                                         "scripts" if scripts else "")))


def render(rows: Sequence[Mapping[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    if fmt == "json":
        return json.dumps([dict(r) for r in rows], indent=2, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    return table(rows, columns)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(no rows)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=False)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return _utc(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, list | tuple):  # trace ids, error types: as a person writes a list, not Python's repr
        return ", ".join(_cell(v) for v in value) or "-"
    return str(value)


def number(value: float) -> str:
    """A float as people read it: ``30.5``, ``455``, ``16,270``, ``0.012``; never ``30.500``.

    Three significant digits below 100 (trailing zeros dropped), whole numbers with thousands
    separators above: a latency in ms or a rate needs no more to be compared across rows.
    """
    if value != value:  # NaN
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    decimals = 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    text = f"{value:.{decimals}f}"
    if magnitude < 0.01:
        text = f"{value:.2g}"
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


class OutputError(Exception):
    """An output folder that cannot be used; the message says which and why."""


def output_folder(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a folder that exists and can be written to, creating it (and its parents) if needed."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{flag} {path}: is a file, not a folder; give a folder to write into")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot create the folder ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: the folder is not writable by this user")
    return folder


def _utc(at: dt.datetime) -> str:
    """``2026-03-01 14:05:07.250Z``: the zone said (our naive datetimes are UTC), milliseconds at most,
    and still ISO 8601, so it can be pasted back into ``--at`` or ``--from``."""
    if at.tzinfo is not None:
        at = at.astimezone(dt.UTC).replace(tzinfo=None)
    text = at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if at.microsecond else at.strftime("%Y-%m-%d %H:%M:%S")
    return text + "Z"


def fail(command: str, message: str, code: int = 2) -> int:
    """Say on stderr what is wrong (``infersight COMMAND: MESSAGE``); return the exit code (2: bad input, 1: failed)."""
    print(f"infersight {command}: {message}", file=sys.stderr)
    return code


class CommandFailed(Exception):
    """Stops a command: ``infersight.cli.main`` prints it as :func:`fail` does and exits with ``code``."""

    def __init__(self, command: str, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.command = command
        self.code = code


@contextmanager
def writing_into(command: str, out: str | Path, *config_errors: type[Exception]) -> Iterator[None]:
    """Around a build that writes into ``out``: a config error stops it with exit 2, a write error with 1."""
    try:
        yield
    except config_errors as exc:
        raise CommandFailed(command, str(exc), 2) from None
    except OSError as exc:
        raise CommandFailed(command, f"cannot write to {out}: {exc.strerror or exc}", 1) from None
