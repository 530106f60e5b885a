"""Recordings of LLM inference servers (no live plugin): per-request token
stream timings (:mod:`collectors.llmserve.stream_records`) and vLLM's
Prometheus exposition (:mod:`collectors.llmserve.vllm_metrics`). See README.md."""
