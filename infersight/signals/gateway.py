"""Gateway signals: queue depth and each upstream instance's health, from ``instrumentation/``."""

from infersight.signals.catalog import Kind, declare

PRODUCER = "instrumentation.gateway"
INSTANCE_LABELS = ("model", "instance", "pool")
INSTANCE_STATES = ("healthy", "cold", "half_open", "ejected")

QUEUE_DEPTH = declare("llm_gateway_queue_depth", Kind.GAUGE, "", ("model", "pool", "strategy"),
                      "Requests waiting in the gateway queue for an instance.", PRODUCER)
INSTANCE_STATE = declare("llm_instance_state", Kind.GAUGE, "", (*INSTANCE_LABELS, "state"),
                         "1 for the instance's current state (healthy, cold, half_open, ejected), else 0.",
                         PRODUCER)
STATE_TRANSITIONS = declare("llm_instance_state_transitions_total", Kind.COUNTER, "",
                            (*INSTANCE_LABELS, "from_state", "to_state"),
                            "Instance state changes seen by the gateway.", PRODUCER)
EJECTIONS = declare("llm_instance_ejections_total", Kind.COUNTER, "", INSTANCE_LABELS,
                    "Times the gateway ejected the instance from rotation.", PRODUCER)
HEALTH_CHECK_FAILURES = declare("llm_health_check_failures_total", Kind.COUNTER, "", INSTANCE_LABELS,
                                "Failed health checks of the instance.", PRODUCER)
HEALTH_CHECKS = declare("llm_health_checks_total", Kind.COUNTER, "", INSTANCE_LABELS,
                        "Health checks of the instance.", PRODUCER)
INSTANCE_START_TIME = declare("llm_instance_start_time_seconds", Kind.GAUGE, "seconds", INSTANCE_LABELS,
                              "Unix time the instance joined the pool (cold start).", PRODUCER)

# -- the gateway-source collector's own health (collectors/gateway: llm-d EPP, production-stack, LiteLLM ...) --
SOURCE_PRODUCER = "collectors.gateway"
SOURCE_UP = declare("infersight_gateway_source_up", Kind.GAUGE, "", ("source", "kind"),
                    "1 if the last scrape of the gateway source succeeded, else 0 (its series are then absent).",
                    SOURCE_PRODUCER)
SOURCE_SCRAPE_DURATION = declare("infersight_gateway_source_scrape_duration_seconds", Kind.GAUGE, "seconds",
                                 ("source", "kind"), "Duration of the last scrape of the gateway source.",
                                 SOURCE_PRODUCER)
SOURCE_SCRAPE_ERRORS = declare("infersight_gateway_source_scrape_errors_total", Kind.COUNTER, "", ("source", "reason"),
                               "Failed gateway-source scrapes by reason (down, timeout, malformed, too_large, "
                               "http_status, unrecognized).", SOURCE_PRODUCER)
