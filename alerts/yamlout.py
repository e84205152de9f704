"""YAML output that people can read: keys in the order given, multi-line PromQL as blocks."""

from __future__ import annotations

from typing import Any

import yaml

# libyaml's emitter when PyYAML has it (its wheels do): the same text, about 4x less CPU on the
# generated promtool tests (megabytes of series); the pure-Python one otherwise.
SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(SafeDumper):
    pass


def _str(dumper: SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
