"""How many positions an image fills, by the models' own preprocessing rules (pure integer arithmetic).

Each function mirrors one processor of HF transformers: Qwen2-VL/2.5-VL/3-VL ``smart_resize`` (dynamic
resolution, patches merged ``spatial_merge_size``² to one token), LLaVA-NeXT any-res
(``select_best_resolution`` and ``_get_unpadded_features``: a base view plus tiles, padding cropped, one
newline per row) and InternVL ``dynamic_preprocess`` (448-px tiles by the closest aspect ratio, a thumbnail).
Sizes are (height, width) in pixels, as those functions take them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specsim.errors import SpecsimError


@dataclass(frozen=True)
class ImageSize:
    """An image's size in pixels; the CLI spells it WIDTHxHEIGHT."""

    width_px: int
    height_px: int

    def __str__(self) -> str:
        return f"{self.width_px}x{self.height_px}"


# A typical input when none is given: a photo or screenshot scaled to 1024 px on its long side, 4:3.
DEFAULT_IMAGE_SIZE = ImageSize(1024, 768)


def parse_image_size(text: str, where: str = "--image-size") -> ImageSize:
    """``1024x768`` (width x height, 1..16384 px each) → :class:`ImageSize`; errors name ``where``."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*[xX×]\s*(\d{1,5})\s*", str(text))
    if m is None or not all(1 <= int(v) <= 16384 for v in m.groups()):
        raise SpecsimError(
            f"{where}: expected WIDTHxHEIGHT in pixels (1..16384 each), e.g. 1024x768, got {text!r}"
        )
    return ImageSize(int(m.group(1)), int(m.group(2)))


def qwen_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL ``smart_resize``: both sides to multiples of ``factor`` (patch × merge), the area kept
    within [min_pixels, max_pixels], the aspect ratio nearly kept (Python's round, as the processor)."""
    if max(height, width) / min(height, width) > 200:
        raise SpecsimError(f"image size {width}x{height}: aspect ratio over 200, which Qwen-VL refuses")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def anyres_best_resolution(height: int, width: int, pinpoints) -> tuple[int, int]:
    """LLaVA-NeXT ``select_best_resolution``: the (height, width) of ``pinpoints`` that keeps the most of the
    image's resolution, ties to the least wasted area."""
    best, best_effective, best_wasted = None, 0, math.inf
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (h, w), effective, wasted
    return best


def anyres_unpadded(
    height: int, width: int, patches_h: int, patches_w: int, scale_h: int, scale_w: int
) -> tuple[int, int]:
    """LLaVA-NeXT ``_get_unpadded_features``: (feature positions of the tiles with the padding cropped,
    newline positions: one per row)."""
    cur_h, cur_w = patches_h * scale_h, patches_w * scale_w
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    return cur_h * cur_w, cur_h


def internvl_tiles(height: int, width: int, tile_px: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """InternVL ``dynamic_preprocess``: the (columns, rows) grid of ``tile_px`` tiles whose aspect ratio is
    closest to the image's; a tie goes to the larger grid when the image covers half its area."""
    grids = {(i, j) for i in range(1, max_tiles + 1) for j in range(1, max_tiles // i + 1)}
    ratios = sorted((g for g in grids if g[0] * g[1] >= min_tiles), key=lambda r: r[0] * r[1])
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), math.inf
    for cols, rows in ratios:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and area > 0.5 * tile_px * tile_px * cols * rows:
            best = (cols, rows)
    return best
