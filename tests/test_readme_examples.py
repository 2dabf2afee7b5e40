"""Every command example README.md shows with its output (a ```text block of `$ specsim ...` lines) is run,
in order, in one folder, and its output compared with the text line by line: a line `...` stands for any
number of lines, `...` inside a line for any text; otherwise lines follow each other as printed. So what
the README quotes cannot drift from what the commands print. Every ```python block runs as shown."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def examples() -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows) of every `$ specsim` line in a ```text block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ specsim "):
                i += 1
                continue
            cmd = lines[i][2:]
            while cmd.endswith("\\"):  # a command continued on the next line
                i += 1
                cmd = cmd[:-1] + lines[i].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            shown = lines[i + 1 : j]
            while shown and not shown[-1].strip():
                shown.pop()
            out.append((cmd, shown))
            i = j
    return out


def _pattern(line: str) -> re.Pattern:
    return re.compile("^" + ".*".join(re.escape(part) for part in line.rstrip().split("...")) + "$")


def mismatch(shown: list[str], printed: list[str]) -> str | None:
    """Where ``printed`` departs from ``shown`` (None: it does not)."""
    at, gap = 0, False
    for line in shown:
        if line.strip() == "...":
            gap = True
            continue
        pat = _pattern(line)
        if gap:
            hits = [k for k in range(at, len(printed)) if pat.match(printed[k].rstrip())]
            if not hits:
                return f"not printed after line {at}: {line!r}"
            at = hits[0] + 1
        else:
            if at >= len(printed) or not pat.match(printed[at].rstrip()):
                got = printed[at] if at < len(printed) else "<end of output>"
                return f"line {at + 1}: README shows {line!r}, the command printed {got!r}"
            at += 1
        gap = False
    if not gap and at < len(printed):
        return f"the command printed more after line {at}: {printed[at]!r} (end the README block with ...)"
    return None


def test_readme_has_examples():
    assert len(examples()) >= 4


def test_every_readme_example_prints_what_the_readme_shows(tmp_path):
    (tmp_path / "notebooks").symlink_to(ROOT / "notebooks")  # the examples' paths are the repo's
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    failures = []
    for cmd, shown in examples():
        run = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m specsim.cli.main {cmd[len('specsim ') :]}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if run.returncode != 0:
            failures.append(f"{cmd}: exit {run.returncode}: {run.stderr.strip()[-300:]}")
            continue
        wrong = mismatch(shown, run.stdout.rstrip("\n").split("\n"))
        if wrong:
            failures.append(f"{cmd}: {wrong}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "shown, printed, ok",
    [
        (["a", "...", "c"], ["a", "b", "x", "c"], True),
        (["a", "c"], ["a", "b", "c"], False),
        (["a ... z"], ["a then z"], True),
        (["a"], ["a", "b"], False),
        (["a", "..."], ["a", "b"], True),
    ],
)
def test_the_comparison_itself(shown, printed, ok):
    assert (mismatch(shown, printed) is None) == ok


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.split("\n", 1)[0][:40])
def test_every_readme_python_block_runs(block, tmp_path):
    """Offline, in an empty folder: an import that moved or a signature that changed fails here (the tree
    block once imported ``tree_block_ms`` from where it no longer lives)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    run = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-1500:]


def test_readme_has_python_blocks():
    assert len(python_blocks()) >= 2
