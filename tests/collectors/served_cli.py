"""Run ``infersight collect ...`` as a served exporter, the way an operator starts one."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence


def scrape_then_sigterm(args: Sequence[str], check_line: Callable[[str], bool]) -> str:
    """Start ``python -m infersight ARGS``, check its stdout address line, scrape that address once,
    stop it with SIGTERM and require exit 0; return the scraped body."""
    proc = subprocess.Popen([sys.executable, "-m", "infersight", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert check_line(line), line + proc.stderr.read()
        with urllib.request.urlopen(line.split(" on ")[1].strip(), timeout=10) as response:
            body = response.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        return body
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
