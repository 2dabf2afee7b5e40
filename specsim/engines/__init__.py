"""Serving engines: read what vLLM and SGLang expose about speculative decoding, write back their settings.

- :mod:`~specsim.engines.metric_samples` reads Prometheus text exposition (``/metrics``) and vLLM's
  ``LLM.get_metrics()`` JSON into labelled samples (``prometheus_client``'s own text parser).
- :mod:`~specsim.engines.vllm` turns vLLM's spec-decode counters into survival a_i, τ(k) for k ≤ K
  and an acceptance entry; :mod:`~specsim.engines.sglang` does the same for SGLang's accept length.
- :mod:`~specsim.engines.imported` builds the profile entry and its provenance (engine, version,
  model, time window); :mod:`~specsim.engines.engine_config` writes vLLM ``speculative_config``, SGLang
  server flags, TensorRT-LLM ``speculative_config`` and llama.cpp flags from a draft-length schedule (a
  :class:`specsim.engines.recommend.Recommendation`'s, or a tuned γ policy's: ``specsim tune``).
"""
