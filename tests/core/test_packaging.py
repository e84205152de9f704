"""The component folders install as subpackages of infersight (non-editable wheel)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_maps_component_folders(tmp_path):
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".venv-vllm", ".git", ".infersight", "build", "*.egg-info", "__pycache__", ".pytest_cache",
        ".ruff_cache"))
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
