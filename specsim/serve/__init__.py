"""``specsim serve``: a discrete-event simulation of an inference server with continuous batching and
speculative decoding (SD), reporting TTFT/TPOT/ITL/E2E percentiles, throughput and goodput, SD on vs off.

Modules: :mod:`.arrivals` (workloads: Poisson, Gamma, JSONL traces), :mod:`.scheduler` (a vLLM-V1-like
step), :mod:`.speculation` (γ policies, accepted drafts), :mod:`.step_cost` (the cost interface and a
hand-set one), :mod:`.roofline_cost` (the GPU planner's roofline), :mod:`.simulator` (the event loop),
:mod:`.metrics` (percentiles, goodput), :mod:`.compare` (SD on vs off, rate sweeps).
"""
