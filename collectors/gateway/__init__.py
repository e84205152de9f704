"""Gateway and router sources: llm-d EPP, vLLM production-stack router, LiteLLM, OTel GenAI metrics."""
