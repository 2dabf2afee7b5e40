"""One prepared GPU session: calibrate's CUDA paths, latency, synthetic-acceptance checks, the zoo and HF
steps on one lent GPU (H100/H200) in 9.5 minutes (``--total-s``), in stages, most valuable first (issue 54).

    python bench/gpu_session.py --out "$OUT" [--only llava7b,zoo --rounds 3]   # on the device machine
    python bench/gpu_session.py --dry-run --out /tmp/session  # the same path on the CPU, tiny configs

Installed without pip or network (a ``specsim_mllm`` dist-info with pyproject.toml's entry points on
PYTHONPATH). Each stage runs in its own process under its budget, cut to what is left of ``--total-s``; a
failing or overrunning stage is recorded and the next runs; after each, its results go to ``--out`` (7 files):
session.json (environment, per stage its steps, status, seconds, errors), log.txt, a JSON per stage.
Stages: cuda_paths (``bench/gpu_session_checks.py``); llava7b (LLaVA-1.5-7B/68M, random bf16 weights: latency
at B 1, ``check --synthetic-acceptance`` on IbED's τ); hf_steps (``bench/gpu_step_kernels.py --modes hf``);
zoo (real weights: latency, acceptance, check, ``bench/engine_vs_hf.py``); llava7b_batch (B 1..64, a batched
check); llama8b (Llama-3.1-8B, Llama-3.2-1B, ``bench/configs/``: the same four steps).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.* (as a stage imports them), specsim
from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "bench" / "configs"
IBED = "tau:ibed-llava1.5-7b-68m:M/ChartQA"
ZOO_TRACES = "traces:zoo-cpu:M/zoo-1img"
MIN_STAGE_S = 8.0
COMMANDS: list[str] = []  # the commands a stage process ran, for its steps' records
DEADLINE = [float("inf")]  # perf_counter at which a stage process is killed (set by --stage-budget-s)


@dataclass(frozen=True)
class Plan:
    """What each stage runs: device, dtype, model specs, sizes (GPU values; :func:`dry_plan` shrinks them)."""

    device: str = "cuda"
    dtype: str = "bfloat16"
    llava: tuple[str, str] = ("llava-1.5-7b", "llava-1.5-68m")
    llama: tuple[str, str] = (str(CONFIGS / "llama-3.1-8b.json"), str(CONFIGS / "llama-3.2-1b.json"))
    new_tokens: int = 32
    prompts: int = 3  # reference prompts of a batch-1 check
    gammas: str = "1,3,5"
    latency_gammas: str = "1,2,3,4,5"
    repeats: tuple[int, int, int] = (1, 3, 5)  # latency --warmup, --min-repeats, --max-repeats
    rounds: int = 2
    grid_batches: str = "1,4,16,64"
    check_batches: str = "4,16"
    batch_prompts: int = 16
    zoo_prompts: int = 6  # the zoo set alternates 1, 2 and 5 images
    zoo_gammas: str = "1,2,3,4,5"
    hf_gammas: str = "1,3,5"  # bench/engine_vs_hf.py
    hf_steps: tuple[str, ...] = ("--contexts", "1024", "--batches", "1,2,4,8,16,32", "--hf-rows",
                                 "1,2,3,4,5,6,7,8,9", "--draft-rows", "1,2,3,4,5,6,7,8,9")  # fmt: skip
    # seconds per stage in the order run (a stage's unfinished work is lost): what the 2026-11-30 H200 session
    # left undone first, sized by its timings (bench/results/gpu-session-h200-2026-11-30/)
    budgets_s: tuple[tuple[str, float], ...] = (
        ("cuda_paths", 35), ("zoo", 120), ("llava7b", 75), ("llava7b_batch", 110), ("llama8b", 170),
        ("hf_steps", 60),  # the last stage: whatever is left
    )  # fmt: skip


def dry_plan(work: Path) -> Plan:
    """The same stages on the CPU: tiny copies of the four architectures, small grids."""
    tiny = {}
    for name, src in (("llava-7b", "specsim/presets/llava-1.5-7b.json"),
                      ("llava-68m", "specsim/presets/llava-1.5-68m.json"),
                      ("llama-8b", "bench/configs/llama-3.1-8b.json"),
                      ("llama-1b", "bench/configs/llama-3.2-1b.json")):  # fmt: skip
        tiny[name] = work / f"tiny-{name}.json"
        tiny[name].write_text(json.dumps(shrunk(json.loads((ROOT / src).read_text()))))
    return Plan(
        device="cpu", llava=(str(tiny["llava-7b"]), str(tiny["llava-68m"])),
        llama=(str(tiny["llama-8b"]), str(tiny["llama-1b"])), new_tokens=8, prompts=2, gammas="1,3",
        latency_gammas="1,3", repeats=(0, 2, 2), rounds=1, grid_batches="1,2", check_batches="2",
        batch_prompts=2, zoo_prompts=3, zoo_gammas="1,2", hf_gammas="2",
        hf_steps=("--tiny", "--device", "cpu", "--contexts", "32", "--batches", "1,2", "--hf-rows", "1,2"),
        budgets_s=tuple((name, 120.0) for name, _ in Plan().budgets_s),
    )  # fmt: skip


def shrunk(config: dict) -> dict:
    """A tiny model of ``config``'s architecture (vocabulary, special ids and image tokens kept)."""
    small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip
    text = {k: small.get(k, v) for k, v in config.get("text_config", config).items()}
    if "text_config" not in config:
        return text
    vision = dict(config["vision_config"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, projection_dim=32)  # fmt: skip
    return dict(config, text_config=text, vision_config=vision, vision_feature_layer=-1)


# --------------------------------------------------------------------------- stages (in their own process)
def _cli(*argv: str) -> int:
    """One ``specsim`` command in this process; its exit status."""
    from specsim.cli.main import main

    print("$ specsim " + " ".join(argv), flush=True)
    COMMANDS.append("specsim " + " ".join(argv))
    return main(list(argv))


def _models(plan: Plan, pair: tuple[str, str], *, check: bool) -> list[str]:
    """Model flags of a random-weight pair: ``check`` takes --target/--draft, ``latency`` the configs."""
    flags = ["--target", pair[0], "--draft", pair[1], "--random-weights"] if check else [
        "--target-config", pair[0], "--draft-config", pair[1]]  # fmt: skip
    return flags + ["--device", plan.device, "--dtype", plan.dtype]


def _latency(plan: Plan, pair, out: Path, *extra: str) -> int:
    """``calibrate latency`` of a random-weight pair, sized to the reference prompts."""
    sizes = ["--prompts", "reference", "--max-new-tokens", str(plan.new_tokens)]
    if "--batched-only" not in extra:  # the batch-1 grid's options, which --batched-only refuses
        sizes += ["--batch-sizes", "1", "--gammas", plan.latency_gammas, *_repeats(plan)]
    return _cli("calibrate", "latency", *_models(plan, pair, check=False), *sizes, "--quiet", "--no-resume",
                "--out", str(out), *extra)  # fmt: skip


def _check(plan: Plan, pair, profile: Path, schedule: str, *extra: str) -> int:
    """``specsim check --synthetic-acceptance`` of a random-weight pair on the reference prompts."""
    run = ["--prompts", "reference", "--max-new-tokens", str(plan.new_tokens), *_rounds(plan)]
    return _cli("check", *_models(plan, pair, check=True), "--profile", str(profile), *run,
                "--synthetic-acceptance", schedule, "--no-progress", "--json", *extra)  # fmt: skip


def _repeats(plan: Plan) -> list[str]:
    warm, lo, hi = plan.repeats
    return ["--warmup", str(warm), "--min-repeats", str(lo), "--max-repeats", str(hi)]


def _rounds(plan: Plan) -> list[str]:
    """Check rounds, and no new round after half the stage's time left (a round started is finished)."""
    half_left_s = min(max((DEADLINE[0] - time.perf_counter()) / 2, 3.0), 3600.0)
    rounds = ["--min-rounds", str(plan.rounds), "--max-rounds", str(plan.rounds)]
    return [*rounds, "--max-minutes", f"{half_left_s / 60:.3f}"]


def _zoo_steps(plan: Plan, zoo: Path, work: Path) -> list:
    """The committed zoo pair: latency, acceptance (M, T), check at γ 1..5, engine vs HF."""
    dev, new = ["--device", plan.device, "--dtype", plan.dtype], ["--max-new-tokens", str(plan.new_tokens)]
    sizes = ["--gammas", plan.zoo_gammas, "--batch-sizes", "1,2", *_repeats(plan), *new]
    run = ["--preset", "zoo", *dev, "--limit", str(plan.zoo_prompts), *new]
    methods = ["--method", "M", "--method", "T", "--no-progress"]
    return [
        ("latency", lambda: _cli("calibrate", "latency", "--preset", "zoo", *dev, *sizes, "--caption-tokens",
                                 "10", "--quiet", "--no-resume", "--out", str(zoo))),
        ("acceptance", lambda: _cli("calibrate", "acceptance", *run, *methods, "--out", str(zoo))),
        ("check", lambda: _cli("check", *run, *methods, "--profile", str(zoo), "--gamma", plan.zoo_gammas,
                               *_rounds(plan), "--json")),
        ("engine vs HF", lambda: _engine_vs_hf(plan, work / "engine_vs_hf.json")),
    ]  # fmt: skip


def _stage_steps(plan: Plan, work: Path, name: str) -> list[tuple[str, object]]:
    """(step name, call) of one stage; each call returns an exit status or a dict of results."""
    llava, llama = work / "llava7b.json", work / "llama8b.json"
    batched = ["--batched-only", "--request-batches", plan.grid_batches, "--request-prompt-lengths", "2"]
    batched += ["--request-gammas", "3", "--request-rounds", "1", "--request-new-tokens", "16"]
    batched.append("--no-server-loop")
    b1 = ["--gamma", plan.gammas, "--limit", str(plan.prompts)]
    steps = {
        "cuda_paths": [("checks", lambda: _write(work / "cuda_paths.json", _cuda_paths(plan, work)))],
        "llava7b": [
            ("latency", lambda: _latency(plan, plan.llava, llava)),
            ("check B=1", lambda: _check(plan, plan.llava, llava, IBED, *b1)),
        ],
        "hf_steps": [("hf steps", lambda: _hf_steps(plan, work / "hf_steps.json"))],
        "zoo": _zoo_steps(plan, work / "zoo.json", work),
        "llava7b_batch": [
            ("batched grid", lambda: _latency(plan, plan.llava, llava, *batched)),
            ("check batch", lambda: _check(plan, plan.llava, llava, ZOO_TRACES, "--gamma", "3", "--batch",
                                           plan.check_batches, "--limit", str(plan.batch_prompts))),
        ],  # fmt: skip
        "llama8b": [
            ("latency", lambda: _latency(plan, plan.llama, llama)),
            ("check B=1", lambda: _check(plan, plan.llama, llama, ZOO_TRACES, *b1)),
            ("batched grid", lambda: _latency(plan, plan.llama, llama, *batched)),
            ("check batch", lambda: _check(plan, plan.llama, llama, IBED, "--gamma", "3", "--batch",
                                           plan.check_batches, "--limit", str(plan.batch_prompts))),
        ],  # fmt: skip
    }
    return steps[name]


def _cuda_paths(plan: Plan, work: Path) -> dict:
    """The CUDA-path checks with the device's provenance (GPU, driver, CUDA, torch)."""
    import torch

    from bench.gpu_session_checks import cuda_paths
    from bench.gpu_step_kernels import provenance

    record = {"provenance": provenance(torch.device(plan.device), getattr(torch, plan.dtype))}
    return cuda_paths(plan.device, plan.dtype, record, lambda r: _write(work / "cuda_paths.json", r))


def _hf_steps(plan: Plan, out: Path) -> int:
    from bench.gpu_step_kernels import main

    return main(["--out", str(out), "--modes", "hf", "--dtype", plan.dtype, "--budget-s", "0.05",
                 "--min-repeats", "5", "--max-repeats", "40", *plan.hf_steps])  # fmt: skip


def _engine_vs_hf(plan: Plan, out: Path) -> dict:
    from bench.engine_vs_hf import main

    rc = main(["--preset", "zoo", "--device", plan.device, "--dtype", plan.dtype, "--gamma", plan.hf_gammas,
               "--repeats", str(plan.rounds), "--max-new-tokens", str(plan.new_tokens),
               "--out-json", str(out)])  # fmt: skip
    return {"rc": rc, "result": json.loads(out.read_text()) if out.is_file() else None}


def _write(path: Path, record: dict) -> dict:
    path.write_text(json.dumps(record, indent=1, default=str))
    return {"rc": 0, "wrote": path.name}


def run_stage(plan: Plan, work: Path, name: str) -> int:
    """Run one stage's steps in order, stopping at the first failure; each step's record goes to
    ``work/<name>.steps.json`` as it ends (the parent reads it even if this process is killed)."""
    records = []
    for step, call in _stage_steps(plan, work, name):
        t0, ran = time.perf_counter(), len(COMMANDS)
        try:
            result = call()
            record = result if isinstance(result, dict) else {"rc": int(result)}
        except BaseException as err:  # noqa: BLE001 - recorded; SystemExit from argparse too
            error = f"{type(err).__name__}: {err}"
            record = {"rc": 1, "error": error, "traceback": traceback.format_exc()[-2000:]}
        record["commands"] = COMMANDS[ran:]
        records.append({"step": step, "seconds": round(time.perf_counter() - t0, 2)} | record)
        (work / f"{name}.steps.json").write_text(json.dumps(records, indent=1, default=str))
        gc.collect()
        _empty_cache()
        if record.get("rc"):
            return 1
    return 0


def _empty_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- the session (parent process)
RESULTS = {"cuda_paths": "cuda_paths.json", "llava7b": "llava7b.json", "hf_steps": "hf_steps.json",
           "zoo": "zoo.json", "llava7b_batch": "llava7b.json", "llama8b": "llama8b.json"}  # fmt: skip


def install(work: Path) -> dict:
    """The project importable and its commands registered, without pip: PYTHONPATH = the tree and a folder
    holding a ``specsim_mllm`` dist-info with pyproject.toml's entry points. Returns the environment."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = work / "site" / f"specsim_mllm-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    (info / "METADATA").write_text(meta)
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
             for group, eps in project["entry-points"].items()]  # fmt: skip
    lines.append("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in project["scripts"].items()))
    (info / "entry_points.txt").write_text("\n".join(lines))
    path = os.pathsep.join([str(ROOT), str(work / "site"), os.environ.get("PYTHONPATH", "")])
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return dict(os.environ, PYTHONPATH=path.rstrip(os.pathsep), **offline)  # no network: never wait for one


def environment(work: Path) -> dict:
    """The interpreter, the libraries the commands import, and the commands the install registered (no torch
    import here: the GPU, driver and CUDA are in cuda_paths.json)."""
    from importlib import metadata as md

    info = {"python": sys.version.split()[0]}
    libraries = ("torch", "transformers", "numpy", "scipy", "pillow", "safetensors", "tokenizers")
    for name in (*libraries, "accelerate", "tqdm", "gguf"):
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    dists = md.distributions(path=[str(work / "site")])
    info["commands"] = [ep.name for d in dists for ep in d.entry_points if ep.group == "specsim.commands"]
    return info


def run_session(plan: Plan, out: Path, work: Path, total_s: float, stages=None, dry: bool = False) -> dict:
    """Every stage in order under its budget (cut to what is left of ``total_s``); results to ``out`` after
    each. ``stages``: (name, budget s, argv) to run instead of the plan's (tests)."""
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    env = install(work)
    session = {"plan": asdict(plan), "environment": environment(work), "stages": []}
    _save(out, session)
    todo = stages or [(name, budget, None) for name, budget in plan.budgets_s]
    for name, budget, argv in todo:
        left = total_s - (time.perf_counter() - t_start)
        argv = argv or _stage_argv(name, work, dry, min(budget, left), plan.rounds)
        record = {"stage": name, "budget_s": round(min(budget, max(left, 0)), 1)}
        if left < MIN_STAGE_S:
            why = f"{left:.0f} s left of {total_s:.0f}"
            session["stages"].append(record | {"status": "skipped", "why": why})
            _save(out, session)
            continue
        record |= _run_one(argv, min(budget, left), work / f"{name}.log", env)
        steps = work / f"{name}.steps.json"
        record["steps"] = json.loads(steps.read_text()) if steps.is_file() else []
        session["stages"].append(record)
        _collect(out, work, name)
        _save(out, session)
    session["seconds"] = round(time.perf_counter() - t_start, 1)
    _save(out, session)
    return session


def _stage_argv(name: str, work: Path, dry: bool, budget_s: float, rounds: int) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--work", str(work),
            "--stage-budget-s", f"{budget_s:.1f}", "--rounds", str(rounds),
            *(["--dry-run"] if dry else [])]  # fmt: skip


def _run_one(argv: list[str], budget_s: float, log: Path, env: dict) -> dict:
    """Run one stage process for at most ``budget_s``: status ok, failed (its exit status) or timeout."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=budget_s)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            rc, status = proc.wait(), "timeout"
    return {"status": status, "rc": rc, "seconds": round(time.perf_counter() - t0, 1)}


def _collect(out: Path, work: Path, name: str) -> None:
    """The stage's result file and its log (appended to log.txt) into ``out``."""
    result = work / RESULTS.get(name, "")
    if result.is_file():
        shutil.copyfile(result, out / result.name)
    log = work / f"{name}.log"
    with open(out / "log.txt", "a") as f:
        f.write(f"===== {name}\n" + (log.read_text(errors="replace")[-200_000:] if log.is_file() else ""))


def _save(out: Path, session: dict) -> None:
    (tmp := out / "session.json.tmp").write_text(json.dumps(session, indent=1, default=str))
    tmp.replace(out / "session.json")  # whole or not at all


def main(argv: list[str] | None = None) -> int:
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT"), help="results folder (default $OUT)")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--dry-run", action="store_true", help="the same stages on the CPU, tiny configs")
    seconds, rounds = number_arg("seconds"), number_arg("repeats", integer=True)
    p.add_argument("--total-s", type=seconds, default=570.0, help="the whole session's seconds (default 570)")
    names = [name for name, _ in Plan().budgets_s]
    p.add_argument("--only", default=None, help=f"stages to run, in this order (some of {','.join(names)})")
    p.add_argument("--rounds", type=rounds, default=None, help="check rounds (default: the plan's)")
    p.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # a stage's own process
    p.add_argument("--stage-budget-s", type=seconds, default=float("inf"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    wanted, budgets = (args.only or ",".join(names)).split(","), dict(Plan().budgets_s)
    if unknown := [n for n in wanted if n not in budgets]:
        p.error(f"--only: unknown stage {', '.join(unknown)}; expected some of {', '.join(names)}")
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu-session-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = dry_plan(work) if args.dry_run else Plan()
    budgets = tuple((n, dict(plan.budgets_s)[n]) for n in wanted)
    plan = replace(plan, rounds=args.rounds or plan.rounds, budgets_s=budgets)
    if args.stage:
        DEADLINE[0] = time.perf_counter() + args.stage_budget_s
        return run_stage(plan, work, args.stage)
    if not args.out:
        p.error("--out (or $OUT) is required")
    session = run_session(plan, Path(args.out), work, args.total_s, dry=args.dry_run)
    for s in session["stages"]:
        print(f"{s['stage']:14s} {s['status']:8s} {s.get('seconds', 0):6.1f} s")
    print(f"session: {session['seconds']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
