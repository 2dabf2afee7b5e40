"""llama.cpp's speculative decoding on the zoo pair's image requests: convert the pair, serve it, compare.

The zoo pair (a LLaVA target, a LLaVA draft, one CLIP image encoder each) goes through llama.cpp's own
converters: ``convert_hf_to_gguf.py`` for the two language models, and LLaVA-1.5's path for the target's
image encoder and projector (``tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py``, all encoder
layers the zoo reads; the ``--mmproj`` of ``convert_hf_to_gguf.py`` takes LLaVA configs of Pixtral and
Mistral only). llama-server then decodes every ``zoo`` prompt greedily with ``--mmproj``, target-only and
with the draft (``-md``, γ drafts per block). Per images-per-prompt group it prints the target tokens that
agree with our engine's (the ``zoo-cpu`` traces, up to the first difference) and τ: llama.cpp's, from its
draft counts, beside our engine's drafting replayed from the traces: zero rows (Z), multimodal (M) and
text-only (T). llama.cpp's draft cannot read the target's image embeddings (another width): it gets a zero
row at each image token (``common/speculative.cpp``, draft-simple), which is what Z feeds our draft.
Two shims, both printed: the zoo tokenizer is byte-level BPE with GPT-2's split pattern, which the converter
recognises by hashing token ids (so never for a new vocabulary), and the legacy converter reads
``CLIPVisionModel.vision_model``, which transformers 5 no longer has.

With ``--profile`` (a ``calibrate latency --engine llama.cpp`` profile of the converted pair) it then checks
wall-clock too: target-only and SD at every γ, interleaved in rounds (:mod:`calibrate.llama_cpp.check_runs`),
each (γ, image count) priced through :func:`specsim.check.engine_rows.engine_row` with τ from the Z, M and T
traces, and from llama.cpp's own counts (the costs alone).

    python bench/llama_cpp_zoo_images.py --llama-cpp BUILD/bin --source LLAMA_CPP_SOURCE [--out DIR]  # ~1 min
        [--gamma 1,2,3,4,5] [--profile ZOO_LLAMA_PROFILE --halfwidth 0.007 --max-minutes 20]     # +20 min
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench.script_main import ScriptParser, run_main  # noqa: E402
from calibrate.llama_cpp.binaries import find_llama_cpp  # noqa: E402
from calibrate.llama_cpp.check_runs import (  # noqa: E402
    CheckRuns,
    Setting,
    check_settings,
    label_gamma,
    llama_rows,
    run_llama_check,
)
from calibrate.llama_cpp.server import LlamaServer, ServerConfig, parse_completion  # noqa: E402
from calibrate.llama_cpp.traces import TracedPrompt  # noqa: E402
from calibrate.zoo import weights_dir  # noqa: E402
from specsim.bounds import interval_arg, number_arg  # noqa: E402
from specsim.errors import SpecsimError  # noqa: E402
from specsim.report import int_list_arg  # noqa: E402

PROMPTS = Path(__file__).resolve().parents[1] / "calibrate" / "prompts"
# where an image's tokens go: llama-server draws a random marker unless LLAMA_MEDIA_MARKER pins one
MARKER = "<__media__>"
PROFILE = "zoo-cpu"  # its acceptance traces: our engine's greedy tokens and matches on the zoo prompts
METHODS = ("Z", "M", "T")  # zero rows (llama.cpp's draft on image input), multimodal, text-only

GPT2_SPLIT = """
import sys, runpy
sys.path[:0] = [SRC, SRC + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [SRC + "/convert_hf_to_gguf.py", *ARGS]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
VISION_MODEL = """
import sys, runpy
sys.path[:0] = [SRC + "/gguf-py"]
import torch.nn as nn, transformers
load = transformers.CLIPVisionModel.from_pretrained
class Wrapped(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.vision_model, self.config = inner, inner.config
transformers.CLIPVisionModel.from_pretrained = classmethod(lambda cls, *a, **k: Wrapped(load(*a, **k)))
sys.argv = [SRC + "/tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py", *ARGS]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(shim: str, source: Path, args: list[str]) -> None:
    """One converter run through ``shim``; SpecsimError with its last line when it fails."""
    code = f"SRC = {str(source)!r}\nARGS = {args!r}\n" + shim
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SpecsimError(f"llama.cpp converter failed: {last}")


def split_vision(target: Path, out: Path) -> tuple[Path, Path]:
    """The target's CLIP encoder as a model folder and its projector as ``llava.projector`` (what LLaVA-1.5's
    surgery script writes)."""
    import torch
    from transformers import LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(target)
    clip = out / "clip"
    model.model.vision_tower.save_pretrained(clip)
    # the converter keeps the encoder layers up to the one LLaVA reads (default: all but the last)
    config = json.loads((clip / "config.json").read_text())
    config["vision_feature_layer"] = model.config.vision_feature_layer
    (clip / "config.json").write_text(json.dumps(config, indent=1))
    projector = out / "llava.projector"
    state = model.model.multi_modal_projector.state_dict()
    torch.save({f"multi_modal_projector.{k}": v for k, v in state.items()}, projector)
    return clip, projector


def convert_zoo(source: Path, out: Path) -> dict[str, Path]:
    """GGUF files of the zoo target, draft and the target's image encoder + projector."""
    files = {}
    for role in ("target", "draft"):
        files[role] = out / f"zoo-{role}.gguf"
        _run(GPT2_SPLIT, source, [str(weights_dir(role)), "--outfile", str(files[role]), "--outtype", "f32"])
    clip, projector = split_vision(weights_dir("target"), out)
    processor = json.loads((weights_dir("target") / "processor_config.json").read_text())["image_processor"]
    args = [
        "-m", str(clip), "--llava-projector", str(projector), "--clip-model-is-vision", "--use-f32",
        "--output-dir", str(out / "mmproj"),
        "--image-mean", *map(str, processor["image_mean"]), "--image-std", *map(str, processor["image_std"]),
    ]  # fmt: skip
    _run(VISION_MODEL, source, args)
    files["mmproj"] = out / "mmproj" / "mmproj-model-f32.gguf"
    return files


def zoo_requests(limit: int | None) -> list[dict]:
    """The ``zoo`` prompt set's requests: id, images, llama-server's prompt (markers, images as base64)."""
    out = []
    for line in (PROMPTS / "zoo.jsonl").read_text().splitlines()[:limit]:
        r = json.loads(line)
        data = [base64.b64encode((PROMPTS / i).read_bytes()).decode() for i in r["images"]]
        text = r["prompt"].replace("<image>", MARKER)
        out.append(
            {"id": r["id"], "images": len(data), "prompt": {"prompt_string": text, "multimodal_data": data}}
        )
    return out


def run(llama, config: ServerConfig, requests: list[dict], new_tokens: dict[str, int], log: Path) -> dict:
    """prompt id -> llama-server's greedy :class:`Completion` of that request (``new_tokens`` each)."""
    out = {}
    with LlamaServer(llama, config, log_path=str(log)) as server:
        for r in requests:
            out[r["id"]] = parse_completion(server.complete(r["prompt"], new_tokens[r["id"]]))
    return out


def compare(requests, target, runs: dict, profile) -> list[str]:
    """Per draft length γ (``runs``: γ -> llama.cpp's SD completions) and images-per-prompt group:
    llama.cpp's target tokens against our engine's (the traces'), and τ: llama.cpp's drafts after zero rows,
    against our engine's Z, M and T drafting replayed at γ (each with its signed error against llama.cpp's);
    then each method's median and largest |error| over the rows."""
    from specsim.acceptance.replay import replay_traces_tau

    head = f"{'gamma':>5} {'images':>6} {'prompts':>7} {'agreed tokens':>13} {'tau llama.cpp':>13}"
    lines, errors = [head + "".join(f" {'tau ' + k:>6} {'err':>6}" for k in METHODS)], []
    for gamma, sd in sorted(runs.items()):
        for n in sorted({r["images"] for r in requests}):
            ids = [r["id"] for r in requests if r["images"] == n]
            scenario = f"zoo-{n}img"
            traces = {
                m: [t for t in profile.one_entry(m, scenario).traces if t.prompt_id in ids] for m in METHODS
            }
            ours = {t.prompt_id: t.tokens for t in traces["M"]}
            same = sum(_agreed(target[i].tokens, ours[i]) for i in ids)
            total = sum(len(ours[i]) for i in ids)
            tau = sum(sd[i].predicted_n - 1 for i in ids) / sum(sd[i].decode_steps for i in ids)
            errors.append([replay_traces_tau(traces[k], gamma) / tau - 1 for k in METHODS])
            cells = "".join(f" {(1 + e) * tau:>6.2f} {e:>+6.1%}" for e in errors[-1])
            lines.append(f"{gamma:>5} {n:>6} {len(ids):>7} {same:>6}/{total:<6} {tau:>13.2f}{cells}")
    abs_err = np.abs(np.array(errors))
    lines += [
        f"{k}: median |err| {np.median(a):.1%}, max {a.max():.1%} over {len(a)} rows"
        for k, a in zip(METHODS, abs_err.T)
    ]
    return lines


def zoo_settings(files: dict, threads: int, gammas) -> list[Setting]:
    """The llama.cpp check's settings (target-only, then the draft at each γ) over the converted pair, each
    server with ``--mmproj``."""
    settings = check_settings(str(files["target"]), str(files["draft"]), threads, gammas, None)
    return [replace(s, config=replace(s.config, mmproj=str(files["mmproj"]))) for s in settings]


def check_wallclock(llama, settings, requests, lengths, args, out: Path) -> CheckRuns:
    """Every setting, every zoo request per round, interleaved, until each setting's decode-phase speedup is
    within ``--halfwidth`` (or the round or time limit)."""
    prompts = [TracedPrompt(r["id"], "") for r in requests]
    return run_llama_check(
        llama, settings, prompts, new_tokens={r["id"]: lengths[r["id"]] for r in requests},
        threads=args.threads, partial=out / "check.partial.json", halfwidth=args.halfwidth,
        min_rounds=args.min_rounds, max_rounds=args.max_rounds, max_seconds=60 * args.max_minutes,
        requests={r["id"]: r["prompt"] for r in requests}, niceness=args.renice,
    )  # fmt: skip


def wallclock_table(runs: CheckRuns, settings, requests, costs, profile) -> list[str]:
    """Per γ and image count: the measured decode-phase speedup (95 % half-width) and the predictions with
    τ from llama.cpp's counts, and from the Z, M and T traces (signed errors), then Z's summary."""
    by_group = {}  # images -> method -> the llama.cpp check's rows, one per SD setting
    for n in sorted({r["images"] for r in requests}):
        ids = {r["id"] for r in requests if r["images"] == n}
        sub = CheckRuns(
            {k: {p: v for p, v in d.items() if p in ids} for k, d in runs.runs.items()}, runs.rounds, 0
        )
        entries = {m: profile.one_entry(m, f"zoo-{n}img") for m in METHODS}
        by_group[n] = {m: llama_rows(costs, e, sub, settings, e.gamma) for m, e in entries.items()}
    head = f"{'gamma':>5} {'images':>6} {'measured':>8} {'hw':>5} {'counts':>6} {'err':>6}"
    lines, errors = [head + "".join(f" {k:>5} {'err':>6}" for k in METHODS)], []
    for i, s in enumerate(settings[1:]):
        for n, rows in by_group.items():
            z = rows["Z"][i]
            meas, counts = z.speedup_measured, z.speedup_predicted_counts
            cells = "".join(
                f" {r[i].speedup_predicted:>5.2f} {r[i].speedup_predicted / meas - 1:>+6.1%}"
                for r in rows.values()
            )
            line = f"{label_gamma(s.label):>5} {n:>6} {meas:>8.3f} {z.speedup_halfwidth:>5.1%} {counts:>6.3f}"
            line += f" {counts / meas - 1:>+6.1%}"
            lines.append(line + cells)
            errors.append((abs(z.speedup_predicted / meas - 1), abs(counts / meas - 1)))
    e = np.array(errors)
    lines.append(
        f"Z traces: median |err| {np.median(e[:, 0]):.1%}, max {e[:, 0].max():.1%}; counts: median "
        f"{np.median(e[:, 1]):.1%}, max {e[:, 1].max():.1%} over {len(e)} rows; {runs.rounds} rounds in "
        f"{runs.seconds / 60:.0f} min"
    )
    return lines


def _agreed(a, b) -> int:
    """How many tokens two greedy outputs share before they first differ."""
    n = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return int(n)


def _niceness(text: str) -> int:
    """An argparse ``type=``: a nice value, -20..19 (< 0: ahead of the host's other work)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -20 <= value <= 19:
        raise argparse.ArgumentTypeError(f"expected an integer in -20..19, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    from specsim.profiles import load_profile

    p = ScriptParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-cpp", required=True, help="folder of the llama-server binary")
    p.add_argument("--source", required=True, help="llama.cpp's source tree (its converters)")
    p.add_argument(
        "--out", default=None, help="folder for the GGUF files and logs (default: a temporary one)"
    )
    p.add_argument("--threads", type=number_arg("threads", integer=True), default=2)
    p.add_argument(
        "--gamma", type=int_list_arg("gamma"), default="3",
        help="drafts per block (--spec-draft-n-max), e.g. 1,2,3 or 1-5 (default 3)",
    )  # fmt: skip
    p.add_argument(
        "--limit",
        type=number_arg("size", integer=True),
        default=None,
        help="the first N zoo prompts (default: all 36)",
    )
    p.add_argument(
        "--profile", default=None, help="a llama.cpp latency profile of the converted pair: check wall-clock"
    )
    p.add_argument(
        "--halfwidth", default=0.02,
        type=interval_arg(0, 1, "a fraction in (0, 1)", lo_open=True, hi_open=True),
        help="stop when each setting's speedup over all prompts is within this 95%% half-width",
    )  # fmt: skip
    p.add_argument("--min-rounds", type=number_arg("repeats", integer=True), default=3)
    p.add_argument("--max-rounds", type=number_arg("repeats", integer=True), default=30)
    p.add_argument("--max-minutes", type=number_arg("minutes"), default=30.0)
    p.add_argument(
        "--renice", type=_niceness, default=0, help="niceness of the servers (< 0: ahead of the host)"
    )
    args = p.parse_args(argv)
    gammas = sorted(args.gamma)
    llama = find_llama_cpp(args.llama_cpp)
    out = Path(args.out or tempfile.mkdtemp(prefix="zoo-gguf-"))
    out.mkdir(parents=True, exist_ok=True)
    files = convert_zoo(Path(args.source), out)
    print("converted: " + ", ".join(f"{k} {v}" for k, v in files.items()))
    print("shims: zoo tokenizer named 'gpt-2' (its split pattern); CLIPVisionModel wrapped for .vision_model")
    os.environ["LLAMA_MEDIA_MARKER"] = MARKER  # the servers inherit it
    profile = load_profile(PROFILE)
    requests = zoo_requests(args.limit)
    lengths = {t.prompt_id: len(t.tokens) for a in profile.acceptance if a.method == "M" for t in a.traces}
    settings = zoo_settings(files, args.threads, gammas)
    plain = run(llama, settings[0].config, requests, lengths, out / "target.log")
    runs = {
        label_gamma(s.label): run(llama, s.config, requests, lengths, out / f"sd-{label_gamma(s.label)}.log")
        for s in settings[1:]
    }
    print(f"llama-server, the zoo pair with --mmproj, greedy ({PROFILE}'s traces: ours)")
    print("\n".join(compare(requests, plain, runs, profile)))
    log = (out / f"sd-{gammas[0]}.log").read_text(errors="replace")
    warned = [x for x in log.splitlines() if "zero rows" in x]
    print("llama.cpp: " + (warned[0].split(": ", 1)[-1] if warned else "no zero-row warning in the log"))
    if args.profile:
        costs = load_profile(args.profile)
        runs = check_wallclock(llama, settings, requests, lengths, args, out)
        print(f"wall-clock, decode phase ({args.profile}'s costs; tau from llama.cpp's counts, or replayed)")
        print("\n".join(wallclock_table(runs, settings, requests, costs, profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
