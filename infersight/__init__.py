"""infersight: observability and tracing for LLM inference clusters.

The core package holds what every component shares: the signal catalog (``infersight.signals``),
the configuration (``infersight.config``), the capacity model (``infersight.capacity``) and the
``infersight`` command. The components live in the top-level folders and import as
``infersight.collectors``, ``infersight.instrumentation``, ``infersight.pipelines``,
``infersight.dashboards`` and ``infersight.alerts``.
"""

from importlib import metadata

__version__ = "0.1.0"


def repository_url() -> str | None:
    """The repository's address from the package metadata (pyproject's ``[project.urls] Repository``)."""
    try:
        entries = metadata.metadata("infersight").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return None
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository" and url.strip():
            return url.strip().rstrip("/")
    return None
