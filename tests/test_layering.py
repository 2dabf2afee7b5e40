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
        import specsim, specsim.cli.main, specsim.predict.prediction, specsim.predict.pricing
        import specsim.predict.sweep, specsim.profile_format
        import pkgutil, importlib
        for m in pkgutil.walk_packages(specsim.__path__, 'specsim.'):
            importlib.import_module(m.name)
        parser = specsim.cli.main.build_parser()
        assert specsim.cli.main.main(['predict', '--gamma', '5', '--json']) == 0
        assert 'torch' not in sys.modules and 'transformers' not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


ROOT = Path(__file__).resolve().parent.parent
# A module path of the measuring half, or an import of it: `calibrate.run.engine`, `from calibrate import`,
# `import calibrate`, `files("calibrate")`. The word alone ("calibrated", the `specsim calibrate` command)
# is fine.
_NAMES_CALIBRATE = re.compile(
    r"\bcalibrate\.[A-Za-z_]|^\s*(from|import)\s+calibrate\b|(files|import_module)\(\s*[\"']calibrate", re.M
)


def test_specsim_names_no_calibrate_module():
    offenders = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in sorted((ROOT / "specsim").rglob("*"))
        if path.suffix in (".py", ".json", ".md") and path.is_file()
        for text in [path.read_text(encoding="utf-8")]
        for m in _NAMES_CALIBRATE.finditer(text)
    ]
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
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in ("specsim", "calibrate", "bench")
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert not long, f"modules over 400 lines: {long}"


def test_every_command_lives_in_a_cli_module_found_by_entry_point():
    """Each ``specsim.commands`` entry point (installed, or named by this checkout's pyproject.toml) is a
    ``register`` in a ``cmd_<name>.py`` module of a ``cli`` package."""
    from specsim.cli.main import command_entry_points

    eps = command_entry_points()
    assert eps, "no specsim.commands entry points: is the package installed (pip install -e .)?"
    for ep in eps:
        module, _, attr = ep.value.partition(":")
        package, _, name = module.rpartition(".")
        assert (
            attr == "register" and package in ("specsim.cli", "calibrate.cli") and name.startswith("cmd_")
        ), ep


def test_architecture_maps_every_command_and_drafting_module():
    """ARCHITECTURE.md names the file of every command (entry point) and every drafting module."""
    from specsim.cli.main import command_entry_points

    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    files = {ep.value.partition(":")[0].replace(".", "/") + ".py" for ep in command_entry_points()}
    files |= {
        str(p.relative_to(ROOT))
        for p in (ROOT / "calibrate" / "drafting").glob("*.py")
        if p.name != "__init__.py"
    }
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
        import specsim.cli.main
        argv = ['calibrate', 'acceptance', '--preset', 'zoo', '--out', '/tmp/never.json']
        sys.exit(specsim.cli.main.main(argv))
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
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]
    missing = []
    for pkg in ("specsim", "calibrate"):
        root = ROOT / pkg
        shipped = {
            Path(p)
            for pattern in globs.get(pkg, ())
            for p in glob.glob(pattern, root_dir=root, recursive=True)
        }
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if (
                path.is_file()
                and path.suffix not in (".py", ".pyc")
                and "__pycache__" not in rel.parts
                and rel not in shipped
            ):
                missing.append(f"{pkg}/{rel}")
    assert not missing, f"not in any package-data glob of pyproject.toml: {missing}"


def _package(module: str) -> str:
    """``specsim.predict.pricing`` -> ``specsim.predict``; a top-level module is its own package."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_profile_contract_is_a_leaf():
    """specsim/profile_format/ imports nothing of specsim outside itself but jsonio, errors, bounds and
    dtypes."""
    allowed = (
        "specsim.profile_format",
        "specsim.jsonio",
        "specsim.errors",
        "specsim.bounds",
        "specsim.dtypes",
    )
    graph = _module_graph()
    outside = {
        (m, d)
        for m, deps in graph.items()
        if m.startswith("specsim.profile_format.") or m == "specsim.profile_format"
        for d in deps
        if not any(d == a or d.startswith(a + ".") for a in allowed)
    }
    assert not outside, f"the profile contract imports: {sorted(outside)}"


def test_no_loops_between_packages():
    """The packages of specsim form layers: no two import each other, directly or round about."""
    graph = _module_graph()
    packages: dict[str, set[str]] = {}
    for m, deps in graph.items():
        if m.startswith("specsim"):
            packages.setdefault(_package(m), set()).update(
                _package(d) for d in deps if d.startswith("specsim") and _package(d) != _package(m)
            )

    def reaches(a: str, b: str, seen=()) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in packages.get(a, ()))

    loops = sorted({tuple(sorted((a, b))) for a in packages for b in packages[a] if reaches(b, a)})
    assert not loops, f"packages that import each other: {loops}"


def test_specsim_has_few_top_level_modules():
    top = sorted(p.name for p in (ROOT / "specsim").glob("*.py"))
    assert len(top) <= 8, top


def test_no_module_branches_on_the_presence_of_a_cost_model():
    """One latency model: schema-1 tables become a cost model when a profile is built, so only the latency
    section itself says whether it has one (``published_ratio``, ``forward_costs``)."""
    pattern = re.compile(r"cost_model\s+is\s+(not\s+)?None|if\s+(not\s+)?[\w.]*cost_model\b\s*(:|and|or)")
    home = ROOT / "specsim" / "profile_format" / "latency_section.py"
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for pkg in ("specsim", "calibrate", "bench")
        for p in (ROOT / pkg).rglob("*.py")
        if p != home
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"branches on a cost model's presence: {found}"


def test_no_module_imports_a_private_name_of_another():
    """A name with a leading underscore stays in its module: one that another module needs is public
    (imported by name, or read off an imported module: ``E._helper``)."""
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for k in ("specsim", "calibrate")
        for p in (ROOT / k).rglob("*.py")
    }
    offenders = []
    for package in ("specsim", "calibrate"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            aliases = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    ("specsim", "calibrate")
                ):
                    private = [
                        a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                    ]
                    offenders += [f"{path.relative_to(ROOT)}: {node.module}.{n}" for n in private]
                    aliases |= {
                        a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in modules
                    }
                elif isinstance(node, ast.Import):
                    aliases |= {a.asname for a in node.names if a.asname and a.name in modules}
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not offenders, offenders


DOCSTRING_MAX_LINES = 8


def _long_docstrings(limit: int) -> set[str]:
    """Every module, class and function docstring of specsim/ and calibrate/ over ``limit`` lines, named by
    path (a module's) or path::qualified name (a class's or a function's)."""
    found = set()

    def visit(node, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(child, clean=False)
                if doc and len(doc.strip().splitlines()) > limit:
                    found.add(f"{path}::{prefix}{child.name}")
                visit(child, path, f"{prefix}{child.name}.")
            else:
                visit(child, path, prefix)

    for package in ("specsim", "calibrate"):
        for p in sorted((ROOT / package).rglob("*.py")):
            path = p.relative_to(ROOT).as_posix()
            tree = ast.parse(p.read_text(encoding="utf-8"))
            doc = ast.get_docstring(tree, clean=False)
            if doc and len(doc.strip().splitlines()) > limit:
                found.add(path)
            visit(tree, path, "")
    return found


def test_docstrings_are_short():
    """Docstrings of at most 8 lines (issue 50): what it is, units, formula or paper, the key convention; the
    longer explanation goes to ARCHITECTURE.md, Notes by module."""
    long = sorted(_long_docstrings(DOCSTRING_MAX_LINES))
    assert not long, f"docstrings over {DOCSTRING_MAX_LINES} lines (the rest goes to ARCHITECTURE.md): {long}"


def test_a_docstring_stands_first():
    """A string statement after a definition's first statement is a docstring out of place (Python keeps
    none): pricing._plan had its own below a guard."""
    misplaced = []
    for package in ("specsim", "calibrate"):
        for p in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    misplaced += [
                        f"{p.relative_to(ROOT).as_posix()}:{s.lineno} ({node.name})"
                        for s in node.body[1:]
                        if isinstance(s, ast.Expr)
                        and isinstance(s.value, ast.Constant)
                        and isinstance(s.value.value, str)
                    ]
    assert not misplaced, f"string statements after the first (a docstring goes first): {misplaced}"
