"""Bad input to a bench script (``python bench/NAME.py ...``): one line naming the value, exit status 2, no
traceback, before torch loads; and ``bench/script_main.py``, which every script's main runs through."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsim.errors import SpecsimError

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("script_main", ROOT / "bench" / "script_main.py")
script_main = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script_main)

# (script, arguments, what the line must say): each refused before any model, or torch, loads
CASES = [
    ("bench_analytic.py", ["--points", "-5", "--repeats", "1"], "--points: expected an integer in 1.."),
    ("serve_speed.py", ["--requests", "0"], "--requests: expected an integer in 1.."),
    ("gpu_step_compare.py", ["--device", "nope"], "unknown device 'nope'"),
    ("hf_eager_fit.py", ["--before", "/nonexistent/hf-eager.json"], "'/nonexistent/hf-eager.json' does not"),
    ("tune_scaling.py", ["--sims", "0"], "--sims: expected 1..4096, got 0"),
    ("engine_vs_hf.py", ["--repeats", "0"], "--repeats: expected an integer in 1..100000 (repeats), got '0'"),
    ("make_tiny_profile.py", ["--top-k", "-1"], "--top-k: expected an integer in 0 or 1.."),
    ("gpu_session.py", ["--total-s", "nan"], "--total-s: expected a finite number in 0.001..1e+06"),
    ("serve_profile_speed.py", ["--rate", "0"], "--rate: expected a finite number in 1e-06..1e+06, got '0'"),
]


@pytest.fixture(scope="module")
def no_torch_env(tmp_path_factory) -> dict:
    """The environment with torch and transformers unimportable (a stand-in first on PYTHONPATH)."""
    folder = tmp_path_factory.mktemp("no_torch")
    for name in ("torch", "transformers"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked here')\n")
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


@pytest.mark.parametrize("script, args, says", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_status_2(script, args, says, no_torch_env):
    cmd = [sys.executable, str(Path("bench") / script), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=no_torch_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: "), proc.stderr
    assert says in lines[0]


def test_run_main_turns_a_specsim_error_into_one_line(capsys):
    def bad():
        raise SpecsimError("--x: expected 1..3, got 7")

    assert script_main.run_main(bad) == 2
    name = Path(sys.argv[0]).name
    assert capsys.readouterr().err == f"{name}: error: --x: expected 1..3, got 7\n"


def test_run_main_passes_the_status_on_and_other_errors_through(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert script_main.run_main(lambda: None) == 0
    assert script_main.run_main(lambda status: status, 3) == 3
    assert script_main.run_main(interrupted) == 130 and "interrupted" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        script_main.run_main(lambda: 1 / 0)


def test_the_parser_error_is_one_line(capsys):
    parser = script_main.ScriptParser(prog="x.py")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--n", "two"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "x.py: error: argument --n: invalid int value: 'two' (see --help)\n"
