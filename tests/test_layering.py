"""specsim must import and predict with torch (and transformers) unimportable."""

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path


def test_specsim_imports_without_torch():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('torch', 'transformers'):
                    raise ImportError('blocked for the layering test: ' + name)
                return None
        sys.meta_path.insert(0, Block())
        import specsim, specsim.cli, specsim.predict, specsim.e2e, specsim.sweep, specsim.profile
        import pkgutil, importlib
        for m in pkgutil.walk_packages(specsim.__path__, 'specsim.'):
            importlib.import_module(m.name)
        parser = specsim.cli.build_parser()
        assert specsim.cli.main(['predict', '--gamma', '5', '--json']) == 0
        assert 'torch' not in sys.modules and 'transformers' not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


ROOT = Path(__file__).resolve().parent.parent
# A module path of the measuring half, or an import of it: `calibrate.engine`, `from calibrate import`,
# `import calibrate`, `files("calibrate")`. The word alone ("calibrated", the `specsim calibrate` command) is fine.
_NAMES_CALIBRATE = re.compile(r"\bcalibrate\.[A-Za-z_]|^\s*(from|import)\s+calibrate\b|(files|import_module)\(\s*[\"']calibrate", re.M)


def test_specsim_names_no_calibrate_module():
    offenders = [f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
                 for path in sorted((ROOT / "specsim").rglob("*"))
                 if path.suffix in (".py", ".json", ".md") and path.is_file()
                 for text in [path.read_text(encoding="utf-8")]
                 for m in _NAMES_CALIBRATE.finditer(text)]
    assert not offenders, f"specsim names calibrate modules at: {offenders}"


def _imports(path: Path, package: str, module: str) -> set[str]:
    """Modules of ``specsim``/``calibrate`` that ``module`` imports anywhere (function bodies included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.rsplit(".", node.level)[0] if not path.name == "__init__.py" else module
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}
    return {n for n in out if n.split(".")[0] in ("specsim", "calibrate")}


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for package in ("specsim", "calibrate"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        for dep in _imports(path, name.split(".")[0], name):
            # `from a.b import c`: c is a module or a name in a.b; keep whichever is a module.
            while dep and dep not in modules:
                dep = dep.rpartition(".")[0]
            if dep and dep != name and not name.startswith(dep + "."):  # a package's own __init__ is no loop
                deps.add(dep)
        graph[name] = deps
    return graph


def test_no_import_loops():
    """No cycle among the modules of both halves, counting imports inside functions too."""
    graph = _module_graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import loops: {cycles}"


def test_no_module_over_400_lines():
    """One concept per module, no exception (the profile contract is a package, a module per part)."""
    long = {str(p.relative_to(ROOT)): n for pkg in ("specsim", "calibrate") for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"


def test_every_command_lives_in_a_cli_module_found_by_entry_point():
    """Each ``specsim.commands`` entry point is a ``register`` in a ``cli_<name>.py`` module."""
    from importlib.metadata import entry_points

    eps = list(entry_points(group="specsim.commands"))
    assert eps, "no specsim.commands entry points: is the package installed (pip install -e .)?"
    for ep in eps:
        module, _, attr = ep.value.partition(":")
        assert attr == "register" and module.rsplit(".", 1)[-1].startswith("cli_"), ep


def test_architecture_maps_every_command_and_drafting_module():
    """ARCHITECTURE.md names the file of every command (entry point) and every drafting module."""
    from importlib.metadata import entry_points

    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    files = {ep.value.partition(":")[0].replace(".", "/") + ".py" for ep in entry_points(group="specsim.commands")}
    files |= {str(p.relative_to(ROOT)) for p in (ROOT / "calibrate" / "drafting").glob("*.py")
              if p.name != "__init__.py"}
    missing = sorted(f for f in files if f"`{f}`" not in text)
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"


def test_measuring_command_without_torch_is_one_line():
    """Without the calibrate extra, a measuring command says what to install in one line, exit 2."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('torch', 'transformers'):
                    raise ModuleNotFoundError('blocked', name=name.split('.')[0])
                return None
        sys.meta_path.insert(0, Block())
        import specsim.cli
        sys.exit(specsim.cli.main(['calibrate', 'acceptance', '--preset', 'zoo', '--out', '/tmp/never.json']))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count(chr(10)) == 1 and "needs the calibrate extra" in proc.stderr


def test_package_data_ships_every_data_file():
    """Every non-Python file inside specsim/ and calibrate/ matches a [tool.setuptools.package-data] glob,
    so a regular (non-editable) install carries it: the published set once was left out of the wheel."""
    import glob

    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    missing = []
    for pkg in ("specsim", "calibrate"):
        root = ROOT / pkg
        shipped = {Path(p) for pattern in globs.get(pkg, ())
                   for p in glob.glob(pattern, root_dir=root, recursive=True)}
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in rel.parts \
                    and rel not in shipped:
                missing.append(f"{pkg}/{rel}")
    assert not missing, f"not in any package-data glob of pyproject.toml: {missing}"
