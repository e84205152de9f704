"""The component folders install as subpackages of infersight (non-editable wheel)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_maps_component_folders(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("infersight-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("infersight/__init__.py", "infersight/signals/__init__.py", "infersight/collectors/__init__.py",
                    "infersight/instrumentation/__init__.py", "infersight/pipelines/__init__.py",
                    "infersight/dashboards/__init__.py", "infersight/alerts/__init__.py"):
        assert package in names, sorted(names)[:20]
    assert not any(name.startswith(("collectors/", "tests/")) for name in names)
