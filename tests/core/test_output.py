"""Numbers in the CLI's tables read as people write them (infersight/commands/output.py)."""

from infersight.commands.output import number, table


def test_floats_print_with_sensible_precision():
    values = [30.5, 30.0, 455.2, 132.2, 0.0, 16270.4, 0.012345, 0.000123, 1.234, -3.5, float("nan")]
    assert [number(v) for v in values] == ["30.5", "30", "455", "132", "0", "16,270", "0.012", "0.00012", "1.23",
                                           "-3.5", "-"]


def test_a_table_never_pads_a_float_with_zeros():
    text = table([{"ttft_ms": 22878.0, "max_gap_ms": 30.5, "error_rate": 0.0}], ["ttft_ms", "max_gap_ms", "error_rate"])
    assert text.splitlines()[-1].split() == ["22,878", "30.5", "0"]
    assert ".500" not in text and ".000" not in text
