"""calibrate: measure real (or architecture-only) draft/target models and write specsim profiles.

This is the only package that uses torch and transformers, and it imports them lazily: ``import
calibrate`` (and ``calibrate.presets``) stays pure Python so the ``specsim`` CLI can list presets
without torch. Modules: :mod:`calibrate.timing` (the one timing primitive), :mod:`calibrate.models`
(loading, random-weight presets, vocabulary check), :mod:`calibrate.latency` (latency sweeps ->
``LatencySection``), :mod:`calibrate.presets` (architecture configs, the offline reference pair).
"""

__all__: list[str] = []
