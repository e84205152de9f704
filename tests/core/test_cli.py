import json
import os
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


@pytest.mark.parametrize(("flags", "message"), [
    (["--context", "0"], "'0' is out of range; from 1 to 10000000 tokens"),
    (["--context", "-4096"], "out of range"),
    (["--rate", "-1"], "'-1' is out of range; it must be more than 0"),
    (["--rate", "0"], "out of range"),
    (["--rate", "inf"], "out of range"),
])
def test_plan_numbers_are_range_checked(capsys, flags, message):
    with pytest.raises(SystemExit) as info:
        main(["plan", *flags])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_plan_uses_the_given_context_and_rate(capsys):
    assert main(["plan", "--gpu", "H100-SXM", "--context", "4096", "--rate", "0.5", "--format", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["context_tokens"] == 4096 and row["target_tokens_per_s_per_request"] == 0.5


@pytest.mark.parametrize("where", ["before", "after"])
def test_config_before_or_after_the_subcommand(tmp_path, capsys, where):
    config = tmp_path / "infersight.yaml"
    config.write_text("capacity:\n  context_tokens: 777\n")
    command = ["plan", "--gpu", "H100-SXM", "--format", "json"]
    argv = ["--config", str(config), *command] if where == "before" else [*command, "--config", str(config)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)[0]["context_tokens"] == 777


def test_config_after_a_nested_subcommand_is_read(tmp_path, capsys):
    missing = tmp_path / "nosuch.yaml"
    assert main(["traces", "show", "0" * 32, "--config", str(missing)]) == 2
    assert f"{missing}: no such config file" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `infersight ... | head`: the pipe's read end is closed before the command writes its first line
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "infersight", "db", "render"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141
