"""The instrumenting proxy: ``infersight proxy`` in front of any OpenAI-compatible engine.

It relays ``/v1/chat/completions`` and ``/v1/completions`` (streaming SSE or not) byte for byte,
times every streamed chunk that carries tokens, reads ``usage``, continues or starts the W3C trace,
enforces first-token / idle / total timeouts, and records each request through the request tracer
(:mod:`infersight.instrumentation.tracer`): catalog metrics on ``/metrics``, spans over OTLP.
Every other path is relayed unchanged.

Modules: :mod:`.app` (routes, session, runner), :mod:`.exchange` (one instrumented request),
:mod:`.passthrough` (other paths), :mod:`.sse` (reading the stream), :mod:`.deadlines`,
:mod:`.errors` (the proxy's own OpenAI-style errors), :mod:`.headers`, :mod:`.recording`.
"""
