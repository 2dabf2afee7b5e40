"""Shared fixtures: small synthetic profiles built from the dataclasses."""

import pytest
from hypothesis import settings

from specsim.profile_format import Curve, LatencySection, MethodAcceptance, Profile, Provenance

# A busy host can run one example past hypothesis's 200 ms deadline: no unit test asserts time (bench/ does).
settings.register_profile("busy_host", deadline=None)
settings.load_profile("busy_host")


def make_profile(**overrides) -> Profile:
    """A measured-looking profile: Tp=10 ms, Tq=1 ms, Tv(γ)=10+2γ ms, two methods, one scenario."""
    latency = LatencySection(
        target_decode_ms_by_context=Curve((128.0, 1024.0), (10.0, 12.0)),
        draft_decode_ms_by_context=Curve((128.0, 1024.0), (1.0, 1.2)),
        target_verify_ms_by_gamma=Curve(
            tuple(float(g) for g in range(1, 9)), tuple(10.0 + 2.0 * g for g in range(1, 9))
        ),
        verify_context_tokens=128,
        target_prefill_ms_by_tokens=Curve((16.0, 1024.0), (20.0, 400.0)),
        draft_prefill_ms_by_tokens=Curve((16.0, 1024.0), (2.0, 40.0)),
        draft_decode_ms_by_batch=Curve((1.0, 2.0, 4.0), (1.0, 1.1, 1.3)),
        vision_encoder_ms_per_image=30.0,
        draft_vision_encoder_ms_per_image=30.0,
        captioner_ms_per_image=15.0,
    )
    kwargs = dict(
        name="synthetic",
        provenance=Provenance(
            target="t",
            draft="d",
            device="test",
            dtype="float32",
            date="2026-01-01",
            source="measured",
            software={"numpy": "x"},
            weights="random",
            threads=2,
        ),
        latency=latency,
        acceptance=(
            MethodAcceptance(
                method="M",
                scenario="one",
                images_per_prompt=1,
                gamma=4,
                tau=2.5,
                accepted_histogram=(1, 1, 1, 1, 0),
                target_prompt_tokens=600,
                draft_prompt_tokens=600,
                uses_draft_vision=True,
            ),
            MethodAcceptance(
                method="MT",
                scenario="one",
                images_per_prompt=1,
                gamma=4,
                tau=2.8,
                draft_batch_size=2,
                weights=(1.0, 1.0),
                target_prompt_tokens=600,
                draft_prompt_tokens=600,
                uses_draft_vision=True,
                captions_per_prompt=0,
            ),
        ),
    )
    kwargs.update(overrides)
    return Profile(**kwargs)


@pytest.fixture
def profile() -> Profile:
    return make_profile()


@pytest.fixture
def one_thread():
    """Tiny models on a shared CPU: one intra-op thread avoids OpenMP spin contention."""
    import torch  # only the calibrate tests ask for this fixture; specsim tests stay torch-free

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_notebook(path, workdir, timeout: int = 300) -> tuple[str, int]:
    """Execute a notebook in ``workdir``; returns (all text outputs joined, number of PNG outputs)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    return text, sum("image/png" in o.get("data", {}) for o in outputs)


def json_close(got, want, rel: float = 1e-5, abs_: float = 1e-7) -> bool:
    """JSON values equal: floats to ``rel`` relative or ``abs_`` absolute (fitted figures move in their last
    digits with numpy/scipy versions), keys, strings, integers and lengths exactly."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return got == pytest.approx(want, rel=rel, abs=abs_)
    if isinstance(want, dict):
        same_keys = isinstance(got, dict) and got.keys() == want.keys()
        return same_keys and all(json_close(got[k], want[k], rel, abs_) for k in want)
    if isinstance(want, list):
        same_len = isinstance(got, list) and len(got) == len(want)
        return same_len and all(json_close(g, w, rel, abs_) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def committed_output(path) -> str:
    """The text the committed notebook at ``path`` printed (its code cells' stream outputs, in order)."""
    import json
    from pathlib import Path

    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", []))
