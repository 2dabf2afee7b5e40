"""calibrate: measure real (or architecture-only) draft/target models and write specsim profiles.

This is the only package that uses torch and transformers, and it imports them lazily: ``import
calibrate`` and its command modules stay pure Python so ``specsim --help`` works without torch. Where
each command and concept lives: ARCHITECTURE.md. The architecture presets and pairs it loads are plain
data owned by specsim (:mod:`specsim.presets`); :mod:`calibrate.models.reference_pair` fetches the offline
reference pair's weights.
"""

__all__: list[str] = []
