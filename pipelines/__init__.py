"""OTLP receivers, batching, the ClickHouse writer, schema, spool and the post-incident queries."""
