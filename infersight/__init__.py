"""infersight: observability and tracing for LLM inference clusters.

The core package holds what every component shares: the signal catalog (``infersight.signals``),
the configuration (``infersight.config``), the capacity model (``infersight.capacity``) and the
``infersight`` command. The components live in the top-level folders and import as
``infersight.collectors``, ``infersight.instrumentation``, ``infersight.pipelines``,
``infersight.dashboards`` and ``infersight.alerts``.
"""

__version__ = "0.1.0"
