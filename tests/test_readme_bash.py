"""README's ```bash blocks (commands shown without output: calibrate runs, installs) stay runnable.

``tests/test_readme_examples.py`` runs the ```text examples; these commands are too heavy to run, so each is
checked without running it: a ``specsim`` command line parses with the real parser (``build_parser``, as
``specsim.cli.main.main`` builds it), a ``python bench/X.py`` line names a script that exists and whose own
``parse_args`` accepts the line, every path into the repository (``bench/…``, ``notebooks/…``) exists, the
pair, preset, device and runtime names are shipped ones, and ``pip install`` appears only as the two set-up
commands (``tests/test_readme.py`` checks what they contain). Other programs (``curl``, ``vllm serve``) are
not ours and are skipped.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from specsim.cli.main import build_parser
from specsim.errors import SpecsimError
from tests.test_readme import _bash_blocks as setup_blocks

ROOT = Path(__file__).resolve().parents[1]
REPO_DIRS = {"bench", "calibrate", "notebooks", "specsim", "tests"}
# the pip commands README promises: its two set-up commands (tests/test_readme.py), one install per part
SETUP_PIP = {
    "python -m pip install -e .",
    "python -m pip install torch==2.13.0",
    'python -m pip install -e ".[calibrate,test,tune]"',
}


def bash_commands(text: str) -> list[str]:
    """Every command line of the text's ```bash blocks: continuations joined, comment lines dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        cmd = ""
        for line in block.splitlines():
            if not cmd and (not line.strip() or line.lstrip().startswith("#")):
                continue
            cmd += line.strip()
            if cmd.endswith("\\"):
                cmd = cmd[:-1] + " "
                continue
            out.append(cmd)
            cmd = ""
    return out


def problems(text: str) -> list[str]:
    """What is wrong with the ```bash commands of ``text`` (README's or a test's string); [] when nothing."""
    parser = build_parser()
    found = []
    for cmd in bash_commands(text):
        for part in (p.strip() for p in cmd.split("&&")):
            if part.startswith("python -m pip"):
                if part not in SETUP_PIP:
                    found.append(f"{part!r}: not one of README's set-up commands")
                continue
            argv = shlex.split(part, comments=True)
            wrong = _specsim(parser, argv[1:]) if argv[:1] == ["specsim"] else _python(argv)
            found += [f"{part!r}: {w}" for w in wrong]
    return found


def _specsim(parser, argv: list[str]) -> list[str]:
    try:
        args = parser.parse_args(argv)
    except (SpecsimError, SystemExit) as err:
        return [f"does not parse: {err}"]
    if not getattr(args, "func", None):
        return ["names no command"]
    return _paths(argv) + _names(args)


def _python(argv: list[str]) -> list[str]:
    """``python bench/X.py ...`` and ``python -m <project module>``; other programs are not ours."""
    if argv[:1] != ["python"] or len(argv) < 2 or argv[1:3] == ["-m", "pytest"]:
        return []
    if argv[1] == "-m":
        module = ROOT / (argv[2].replace(".", "/") + ".py")
        return [] if module.is_file() else [f"module {argv[2]} is not in the repository"]
    script = ROOT / argv[1]
    if not script.is_file():
        return [f"{argv[1]} does not exist"]
    spec = importlib.util.spec_from_file_location(f"readme_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "parse_args"):
        try:
            module.parse_args(argv[2:])
        except SystemExit as err:
            return [f"{argv[1]} does not accept its arguments (exit {err.code})"]
    return _paths(argv[2:])


def _paths(argv: list[str]) -> list[str]:
    """Arguments that are paths into the repository (first folder one of its own) and do not exist."""
    values = [a.split("=", 1)[-1] for a in argv]
    named = [v for v in values if "/" in v and v.split("/", 1)[0] in REPO_DIRS]
    return [f"{v} does not exist in the repository" for v in named if not (ROOT / v).exists()]


def _names(args) -> list[str]:
    """Shipped names the command line picks: pairs, architecture presets, devices and runtimes."""
    from specsim.hardware.device import resolve_device_name
    from specsim.hardware.runtime import runtime_names
    from specsim.presets import pairs, preset_names

    wanted = {
        "preset": pairs(),
        "pair": pairs(),
        "target_config": preset_names(),
        "draft_config": preset_names(),
    }
    if args.command in ("hardware", "recommend", "serve", "tune"):  # check's --runtime names an engine
        wanted["runtime"] = runtime_names()
    found = [
        f"--{key.replace('_', '-')} {value}: not a shipped name"
        for key, known in wanted.items()
        if isinstance(value := getattr(args, key, None), str) and value not in known and "/" not in value
    ]
    devices = getattr(args, "device", None) if args.command in ("hardware", "recommend") else None
    for name in [devices] if isinstance(devices, str) else devices or []:
        if "/" not in name and resolve_device_name(name) is None:
            found.append(f"--device {name}: not a catalog device")
    return found


# --------------------------------------------------------------------------- README itself
def test_readme_bash_blocks_have_commands():
    cmds = bash_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert sum(c.startswith("specsim ") for c in cmds) >= 20
    assert any(c.startswith("python bench/") for c in cmds)


def test_every_readme_bash_command_parses_and_names_what_exists():
    assert problems((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_the_setup_pip_commands_are_the_promised_ones():
    """SETUP_PIP is exactly what the two set-up blocks split into (so it cannot drift from them)."""
    parts = {p.strip() for b in setup_blocks() for p in b.split("&&") if "pip install" in p}
    assert parts == SETUP_PIP


# --------------------------------------------------------------------------- the checker on broken copies
def _bash(*lines: str) -> str:
    return "text\n```bash\n" + "\n".join(lines) + "\n```\nmore text\n"


@pytest.mark.parametrize(
    "line, message",
    [
        ("specsim predict --gamma 5 --new-tokenz 3", "does not parse"),
        ("specsim calibrate acceptance --preset zoo --sample-paths eight --out x.json", "does not parse"),
        ("specsim calibrate acceptance --preset zoo --sample-pahts 8 --out x.json", "does not parse"),
        ("specsim check --profile p.json --preset zoo \\\n    --gamma 1,2 --bogus", "does not parse"),
        ("specsim frobnicate", "does not parse"),
        ("specsim calibrate latency --preset nope-pair --out x.json", "not a shipped name"),
        ("specsim hardware --device h100-sxmm --alpha 0.7", "not a catalog device"),
        ("specsim hardware --device h100-sxm --runtime vllmm --alpha 0.7", "not a shipped name"),
        ("specsim predict --profile notebooks/data/gone.json --gamma 5", "does not exist"),
        ("python bench/no_such_bench.py --limit 2", "does not exist"),
        ("python bench/tree_check.py --preset zoo --no-such-flag", "does not accept"),
        ("python -m pip install specsim-extra", "set-up commands"),
        ("python -m pip install -e . && specsim predict --gammma 5", "does not parse"),
    ],
)
def test_a_broken_command_is_caught(line, message):
    found = problems(_bash("# a comment line", line))
    assert len(found) == 1 and message in found[0], found


def test_good_lines_and_other_programs_pass():
    assert (
        problems(
            _bash(
                "specsim predict --gamma 5   # a trailing comment",
                "specsim check --profile p.json --preset zoo \\",
                "    --gamma 1,2,3",
                "python -m pip install -e . && specsim predict --gamma 5",
                "python bench/tree_check.py --preset zoo --method MT --limit 2",
                'curl -s localhost:8000/metrics > before.prom && vllm serve x --opt "$(cat spec.json)"',
            )
        )
        == []
    )
