"""ClickHouse schema: DDL for otel_traces, token events and rollups, and versioned migrations."""
