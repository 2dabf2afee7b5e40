"""A progress bar on stderr for long command-line runs (tqdm when installed, else a plain one)."""

from __future__ import annotations

import sys


class ProgressBar:
    """A bar on stderr (tqdm when installed, else a plain one); nothing when disabled. ``what``: the unit
    counted, plural ("rates")."""

    def __init__(self, total: int, enabled: bool, label: str, what: str):
        self.total, self.done, self.bar = total, 0, None
        self.label, self.what = label, what
        self.enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=label, unit=what.rstrip("s"), file=sys.stderr)
            except ImportError:
                self.bar = None

    def step(self, count: int = 1, note: str | None = None) -> None:
        """``count`` more done; ``note`` (e.g. the best so far) shown after the count."""
        self.done += count
        if self.bar is not None:
            if note is not None:
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(count)
        elif self.enabled:
            filled = min(20, round(20 * self.done / self.total))
            end = "\n" if self.done >= self.total else ""
            tail = f", {note}" if note else ""
            print(
                f"\r{self.label}: [{'#' * filled}{' ' * (20 - filled)}] {self.done}/{self.total} {self.what}"
                f"{tail}",
                end=end,
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
