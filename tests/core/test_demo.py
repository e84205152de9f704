"""`infersight demo` end to end: real ClickHouse, real receiver, real tracer, simulated GPUs."""

import json
from pathlib import Path

import pytest

from infersight.cli import main
from infersight.commands.demo import STALL_MS
from infersight.commands.demo_fleet import STALLED_INSTANCE


@pytest.mark.real
def test_demo_finds_the_incident_it_stages(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--requests", "60", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # Every request produced spans, and some kept token timelines reached the token table.
    assert summary["spans_stored"] >= 60 * 3
    assert summary["token_rows"] > 0
    # The stalled requests' timelines were kept because they were slow, not by luck.
    reasons = summary["timelines_by_sampling_reason"]
    assert reasons.get("slow_e2e", 0) + reasons.get("slow_ttft", 0) >= 1, reasons
    assert sum(reasons.values()) == 60
    # The staged stall shows up where it was staged, and is the worst one.
    assert STALLED_INSTANCE in {row["instance"] for row in summary["stalls"]}
    worst = max(summary["stalls"], key=lambda row: row["max_gap_ms"])
    assert worst["instance"] == STALLED_INSTANCE and worst["max_gap_ms"] > STALL_MS
    assert summary["slowest_by_gap"][0]["instance"] == STALLED_INSTANCE
    assert {row["pool"] for row in summary["pools"]} == {"stable", "canary"}
    assert sum(row["requests"] for row in summary["pools"]) == 60
    assert [row["up"] for row in summary["gpus"]] == [1, 1, 1, 1]
    report = [Path(p) for p in summary["report"]]
    assert any(p.name == "report.html" for p in report) and all(p.exists() for p in report)
    assert STALLED_INSTANCE in (out / "report" / "report.md").read_text()


def test_demo_refuses_too_few_requests(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--requests", "3"]) == 2
    assert "at least 10" in capsys.readouterr().err


def test_demo_refuses_an_unusable_out(tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("keep me")
    assert main(["demo", "--out", str(file), "--requests", "20"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err and file.read_text() == "keep me"
    assert main(["demo", "--out", str(file / "sub"), "--requests", "20"]) == 2
    assert "cannot create the folder" in capsys.readouterr().err
    # a folder the demo did not make is never emptied
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    assert main(["demo", "--out", str(tmp_path / "mine"), "--requests", "20"]) == 2
    assert "holds files the demo did not write" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"
