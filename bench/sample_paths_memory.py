"""Benchmark: peak resident memory of ``specsim calibrate acceptance --sample-paths K`` on the reference pair.

Runs the command in a child process per variant and prints the child's peak resident set
(``os.wait4``'s ``ru_maxrss``, the figure ``/usr/bin/time -v`` prints) and its peak after the models loaded
(Linux: VmHWM, reset once the models are in memory), which is what the traces and paths add to the weights:

- ``paths 0``: the same run without sampled paths (what the weights and the greedy traces take);
- ``old``: the sampled-path code before issue 37 (kept below: a full softmax [N, V] per path and model);
- ``new``: the code as it is (only p_t(y_t) and q_t(y_t) per position, softmax 16 positions at a time).

    python bench/sample_paths_memory.py                        # new only, 8 paths, 1 prompt x 32 tokens
    python bench/sample_paths_memory.py --variant zero --variant old --variant new

The reference pair loads in float32 by default (about 8.2 GB of weights), which bounds the peak from below
whatever the paths cost; ``--dtype bfloat16`` halves that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.script_main import ScriptParser, run_main  # noqa: E402
from specsim.bounds import number_arg  # noqa: E402


def parse_args(argv=None):
    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", action="append", choices=["zero", "old", "new"], default=None)
    paths, size = number_arg("size", integer=True, zero_ok=True), number_arg("size", integer=True)
    p.add_argument("--paths", type=paths, default=8, help="--sample-paths (default 8)")
    p.add_argument("--limit", type=size, default=1, help="first N prompts of the reference set (default 1)")
    p.add_argument("--max-new-tokens", type=number_arg("output_tokens", integer=True), default=32)
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=2)
    p.add_argument("--dtype", default="float32")
    return p.parse_args(argv)


def command(args, paths: int, out: Path) -> list[str]:
    """The ``specsim`` arguments of one run."""
    return [
        "calibrate",
        "acceptance",
        "--preset",
        "qwen2.5-coder-0.5b-1.5b",
        "--prompts",
        "reference",
        "--limit",
        str(args.limit),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--temperature",
        "1",
        "--sample-paths",
        str(paths),
        "--threads",
        str(args.threads),
        "--dtype",
        args.dtype,
        "--no-progress",
        "--restart",
        "--out",
        str(out),
    ]


def run_child(variant: str, argv: list[str], report: Path) -> tuple[int, float, float, float]:
    """(exit status, peak resident GB of the whole run, of the run after loading, seconds) of one child."""
    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", variant, str(report), *argv]
    child = subprocess.Popen(cmd, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    after_load = float(report.read_text()) if report.is_file() else float("nan")
    return child.returncode, usage.ru_maxrss * 1024 / 1e9, after_load, time.perf_counter() - t0  # KiB


# --------------------------------------------------------------------------- the code before issue 37
def _old_target_paths(
    target, request, *, paths, temperature, seed=0, max_new_tokens, eos_token_id=None, device="cpu"
):
    """``target_paths`` before: a full softmax [N, V] per path (then gathered)."""
    import torch

    from calibrate.measure import acceptance_traces as A
    from calibrate.run.engine import target_decode, unwrap

    out = []
    for k in range(paths):
        gen = torch.Generator(device=str(unwrap(target).device)).manual_seed(
            A.path_seed(seed, request.prompt_id, k)
        )
        run = target_decode(
            target,
            request,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            generator=gen,
            eos_token_id=eos_token_id,
            device=device,
        )
        y = torch.tensor(run.tokens, dtype=torch.long, device=request.input_ids.device)
        logits = A.next_token_logits(
            target, torch.cat([request.input_ids[0], y[:-1]])[None], y.numel(), **request.target_kwargs
        )
        p = torch.softmax(logits.cpu() / temperature, -1).gather(1, y.cpu()[:, None])[:, 0]
        out.append(A.TargetPath(tokens=run.tokens, p_token=p))
    return tuple(out)


def _old_acceptance_trace(
    target,
    draft,
    request,
    *,
    max_new_tokens,
    eos_token_id=None,
    temperature=1.0,
    draft_input_ids=None,
    device="cpu",
    top_k=0,
    paths=(),
):
    """``acceptance_trace`` before: the greedy logits kept and a full softmax q [N, V] per path."""
    from dataclasses import replace

    import torch

    from calibrate.measure import acceptance_traces as A

    ref = A.target_reference(
        target, request, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, device=device
    )
    y = torch.tensor(ref.tokens, dtype=torch.long, device=request.input_ids.device)
    draft_prompt = request.input_ids if draft_input_ids is None else draft_input_ids
    drf = A.next_token_logits(draft, torch.cat([draft_prompt[0], y[:-1]])[None], y.numel())
    trace = A.trace_from_logits(ref.logits, drf.cpu(), y.cpu(), temperature, request.prompt_id, top_k=top_k)
    for path in paths:
        ctx = torch.tensor(path.tokens[:-1], dtype=torch.long, device=draft_prompt.device)
        q = torch.softmax(
            A.next_token_logits(draft, torch.cat([draft_prompt[0], ctx])[None], len(path.tokens)).cpu()
            / temperature,
            -1,
        )  # [N, V]
        qy = q.gather(1, torch.tensor(path.tokens, dtype=torch.long)[:, None])[:, 0]
        trace = replace(trace, accept_paths=(trace.accept_paths or ()) + (A.accept_path(path, qy),))
    return A.PromptTrace(
        trace=trace,
        output_tokens=ref.tokens,
        prompt_tokens=request.input_ids.shape[1],
        draft_prompt_tokens=draft_prompt.shape[1],
    )


def child(variant: str, argv: list[str], report: Path) -> int:
    """Runs ``specsim`` once; writes to ``report`` the peak resident GB after the models loaded (Linux: the
    high-water mark VmHWM is reset through /proc/self/clear_refs once ``load_setup`` returns)."""
    sys.path.insert(0, str(ROOT))
    from calibrate.workload import run_setup

    if variant == "old":
        from calibrate.measure import acceptance_traces as A

        A.target_paths, A.acceptance_trace = _old_target_paths, _old_acceptance_trace
    load = run_setup.load_setup

    def load_then_reset(*a, **k):
        setup = load(*a, **k)
        Path("/proc/self/clear_refs").write_text("5")
        return setup

    run_setup.load_setup = load_then_reset
    from specsim.cli.main import main

    code = main(argv)
    status = Path("/proc/self/status").read_text()
    hwm_kb = int(status.split("VmHWM:")[1].split()[0])
    report.write_text(f"{hwm_kb * 1024 / 1e9:.3f}")
    return code


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # --child VARIANT REPORT, then the specsim arguments as they are
        return child(argv[1], argv[3:], Path(argv[2]))
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variant or ["new"]:
            paths = 0 if variant == "zero" else args.paths
            argv = command(args, paths, Path(tmp) / f"{variant}.json")
            print(f"$ specsim {' '.join(argv)}   [{variant}]", file=sys.stderr, flush=True)
            report = Path(tmp) / f"{variant}.hwm"
            code, peak_gb, after_gb, seconds = run_child(
                "new" if variant == "zero" else variant, argv, report
            )
            rows.append((variant, paths, code, peak_gb, after_gb, seconds))
        same = _same_paths(Path(tmp) / "old.json", Path(tmp) / "new.json")
    print(
        f"reference pair, {args.limit} prompt(s) x {args.max_new_tokens} new tokens, {args.dtype}, "
        f"{args.threads} threads"
    )
    print(f"{'variant':<8} {'paths':>5} {'exit':>4} {'peak RSS GB':>11} {'after load GB':>13} {'seconds':>8}")
    for variant, paths, code, peak_gb, after_gb, seconds in rows:
        print(f"{variant:<8} {paths:>5} {code:>4} {peak_gb:>11.2f} {after_gb:>13.2f} {seconds:>8.0f}")
    if same is not None:
        print(f"accept_paths of old and new equal: {same}")
    return max(r[2] for r in rows)


def _same_paths(old: Path, new: Path) -> bool | None:
    """Whether both runs stored the same ``accept_paths`` (None unless both ran)."""
    if not (old.is_file() and new.is_file()):
        return None
    from specsim.profiles import load_profile

    paths = [[t.accept_paths for e in load_profile(str(f)).acceptance for t in e.traces] for f in (old, new)]
    return paths[0] == paths[1]


if __name__ == "__main__":
    sys.exit(run_main(main))
