"""`specsim import vllm|sglang` on hostile metrics: each input below once crashed the import or printed a
wrong number; each must now be one `specsim: error:` line naming the bad value, exit 2, nothing written."""

import json
from pathlib import Path

from specsim.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "notebooks" / "data" / "engines"
SCRAPE_1, SCRAPE_2 = DATA / "vllm_scrape_1.prom", DATA / "vllm_scrape_2.prom"
RESPONSES = DATA / "sglang_responses.jsonl"
MODEL = 'model_name="llava-hf/llava-1.5-7b-hf"'
DRAFTS_2 = f'vllm:spec_decode_num_drafts_total{{engine="0",{MODEL}}} 4200.0'


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _fails(capsys, argv: list[str], out: Path, *fragments: str) -> str:
    """Run the CLI: exit 2, one `specsim: error:` line holding every fragment, no NaN, no file at ``out``."""
    code = main(argv + ["--method", "M", "--scenario", "s", "--out", str(out)])
    captured = capsys.readouterr()
    err = captured.err
    assert code == 2, (code, captured.out, err)
    assert err.startswith("specsim: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "nan" not in err.lower().split()
    for fragment in fragments:
        assert fragment in err, err
    assert not out.exists()
    return err


# 1. a per-position label far beyond any draft length: used to allocate positions 0..label until MemoryError


def test_huge_position_label_is_refused_without_allocating(tmp_path, capsys):
    out = tmp_path / "never.json"
    text = SCRAPE_2.read_text().replace('position="4"}', 'position="99999999999"}')
    bad = _write(tmp_path, "huge_pos.prom", text)
    _fails(capsys, ["import", "vllm", str(bad)], out, "99999999999", "0..1023")


def test_position_beyond_cap_in_get_metrics_json_is_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    per_pos = [1] * 2000  # a Vector of 2000 positions: longer than any draft specsim accepts (gamma <= 1024)
    data = [
        {"name": "vllm:spec_decode_num_drafts", "labels": {}, "value": 1},
        {"name": "vllm:spec_decode_num_draft_tokens", "labels": {}, "value": 2000},
        {"name": "vllm:spec_decode_num_accepted_tokens", "labels": {}, "value": 2000},
        {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {}, "values": per_pos},
    ]
    bad = _write(tmp_path, "long.json", json.dumps(data))
    _fails(capsys, ["import", "vllm", str(bad)], out, "'1024'", "0..1023")


def test_non_canonical_position_label_is_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    for label in ("03", "\u0663"):  # a leading zero; an Arabic-Indic digit three (str.isdigit is true)
        text = SCRAPE_2.read_text().replace('position="3"}', f'position="{label}"}}')
        bad = _write(tmp_path, "odd_pos.prom", text)
        _fails(capsys, ["import", "vllm", str(bad)], out, repr(label), "0..1023")


# 2. duplicate series (same name, same labels) used to be summed: tau(5) printed 2.137 instead of 3.27


def test_duplicate_series_is_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    text = SCRAPE_2.read_text()
    assert DRAFTS_2 in text
    doubled = _write(tmp_path, "dup.prom", text.replace(DRAFTS_2, DRAFTS_2 + "\n" + DRAFTS_2))
    _fails(
        capsys,
        ["import", "vllm", str(doubled)],
        out,
        "duplicate series",
        f'vllm:spec_decode_num_drafts{{engine="0",{MODEL}}}',
    )
    # the same counter once with its _total suffix and once without is the same series twice
    bare = DRAFTS_2.replace("_total", "")
    both = _write(tmp_path, "dup_bare.prom", text.replace(DRAFTS_2, DRAFTS_2 + "\n" + bare))
    _fails(capsys, ["import", "vllm", str(both)], out, "duplicate series", "vllm:spec_decode_num_drafts{")
    # a per-position sample repeated
    line = next(ln for ln in text.splitlines() if 'position="2"} ' in ln and "_total" in ln)
    pos = _write(tmp_path, "dup_pos.prom", text.replace(line, line + "\n" + line))
    _fails(capsys, ["import", "vllm", str(pos)], out, "duplicate series", 'position="2"')


def test_duplicate_series_in_get_metrics_json_is_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    data = json.loads((DATA / "vllm_get_metrics.json").read_text())
    first = next(m for m in data if m["name"] == "vllm:spec_decode_num_drafts")
    bad = _write(tmp_path, "dup.json", json.dumps(data + [first]))
    _fails(capsys, ["import", "vllm", str(bad)], out, "duplicate series", "vllm:spec_decode_num_drafts{")


def test_duplicate_sglang_gauge_is_refused(tmp_path, capsys):
    """The gauge twice (labels in another order; the same or another value) was imported as one sample, or
    reported as several schedulers: it is a duplicate series, as vLLM's counters are (found by
    tests/test_fuzz_io.py)."""
    out = tmp_path / "never.json"
    text = (DATA / "sglang_metrics.prom").read_text()
    line = next(x for x in text.splitlines() if x.startswith("sglang:spec_accept_length{"))
    name, rest = line.split("{", 1)
    labels, value = rest.rsplit("}", 1)
    for again in (value, " 2.5"):
        copy = name + "{" + ",".join(reversed(labels.split(","))) + "}" + again
        bad = _write(tmp_path, "twice.prom", text.replace(line, line + "\n" + copy))
        argv = ["import", "sglang", str(bad), "--num-steps", "3"]
        _fails(capsys, argv, out, "duplicate series", "sglang:spec_accept_length{")


def test_distinct_engines_are_still_summed(tmp_path, capsys):
    # data-parallel engines differ in their `engine` label: not duplicates
    out = tmp_path / "ok.json"
    argv = ["import", "vllm", str(DATA / "vllm_two_models.prom"), "--model", "qwen-vl", "--json"]
    assert main(argv + ["--method", "M", "--scenario", "s", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["accepted_histogram"] == [33, 24, 43]


# 3. SGLang responses whose numbers cannot come from one request used to be folded into the total


def _responses(tmp_path: Path, extra: dict) -> Path:
    line = json.dumps({"text": "x", "meta_info": {"id": "bad-req", **extra}})
    return _write(tmp_path, "responses.jsonl", RESPONSES.read_text() + line + "\n")


def test_sglang_tokens_without_verify_steps_are_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    bad = _responses(tmp_path, {"completion_tokens": 14, "spec_verify_ct": 0})
    err = _fails(
        capsys,
        ["import", "sglang", str(bad), "--num-steps", "3"],
        out,
        "line 4",
        "'bad-req'",
        "completion_tokens = 14",
        "spec_verify_ct = 0",
    )
    assert "at most 1" in err


def test_sglang_fewer_tokens_than_verify_steps_are_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    bad = _responses(tmp_path, {"completion_tokens": 5, "spec_verify_ct": 5})  # 5 steps need 1 + 5
    _fails(
        capsys,
        ["import", "sglang", str(bad), "--num-steps", "3"],
        out,
        "line 4",
        "'bad-req'",
        "completion_tokens = 5",
        "spec_verify_ct = 5",
    )


def test_sglang_more_tokens_than_the_draft_length_allows_are_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    # 5 verify steps at --num-steps 3 emit at most (3 + 1) x 5 tokens, + 1 from the prefill = 21
    bad = _responses(tmp_path, {"completion_tokens": 22, "spec_verify_ct": 5})
    _fails(capsys, ["import", "sglang", str(bad), "--num-steps", "3"], out, "completion_tokens = 22", "21")
    good = _responses(tmp_path, {"completion_tokens": 21, "spec_verify_ct": 5})
    argv = ["import", "sglang", str(good), "--num-steps", "3", "--json"]
    assert main(argv + ["--method", "M", "--scenario", "s", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["facts"][0].startswith("SGLang responses: 4 requests")


# 4. a scrape pair where drafts moved but no draft token did: "acceptance rate nan", exit 0


def test_drafts_without_draft_tokens_is_an_error_not_nan(tmp_path, capsys):
    out = tmp_path / "never.json"
    s1 = SCRAPE_1.read_text()
    later = s1.replace(
        f'vllm:spec_decode_num_drafts_total{{engine="0",{MODEL}}} 1200.0',
        f'vllm:spec_decode_num_drafts_total{{engine="0",{MODEL}}} 1500.0',
    )
    assert later != s1
    bad = _write(tmp_path, "later.prom", later)
    _fails(capsys, ["import", "vllm", str(SCRAPE_1), str(bad)], out, "300", "draft tokens", "= 0")
    _fails(capsys, ["import", "vllm", str(SCRAPE_1), str(bad), "--json"], out, "300")


def test_nothing_accepted_is_a_defined_zero_rate(tmp_path, capsys):
    # drafts and draft tokens moved, nothing accepted: rate 0/300 = 0 and tau = 1, well defined
    out = tmp_path / "zero.json"
    s1 = SCRAPE_1.read_text()
    later = s1.replace(f"{MODEL}}} 1200.0", f"{MODEL}}} 1300.0").replace(
        f"{MODEL}}} 6000.0", f"{MODEL}}} 6300.0"
    )
    bad = _write(tmp_path, "later.prom", later)
    argv = ["import", "vllm", str(SCRAPE_1), str(bad), "--method", "M", "--scenario", "s", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "acceptance rate 0.0000" in text and "nan" not in text.lower()


# 5. a counter beyond 2**53 (not an exact count in a float64) used to be imported into a profile whose
#    histogram no longer loads (integers beyond 2**63-1)


def test_counter_beyond_exact_float_range_is_refused(tmp_path, capsys):
    out = tmp_path / "never.json"
    data = [
        {"name": "vllm:spec_decode_num_drafts", "labels": {}, "value": 1e300},
        {"name": "vllm:spec_decode_num_draft_tokens", "labels": {}, "value": 1e300},
        {"name": "vllm:spec_decode_num_accepted_tokens", "labels": {}, "value": 1e300},
        {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {}, "values": [1e300]},
    ]
    bad = _write(tmp_path, "huge.json", json.dumps(data))
    _fails(capsys, ["import", "vllm", str(bad)], out, "1e+300", "2**53")
