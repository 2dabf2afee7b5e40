"""``bench/gpu_session.py``, the prepared device script, dry-run on the CPU: the same install (a dist-info
on PYTHONPATH, no pip), the same stage processes and commands, with tiny configs and small grids.

- every stage runs and writes its results (at most 8 files): the CUDA-path report, the profiles with their
  latency, batched grid and check rows (synthetic ones marked with their schedule), the HF steps;
- a failing stage, an overrunning one (killed at its budget) and one that no time is left for are recorded,
  and the next stage runs.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_session", ROOT / "bench" / "gpu_session.py")
session_script = sys.modules["gpu_session"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(session_script)
IBED, ZOO_TRACES, Plan = session_script.IBED, session_script.ZOO_TRACES, session_script.Plan
install, run_session = session_script.install, session_script.run_session

FILES = {"session.json", "log.txt", "cuda_paths.json", "llava7b.json", "hf_steps.json", "zoo.json",
         "llama8b.json"}  # fmt: skip


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("session")
    out = base / "out"
    # the session's whole budget is the device's (570 s); a busy CPU may need more for the dry run's stages
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_session.py"), "--dry-run", "--out", str(out)]
    cmd += ["--total-s", "1500"]
    proc = subprocess.run([*cmd, "--work", str(base / "work")], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_every_stage_runs_and_writes_its_results(dry_run):
    assert {p.name for p in dry_run.iterdir()} == FILES
    session = json.loads((dry_run / "session.json").read_text())
    assert [s["stage"] for s in session["stages"]] == [name for name, _ in Plan().budgets_s]
    for stage in session["stages"]:
        assert stage["status"] == "ok", stage
        assert stage["steps"] and all(step["rc"] == 0 for step in stage["steps"]), stage
    commands = [c for s in session["stages"] for step in s["steps"] for c in step["commands"]]
    assert any(c.startswith("specsim check") and "--synthetic-acceptance" in c for c in commands)
    # the install registered the commands from pyproject.toml's entry points
    assert {"check", "calibrate.latency", "calibrate.acceptance"} <= set(session["environment"]["commands"])
    log = (dry_run / "log.txt").read_text()
    assert all(f"===== {name}" in log for name, _ in Plan().budgets_s)


def test_the_cuda_path_report(dry_run):
    report = json.loads((dry_run / "cuda_paths.json").read_text())
    assert report["provenance"]["device"] == "cpu" and report["placement"]["ok"]
    regions = report["timed_regions"]
    assert regions["ok"] and regions["server loop, synthetic"]["timed_regions"] > 0
    assert set(report) >= {"synchronisation", "warm_up", "bf16", "cuda_graphs"}
    assert not any("error" in v for v in report.values() if isinstance(v, dict))


def test_the_profiles_carry_latency_grids_and_marked_check_rows(dry_run):
    from specsim.profiles import load_profile

    llava = load_profile(str(dry_run / "llava7b.json"))
    assert llava.latency.forward_costs().batched.batch_sizes == (1, 2)
    assert {(r.synthetic_acceptance, r.batch) for r in llava.checks} == {(IBED, None), (ZOO_TRACES, 2)}
    assert all(r.tau_measured == pytest.approx(r.tau_predicted) for r in llava.checks)
    llama = load_profile(str(dry_run / "llama8b.json"))
    assert llama.latency.forward_costs().batched.batch_sizes == (1, 2)
    assert {(r.synthetic_acceptance, r.batch) for r in llama.checks} == {(ZOO_TRACES, None), (IBED, 2)}
    zoo = load_profile(str(dry_run / "zoo.json"))
    assert {e.method for e in zoo.acceptance} == {"M", "T"}
    assert {r.scenario for r in zoo.checks} == {"zoo-1img", "zoo-2img", "zoo-5img"}
    assert all(r.synthetic_acceptance is None for r in zoo.checks)  # lossless: the zoo's real weights
    steps = json.loads((dry_run / "hf_steps.json").read_text())
    kinds = {(p["model"], p["mode"]) for p in steps["points"]}
    assert kinds == {("target", "hf-eager"), ("draft", "hf-eager")}
    session = json.loads((dry_run / "session.json").read_text())
    zoo_steps = next(s for s in session["stages"] if s["stage"] == "zoo")["steps"]
    versus = next(step for step in zoo_steps if step["step"] == "engine vs HF")
    assert set(versus["result"]) == {"target", "2"}


def test_failures_overruns_and_no_time_left_are_recorded(tmp_path):
    py = sys.executable
    stages = [
        ("fails", 30, [py, "-c", "raise SystemExit(3)"]),
        ("overruns", 1.5, [py, "-c", "import time; time.sleep(60)"]),
        ("runs", 30, [py, "-c", "print('after the others')"]),
    ]
    session = run_session(Plan(), tmp_path / "out", tmp_path / "work", total_s=60, stages=stages)
    assert [(s["stage"], s["status"], s["rc"]) for s in session["stages"]] == [
        ("fails", "failed", 3), ("overruns", "timeout", -9), ("runs", "ok", 0)
    ]  # fmt: skip
    assert session["stages"][1]["seconds"] < 10  # killed at its budget
    assert "after the others" in (tmp_path / "out" / "log.txt").read_text()
    late = run_session(Plan(), tmp_path / "out2", tmp_path / "work2", total_s=9, stages=stages[1:])
    assert [s["status"] for s in late["stages"]] == ["timeout", "skipped"]
    assert json.loads((tmp_path / "out2" / "session.json").read_text())["stages"][1]["why"].endswith("of 9")


def test_install_puts_the_tree_and_its_entry_points_on_the_path(tmp_path):
    env = install(tmp_path)
    code = "import specsim, calibrate; print(specsim.__file__); print(calibrate.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert all(line.startswith(str(ROOT)) for line in proc.stdout.split()), proc.stdout + proc.stderr
    points = (next((tmp_path / "site").glob("*.dist-info")) / "entry_points.txt").read_text()
    assert "check = calibrate.cli.cmd_check:register" in points


def test_only_refuses_an_unknown_stage_before_anything_runs(tmp_path):
    script = [sys.executable, str(ROOT / "bench" / "gpu_session.py"), "--out", str(tmp_path / "out")]
    bad = subprocess.run([*script, "--only", "zoo,llava9b"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown stage llava9b" in bad.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_cuda_paths_saves_the_report_after_every_check():
    from bench.gpu_session_checks import cuda_paths

    saved = []
    record = cuda_paths("cpu", "float32", {"provenance": {"device": "cpu"}}, lambda r: saved.append(set(r)))
    checks = ["placement", "timed_regions", "synchronisation", "warm_up", "bf16", "cuda_graphs"]
    assert len(saved) == len(checks)  # a stage killed at its budget keeps the checks it finished
    assert all(saved[i] >= {"provenance", *checks[: i + 1]} for i in range(len(checks)))
    assert all(record[c]["check_s"] >= 0 for c in checks)
