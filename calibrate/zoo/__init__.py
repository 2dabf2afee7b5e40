"""calibrate.zoo: an offline model zoo (synthetic multimodal task, tokenizer, tiny LLaVA
target/draft/captioner).

No VLM weights can be downloaded here, so the project trains its own on a synthetic visual task where
the image really matters. Modules: :mod:`calibrate.zoo.scenes` (scenes of coloured shapes, rendered with
PIL), :mod:`calibrate.zoo.task` (1-, 2- and 5-image requests in IbED's (Lee et al. 2024) Appendix C
templates, with image-fact spans and splits), :mod:`calibrate.zoo.tokenizer` (byte-level BPE on the corpus),
:mod:`calibrate.zoo.zoo_models` (HF LLaVA configs, FLOP counts, save/load), :mod:`calibrate.zoo.train`
(``python -m calibrate.zoo.train``). ``import calibrate.zoo`` stays free of torch.
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
