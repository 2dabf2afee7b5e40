"""llama-server's slots share the KV cache the pricing assumed: with ``-np`` given, llama-server splits ``-c``
into ``-c / -np`` cells per slot unless ``-kvu`` (tools/server/server.cpp turns the unified pool on only when
``-np`` is left on auto). Before, `tune` pasted ``-np 256 -c 107711`` (420 cells a slot for 1344-position
requests) and `recommend` ``-np 64`` with no ``-c`` at all."""

from __future__ import annotations

import json

from specsim.cli.main import main
from specsim.engines.engine_config import llama_cpp_server_args, llama_cpp_slot_flags


def _after(flags: list[str], flag: str) -> str:
    return flags[flags.index(flag) + 1]


def test_slots_share_one_pool():
    assert llama_cpp_slot_flags(1, 4096) == ["-np", "1", "-c", "4096"]  # one slot: nothing to split
    assert llama_cpp_slot_flags(8, 8192) == ["-np", "8", "-c", "8192", "-kvu"]
    flags = llama_cpp_server_args(3, draft_model="d.gguf", parallel=4, context_tokens=4000)
    assert flags[:2] == ["-md", "d.gguf"] and flags[-5:] == ["-np", "4", "-c", "4000", "-kvu"]
    assert llama_cpp_server_args(0, draft_model="d.gguf", parallel=4) is None


def test_recommend_sizes_the_pool_for_its_slots(capsys):
    argv = ["recommend", "--engine", "llama.cpp", "--pair", "llava-1.5-7b-68m", "--alpha", "0.7"]
    assert main([*argv, "--batch", "1,64", "--at-batch", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    flags, gamma = out["config"], int(_after(out["config"], "--spec-draft-n-max"))
    assert _after(flags, "-np") == "64" and "-kvu" in flags
    assert int(_after(flags, "-c")) == 64 * (out["context_tokens"] + gamma + 1)


def test_tune_pastes_the_pool_it_simulated(capsys):
    argv = ["tune", "--requests", "30", "--alpha", "0.7", "--gamma", "1-3", "--trials", "3", "--json"]
    assert main(argv) == 0
    configs = json.loads(capsys.readouterr().out)["best"][0]["engine_configs"]
    flags = configs["llama_cpp_args"]
    assert flags[-5:-1] == ["-np", "256", "-c", _after(flags, "-c")] and flags[-1] == "-kvu"
    assert configs["commands"]["llama.cpp"].endswith(" ".join(flags[-5:]))
