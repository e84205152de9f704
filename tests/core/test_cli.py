import json
import subprocess
import sys

import pytest

from infersight.cli import main


def test_plan_json_has_reference_figures(capsys):
    assert main(["plan", "--gpu", "H100-SXM", "--format", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["kv_bytes_per_token"] == 262144
    assert round(row["decode_tokens_per_s_ceiling"]) == 248


def test_plan_table_compares_all_gpus(capsys):
    assert main(["plan", "--gpu", "all"]) == 0
    out = capsys.readouterr().out
    for gpu in ("A100-40G", "H100-SXM", "H200", "L40S"):
        assert gpu in out


def test_unknown_gpu_is_a_clear_error(capsys):
    assert main(["plan", "--gpu", "TPU"]) == 2
    assert "unknown GPU 'TPU'" in capsys.readouterr().err


def test_unknown_subcommand_and_bad_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "--context", "many"])
    assert "invalid int value" in capsys.readouterr().err


def test_console_script_help_lists_all_commands():
    cmd = [sys.executable, "-m", "infersight", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for command in ("plan", "version", "collect", "proxy", "receive", "db", "traces", "incident", "dashboards",
                    "alerts", "demo", "up"):
        assert command in out
