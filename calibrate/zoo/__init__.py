"""calibrate.zoo: an offline model zoo (synthetic multimodal task, tokenizer, tiny LLaVA target, draft and
captioner), trained here because no VLM weights can be downloaded.

The task's images really matter: :mod:`~calibrate.zoo.scenes`, :mod:`~calibrate.zoo.task` (IbED's, Lee et
al. 2024, Appendix C templates), :mod:`~calibrate.zoo.tokenizer`, :mod:`~calibrate.zoo.zoo_models`,
:mod:`~calibrate.zoo.train`. ``import calibrate.zoo`` stays free of torch. More: ARCHITECTURE.md.
"""

from importlib import resources
from pathlib import Path

__all__ = ["WEIGHTS_ROLES", "weights_dir"]

WEIGHTS_ROLES: tuple[str, ...] = ("target", "draft", "captioner")


def weights_dir(role: str) -> Path:
    """Folder of the shipped zoo model ``role`` (target/draft/captioner), checked to exist."""
    from specsim.errors import SpecsimError

    if role not in WEIGHTS_ROLES:
        raise SpecsimError(f"zoo model: expected one of {', '.join(WEIGHTS_ROLES)}, got {role!r}")
    folder = Path(str(resources.files("calibrate") / "zoo" / "weights" / role))
    if not (folder / "config.json").is_file():
        raise SpecsimError(
            f"zoo weights for {role!r} not found in {folder} (train them with "
            f"'python -m calibrate.zoo.train --out {folder.parent}')"
        )
    return folder
