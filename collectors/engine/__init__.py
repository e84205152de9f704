"""Engine collectors: scrape vLLM, SGLang, TGI, TensorRT-LLM /metrics and normalize them."""
