"""Headless Chromium (Debian ``chromium``) for the report tests: load a page, read what the browser saw.

The report carries no script, so the check runs on a copy of the page with one appended: after the
load event it writes onto ``<body>`` how many images there are and which did not decode. Chromium
then dumps the DOM (``--dump-dom``); a screenshot of the same page is kept for people to look at.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import require_tool

PROBE = """<script>
window.addEventListener('load', () => {
  const images = [...document.images];
  const broken = images.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src'));
  document.body.setAttribute('data-images', String(images.length));
  document.body.setAttribute('data-broken', JSON.stringify(broken));
  document.body.setAttribute('data-width', String(document.documentElement.scrollWidth));
});
</script>"""


@dataclass
class Loaded:
    images: int
    broken: list[str]
    scroll_width: int
    dom: str
    screenshot: Path


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    binary = require_tool("chromium")
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def load(page: Path, width: int = 1200, height: int = 6000) -> Loaded:
    """Open ``page`` (a file next to its images) in headless Chromium; returns what loaded."""
    probe = page.with_name(f".probe-{page.name}")
    text = page.read_text()
    probe.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    profile = page.parent / ".chromium-profile"
    try:
        dumped = _chromium(f"--window-size={width},{height}", "--dump-dom", probe.as_uri(), profile=profile)
        screenshot = page.with_suffix(".screenshot.png")
        shot = _chromium(f"--window-size={width},{height}", f"--screenshot={screenshot}", page.as_uri(),
                         profile=profile)
    finally:
        probe.unlink(missing_ok=True)
    if dumped.returncode != 0 or shot.returncode != 0:
        raise RuntimeError(f"chromium failed: {dumped.stderr[-2000:]} {shot.stderr[-2000:]}")
    body = re.search(r"<body([^>]*)>", dumped.stdout)
    attributes = dict(re.findall(r'data-(\w+)="([^"]*)"', body.group(1))) if body else {}
    if "images" not in attributes:
        raise RuntimeError(f"the page's load event never ran; chromium said: {dumped.stderr[-2000:]}")
    broken = json.loads(attributes["broken"].replace("&quot;", '"'))
    return Loaded(int(attributes["images"]), broken, int(attributes["width"]), dumped.stdout, screenshot)
