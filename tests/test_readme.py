"""README.md keeps exactly two set-up commands, and .ci/run runs the test one verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", setup, flags=re.S)]


def test_two_setup_commands_and_ci_runs_the_test_one():
    blocks = _bash_blocks()
    assert len(blocks) == 2
    main_cmd, test_cmd = blocks
    assert "specsim predict --gamma 5" in main_cmd
    assert "pytest" in test_cmd and "torch==2.13.0" in test_cmd
    assert test_cmd.index("torch==2.13.0") < test_cmd.index("-e")
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def _layout() -> str:
    return (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]


def test_layout_names_every_module_and_nothing_gone():
    text = _layout()
    named = set(re.findall(r"`([A-Za-z0-9_./]+)`", text))
    files = {
        p
        for pkg in ("specsim", "calibrate")
        for p in (ROOT / pkg).rglob("*.py")
        if "__pycache__" not in p.parts and p.name != "__init__.py"
    }
    missing = sorted(str(p.relative_to(ROOT)) for p in files if p.name not in named)
    assert not missing, f"README layout does not name: {missing}"
    folders = {
        p.name + "/"
        for pkg in ("specsim", "calibrate")
        for p in (ROOT / pkg).rglob("*")
        if p.is_dir()
        and "__pycache__" not in p.parts
        and p.parent.name in ("specsim", "calibrate", "hardware", "zoo")
    }
    assert not folders - named, f"README layout does not name folders: {sorted(folders - named)}"
    existing = {p.name for p in files} | {"regenerate.py"}
    gone = sorted(n for n in named if n.endswith(".py") and n not in existing and not (ROOT / n).is_file())
    assert not gone, f"README layout names modules that do not exist: {gone}"


def test_every_notebook_title_carries_its_own_number():
    """Notebook 07 was titled "05 ·": a title's number is its file's."""
    import json

    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
        assert first.startswith(f"# {path.name[:2]} ·"), (path.name, first.splitlines()[0])


def _resolves(name: str) -> bool:
    """A backticked file or folder of the map: a path from the root, specsim/ or calibrate/ (a glob matching
    something), or a bare file name found anywhere in the tree."""
    bare = name.rstrip("/")
    if "/" not in bare and not name.endswith("/"):
        return any(p.name == bare for p in ROOT.rglob(bare) if ".git" not in p.parts)
    for base in (ROOT, ROOT / "specsim", ROOT / "calibrate"):
        if any(base.glob(bare)) if "*" in bare else (base / bare).exists():
            return True
    return name.endswith("/") and any(p.is_dir() for p in ROOT.rglob(bare.split("/")[-1]))


def test_the_architecture_map_names_only_files_that_exist():
    """Every backticked file name or path in ARCHITECTURE.md resolves to a file or folder of the tree (the map
    once named four files that did not exist); README's layout is held by the test above."""
    kinds = r"\.(py|json|md|ipynb|csv|toml|jsonl|png)$"
    for doc in ("ARCHITECTURE.md",):
        text = (ROOT / doc).read_text(encoding="utf-8")
        named = {n for n in re.findall(r"`([^`\s]+)`", text) if re.search(kinds, n) or n.endswith("/")}
        named = {n for n in named if not n.startswith(("$", "~", "/", "-")) and "<" not in n}
        missing = sorted(n for n in named if not _resolves(n))
        assert not missing, f"{doc} names what does not exist: {missing}"


def test_sections_the_commands_send_users_to_exist():
    """Help and errors cite README sections by heading ("README, 'heading'"); one cited 'Getting llama.cpp',
    which the README never had."""
    headings = {line.lstrip("#").strip() for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("#")}  # fmt: skip
    cited = {}
    for path in [*ROOT.glob("specsim/**/*.py"), *ROOT.glob("calibrate/**/*.py")]:
        text = re.sub(r'"\s*\n\s*"', "", path.read_text())  # join implicitly concatenated strings
        for name in re.findall(r"README, '([^']+)'", text) + re.findall(r"README: ([A-Z][^()]*?)\)", text):
            cited[name.strip()] = path.relative_to(ROOT)
    assert cited and not {n: str(p) for n, p in cited.items() if n not in headings}
