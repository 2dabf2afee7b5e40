"""Scenes of coloured shapes (shape, colour, count, side) rendered as small RGB images with PIL.

A scene is a handful of identical shapes (same kind and colour) placed in one half of a square image;
its four attributes are the *image facts* that answers state. Layouts (cell, size, jitter per object)
are drawn from an explicit ``np.random.Generator`` so a seed fixes every pixel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 40, 40),
    "green": (40, 165, 60),
    "blue": (40, 80, 215),
    "yellow": (225, 195, 25),
    "purple": (145, 60, 190),
    "orange": (240, 130, 30),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
COUNT_WORDS: tuple[str, ...] = ("one", "two", "three", "four")
SIDES: tuple[str, ...] = ("left", "right", "top", "bottom")
ATTRIBUTES: tuple[str, ...] = ("colour", "shape", "number", "position")
IMAGE_SIZE_PX = 64
_CELL_PX = 16  # a half image is 2×4 cells of 16 px; each object sits in its own cell


@dataclass(frozen=True)
class Scene:
    """``count`` identical ``colour`` ``shape`` objects in the ``side`` half; ``layout`` = (x, y, size_px)
    each."""

    shape: str
    colour: str
    count: int
    side: str
    layout: tuple[tuple[int, int, int], ...]
    background: int = 245  # grey level of the background, 235..255

    def to_json(self) -> dict:
        return {
            "shape": self.shape,
            "colour": self.colour,
            "count": self.count,
            "side": self.side,
            "layout": [list(t) for t in self.layout],
            "background": self.background,
        }

    @classmethod
    def from_json(cls, d: dict) -> Scene:
        return cls(
            shape=d["shape"],
            colour=d["colour"],
            count=int(d["count"]),
            side=d["side"],
            layout=tuple(tuple(int(v) for v in t) for t in d["layout"]),
            background=int(d["background"]),
        )


def shape_noun(shape: str, count: int) -> str:
    """'circle' / 'circles' (plural unless count is one)."""
    return shape if count == 1 else shape + "s"


def caption(scene: Scene) -> str:
    """One-line caption, e.g. 'two red circles on the left.' (the captioner's training target)."""
    return (
        f"{COUNT_WORDS[scene.count - 1]} {scene.colour} {shape_noun(scene.shape, scene.count)} "
        f"on the {scene.side}."
    )


def attribute_value(scene: Scene, attribute: str) -> str:
    """The word an answer uses for one attribute: colour name, shape, count word or side."""
    return {
        "colour": scene.colour,
        "shape": scene.shape,
        "number": COUNT_WORDS[scene.count - 1],
        "position": scene.side,
    }[attribute]


def _half_cells(side: str) -> list[tuple[int, int]]:
    """Top-left corners (x, y) in px of the 8 cells of one half of the image."""
    half = IMAGE_SIZE_PX // 2
    x0, y0, w, h = {
        "left": (0, 0, half, IMAGE_SIZE_PX),
        "right": (half, 0, half, IMAGE_SIZE_PX),
        "top": (0, 0, IMAGE_SIZE_PX, half),
        "bottom": (0, half, IMAGE_SIZE_PX, half),
    }[side]
    return [
        (x0 + i * _CELL_PX, y0 + j * _CELL_PX) for j in range(h // _CELL_PX) for i in range(w // _CELL_PX)
    ]


def _spans_both_halves(side: str, layout: list[tuple[int, int, int]]) -> bool:
    """Do the objects reach both halves across ``side``'s axis (top and bottom for left/right)?

    Without this a scene of one object in the top-left cell would be a correct "left" and a correct
    "top" scene at once, and no model could state its side reliably.
    """
    half = IMAGE_SIZE_PX // 2
    axis = 1 if side in ("left", "right") else 0
    return min(o[axis] for o in layout) < half <= max(o[axis] + o[2] - 1 for o in layout)


def random_layout(side: str, count: int, rng: np.random.Generator) -> tuple[tuple[int, int, int], ...]:
    """``count`` objects in distinct cells of the ``side`` half, size 9..13 px, jittered inside the cell,
    reaching both halves across the side's axis (one object straddles the midline), so the side is
    unambiguous."""
    cells = _half_cells(side)
    half = IMAGE_SIZE_PX // 2
    while True:
        picks = rng.choice(len(cells), size=count, replace=False)
        out = []
        for k in sorted(int(p) for p in picks):
            size = int(rng.integers(9, 14))
            slack = _CELL_PX - size
            cx, cy = cells[k]
            x, y = cx + int(rng.integers(0, slack + 1)), cy + int(rng.integers(0, slack + 1))
            if count == 1:  # the one object straddles the midline across the side's axis
                mid = int(rng.integers(half - size + 2, half - 1))
                x, y = (x, mid) if side in ("left", "right") else (mid, y)
            out.append((x, y, size))
        if _spans_both_halves(side, out):
            return tuple(out)


def random_scene(rng: np.random.Generator) -> Scene:
    """A scene with every attribute drawn uniformly."""
    side = SIDES[int(rng.integers(len(SIDES)))]
    count = int(rng.integers(1, len(COUNT_WORDS) + 1))
    return Scene(
        shape=SHAPES[int(rng.integers(len(SHAPES)))],
        colour=list(COLOURS)[int(rng.integers(len(COLOURS)))],
        count=count,
        side=side,
        layout=random_layout(side, count, rng),
        background=int(rng.integers(235, 256)),
    )


def change_scene(scene: Scene, attribute: str, rng: np.random.Generator) -> Scene:
    """A copy of ``scene`` where only ``attribute`` takes a different value (objects re-laid out as
    needed)."""
    if attribute == "colour":
        return replace(scene, colour=_other(list(COLOURS), scene.colour, rng))
    if attribute == "shape":
        return replace(scene, shape=_other(list(SHAPES), scene.shape, rng))
    if attribute == "number":
        count = int(_other(list(range(1, len(COUNT_WORDS) + 1)), scene.count, rng))
        return replace(scene, count=count, layout=random_layout(scene.side, count, rng))
    if attribute == "position":
        side = _other(list(SIDES), scene.side, rng)
        return replace(scene, side=side, layout=random_layout(side, scene.count, rng))
    raise ValueError(f"attribute: expected one of {ATTRIBUTES}, got {attribute!r}")


def _other(values: list, current, rng: np.random.Generator):
    """A uniformly drawn value different from ``current``."""
    rest = [v for v in values if v != current]
    return rest[int(rng.integers(len(rest)))]


def render(scene: Scene):
    """The scene as a 64×64 RGB ``PIL.Image`` (deterministic: same scene → same bytes)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (IMAGE_SIZE_PX, IMAGE_SIZE_PX), (scene.background,) * 3)
    draw = ImageDraw.Draw(img)
    fill = COLOURS[scene.colour]
    for x, y, s in scene.layout:
        if scene.shape == "circle":
            draw.ellipse((x, y, x + s - 1, y + s - 1), fill=fill)
        elif scene.shape == "square":
            draw.rectangle((x, y, x + s - 1, y + s - 1), fill=fill)
        else:
            draw.polygon([(x + (s - 1) / 2, y), (x, y + s - 1), (x + s - 1, y + s - 1)], fill=fill)
    return img
