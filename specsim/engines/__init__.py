"""Serving engines: read what vLLM and SGLang expose about speculative decoding, write back their settings.

- :mod:`~specsim.engines.metric_samples`: Prometheus text (``/metrics``) and vLLM's metrics JSON as samples.
- :mod:`~specsim.engines.vllm`, :mod:`~specsim.engines.sglang`: engine counters -> τ, an acceptance entry.
- :mod:`~specsim.engines.imported`: the profile entry and its provenance.
- :mod:`~specsim.engines.engine_config`: vLLM, SGLang, TensorRT-LLM and llama.cpp settings from a
  draft-length schedule. More: ARCHITECTURE.md, Notes by module.
"""
