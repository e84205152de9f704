"""OTLP receivers (HTTP and gRPC), span-to-row conversion, batching writer and on-disk spool."""
