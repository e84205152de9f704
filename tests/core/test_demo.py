"""`infersight demo` end to end, in real time: the simulated fleet through the real collectors,
tracer, receiver and ClickHouse, scraped by a real Prometheus that sends the generated rules'
alerts through a real Alertmanager to the demo's webhook."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infersight.cli import main
from infersight.commands import demo_stack
from tests.conftest import require_chdb, require_tool

# Rollout spike: onset at minute 30, the page (LLMTTFTErrorBudgetBurn, critical) fires about ten
# simulated minutes later (the alert-quality table); 45 simulated minutes are 45 real seconds.
MINUTES = 45
PAGE = ("LLMTTFTErrorBudgetBurn", "critical")
JOBS = {"infersight-gateway", "infersight-engine", "infersight-gpu", "infersight-receiver"}


@pytest.mark.real
def test_the_default_scenario_pages_on_call_through_the_real_stack(tmp_path, capsys, monkeypatch):
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    require_chdb()
    monkeypatch.chdir(tmp_path)
    out = Path("demo")  # relative, as make demo's default: the children run in folders of their own
    assert main(["demo", "--out", str(out), "--minutes", str(MINUTES), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)

    # Spans reached ClickHouse through OTLP and the receiver, with kept token timelines.
    assert summary["request_spans"] > 100 and summary["spans_stored"] > summary["request_spans"]
    assert summary["token_rows"] > 0 and summary["replay_errors"] == 0
    # They carry the simulated times: the rollout's slow prefill shows as multi-second first tokens.
    assert summary["slowest_by_ttft"][0]["ttft_ms"] > 5000
    # Its token timeline is its engine's decode steps: the longest gap is the step the simulated
    # instance was making at that second (a whole tick's, or between two ticks' at a boundary), and
    # on the slow build that step carried a chunk of another prompt's slow prefill, which the demo names.
    stall = summary["stall_of_slowest"]
    assert stall["simulated"] and stall["simulated"]["decoding"] >= 1, stall
    assert 0.5 <= stall["gap_ms"] / stall["simulated"]["step_ms"] <= 2.0, stall
    assert stall["gap_ms"] > 5 * stall["median_gap_ms"], stall  # a stall, not the stream's usual pace
    assert stall["simulated"]["prefill"]["prompt_tokens"] > 0, stall
    # A rollout drains first: no attempt breaks on a restart. Only the longest answers on the slow
    # build outlast the gateway's request timeout, and nothing retries them.
    assert summary["retried_requests"] == 0
    assert {e for f in summary["failed_attempts"] for e in f["errors"]} <= {"timeout"}, summary["failed_attempts"]

    # Prometheus scraped every exporter: each job's targets were up.
    jobs = summary["scrape_jobs"]
    assert set(jobs) == JOBS, jobs
    for job, entry in jobs.items():
        assert entry["targets"] >= 1 and entry["ever_up"] == entry["targets"], (job, entry)
    assert jobs["infersight-gpu"]["targets"] == 2  # 16 instances: two simulated nodes of 8 GPUs

    # The canary comparison: the canary pool, on the old build and another strategy, stays fast while
    # stable's slowest instance is seconds to its first token; the same traffic per instance.
    pools = {p["pool"]: p for p in summary["pools"]}
    assert set(pools) == {"stable", "canary"}, summary["pools"]
    assert pools["canary"]["strategy"] == "cache_aware" and pools["stable"]["strategy"] == "least_conn"
    assert (pools["stable"]["instances"], pools["canary"]["instances"]) == (12, 4)
    assert pools["stable"]["slowest_instance_ttft_p99_ms"] > 5 * pools["canary"]["slowest_instance_ttft_p99_ms"]
    assert 2 <= pools["stable"]["requests"] / pools["canary"]["requests"] <= 4  # weights 3:1

    # The expected page fired in Prometheus and reached on-call through Alertmanager (the webhook).
    page = next(a for a in summary["alerts"] if (a["alert"], a["severity"]) == PAGE)
    assert "ticket" in page["reached"], page
    # Fired is the evaluation that fired it, so never after Alertmanager delivered it (a range query's step
    # used to round it up past the delivery).
    assert page["minute"] <= min(page["reached"].values()), page
    assert page["scenario_says"] == "expected"
    expected = {(e["alert"], e["severity"]): e for e in summary["expected"]}
    assert expected[PAGE]["ok"], expected[PAGE]

    report = [Path(p) for p in summary["report"]]
    assert any(p.name == "report.html" for p in report) and all(p.exists() for p in report)
    # Chunked prefill stalls a busy fleet somewhere every minute: the report shows the longest, says how many
    stalled = next(p for p in report if p.name == "report.md").read_text().split("## Which instances stalled", 1)[1]
    stalled = stalled.split("\n## ", 1)[0]
    assert len(summary["stalls"]) > 20 and f"{len(summary['stalls']):,} instance-minutes had a gap over" in stalled
    assert sum(bool(re.match(r"\| \d", line)) for line in stalled.splitlines()) == 20, stalled  # rows by minute
    assert "[5s]" in (out / "rules" / "recording.yml").read_text()  # the rules Prometheus ran: on the demo clock


@pytest.fixture
def no_servers(monkeypatch):
    """Argument checks happen before anything starts: pretend the binaries are there."""
    monkeypatch.setattr(demo_stack, "require_binaries", lambda: {"prometheus": "prometheus",
                                                                 "prometheus-alertmanager": "am"})


def test_demo_refuses_bad_arguments(no_servers, tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--minutes", "0"]) == 2
    assert "--minutes must be between 1 and the scenario's 75" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path), "--scenario", "no-such-incident"]) == 2
    err = capsys.readouterr().err
    assert "no scenario 'no-such-incident'" in err and "rollout-spike" in err and "Traceback" not in err


def test_demo_says_how_to_install_prometheus_when_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 1
    err = capsys.readouterr().err
    assert "prometheus and prometheus-alertmanager not found" in err and "make debian-tools" in err
    assert not (tmp_path / "demo").exists()  # nothing started, nothing written


def test_demo_refuses_an_unusable_out(no_servers, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("keep me")
    assert main(["demo", "--out", str(file)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err and file.read_text() == "keep me"
    assert main(["demo", "--out", str(file / "sub")]) == 2
    assert "cannot create the folder" in capsys.readouterr().err
    # a folder the demo did not make is never emptied
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    assert main(["demo", "--out", str(tmp_path / "mine")]) == 2
    assert "holds files the demo did not write" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


@pytest.mark.real
@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_and_kill_stop_every_process_the_demo_started(tmp_path, sig, code, word):
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    require_chdb()
    out = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "infersight", "demo", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        for line in proc.stderr:  # wait until the fleet runs, with every part started
            if line.startswith("[3/"):
                pids = [int(p) for p in re.findall(r"pid (\d+)", line)]
                break
        assert len(pids) == 3, "the demo did not get to its run"
        for line in proc.stderr:
            if "minute" in line:  # the fleet is running
                break
        proc.send_signal(sig)
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, rest
    assert f"{word} at simulated minute" in rest and "Traceback" not in rest
    for pid in pids:  # Prometheus, Alertmanager and ClickHouse are gone
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), pid
    # and nothing else still runs on the demo's folder
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert str(out) not in status.read_bytes().decode(errors="replace"), status
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
