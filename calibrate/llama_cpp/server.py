"""``llama-server`` on loopback: started with one configuration, asked for completions, stopped.

llama-server reads its speculative settings at start only (a request's ``speculative.*`` fields are
compiled out), so every setting is its own server (:class:`ServerConfig`). A completion is sent as token
ids with greedy sampling (``temperature`` 0), no prompt reuse (``cache_prompt`` false) and EOS ignored, so
every run decodes exactly ``n_predict`` tokens; its ``timings`` (:func:`parse_completion`) give the prompt
pass (``prompt_ms``), the decode phase (``predicted_ms`` over ``predicted_n`` − 1 tokens: the first comes
from the prompt pass) and, with SD, ``draft_n`` and ``draft_n_accepted``.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace

from calibrate.llama_cpp.binaries import LlamaCpp
from calibrate.llama_cpp.cpu_share import CpuShare, starved
from specsim.errors import SpecsimError

SCHEMA_VERSION = 1
HOST = "127.0.0.1"
MAX_REDOS = 3


@dataclass(frozen=True)
class ServerConfig:
    """One llama-server: the target GGUF, threads, KV positions (``-c``), slots (``-np``), and SD: a draft
    GGUF with ``spec_type`` ``draft-simple``, or an n-gram ``spec_type`` (``ngram-simple``: lookup of
    ``ngram_n`` tokens, drafts of up to ``ngram_m``), ``draft_max`` drafts per block, optional synthetic
    acceptance rates (``--spec-synth-rates``); ``mmproj``: the target's image encoder and projector GGUF."""

    target: str
    threads: int
    context_tokens: int = 4096
    parallel: int = 1
    draft: str | None = None
    spec_type: str | None = None
    draft_max: int | None = None
    ngram_n: int | None = None
    ngram_m: int | None = None
    synth_rates: tuple[float, ...] = ()
    mmproj: str | None = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def draft_model(cls, target: str, threads: int, draft: str, gamma: int, synth_rates=()) -> ServerConfig:
        """A server drafting with the ``draft`` GGUF, up to ``gamma`` drafts per block (``synth_rates``:
        synthetic acceptance)."""
        return cls(
            target,
            threads,
            draft=draft,
            spec_type="draft-simple",
            draft_max=gamma,
            synth_rates=tuple(synth_rates),
        )

    def args(self) -> list[str]:
        """llama-server's flags for this configuration (the port excluded)."""
        out = ["-m", self.target, "-t", str(self.threads), "-tb", str(self.threads)]
        out += ["-c", str(self.context_tokens), "-np", str(self.parallel), "--no-webui", "--host", HOST]
        if self.spec_type:
            out += ["--spec-type", self.spec_type]
        if self.draft:
            out += ["-md", self.draft, "-td", str(self.threads), "-tbd", str(self.threads)]
            out += ["--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
        if self.draft_max is not None:
            out += ["--spec-draft-n-max", str(self.draft_max)]
        if self.ngram_n is not None:
            out += ["--spec-ngram-simple-size-n", str(self.ngram_n)]
        if self.ngram_m is not None:
            out += ["--spec-ngram-simple-size-m", str(self.ngram_m)]
        if self.synth_rates:
            out += ["--spec-synth-rates", ",".join(f"{r:g}" for r in self.synth_rates)]
        if self.mmproj:
            out += ["--mmproj", self.mmproj]
        return out


@dataclass(frozen=True)
class Completion:
    """One completion's numbers: prompt tokens and ms (the prompt pass, with SD the draft's too), tokens
    decoded and the decode phase's ms (``predicted_ms``, after the first token), drafts proposed and
    accepted (0 without SD), the token ids, and the cores this run and others used (:mod:`cpu_share`)."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0
    draft_accepted: int = 0
    tokens: tuple[int, ...] = ()
    cores_ours: float = 0.0
    cores_foreign: float = 0.0
    schema_version: int = SCHEMA_VERSION

    @property
    def decode_steps(self) -> int:
        """Target passes after the prompt's: one per block (drafted or not), tokens − 1 − accepted."""
        return self.predicted_n - 1 - self.draft_accepted

    @property
    def ms_per_token(self) -> float:
        """Decode-phase ms per token (the first token excluded)."""
        return self.predicted_ms / max(self.predicted_n - 1, 1)


def parse_completion(d: dict) -> Completion:
    """A ``/completion`` response → :class:`Completion`; SpecsimError naming a missing timing."""
    t = d.get("timings") if isinstance(d, dict) else None
    if not isinstance(t, dict):
        raise SpecsimError("llama-server response: no 'timings' object")
    try:
        return Completion(
            prompt_n=int(t["prompt_n"]),
            prompt_ms=float(t["prompt_ms"]),
            predicted_n=int(t["predicted_n"]),
            predicted_ms=float(t["predicted_ms"]),
            draft_n=int(t.get("draft_n", 0)),
            draft_accepted=int(t.get("draft_n_accepted", 0)),
            tokens=tuple(int(x) for x in d.get("tokens", ())),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise SpecsimError(f"llama-server response: timings: {err!r}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """A running llama-server (context manager): ``port``, ``pid``, :meth:`post`, :meth:`complete`."""

    llama: LlamaCpp
    config: ServerConfig
    log_path: str = "/dev/null"
    startup_s: float = 300.0
    niceness: int = 0  # < 0: ahead of the host's other work (a timed run); needs the right to renice
    port: int = 0
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    def __enter__(self) -> LlamaServer:
        self.port = free_port()
        cmd = [self.llama.path("llama-server"), *self.config.args(), "--port", str(self.port)]
        if self.niceness:
            cmd = ["nice", "-n", str(self.niceness), *cmd]
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in __exit__)
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.__exit__()
                raise SpecsimError(f"llama-server exited at start (code {self._proc.returncode}): {cmd}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        self.__exit__()
        raise SpecsimError(f"llama-server did not answer /health within {self.startup_s:g} s")

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def post(self, path: str, body: dict, timeout_s: float = 1800.0) -> dict:
        """POST JSON to ``path`` and return the JSON answer."""
        req = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())

    def complete(self, tokens, n_predict: int, **extra) -> dict:
        """A greedy completion of ``tokens`` (ids) for exactly ``n_predict`` tokens; the raw answer."""
        return self.post("/completion", completion_body(tokens, n_predict, **extra))

    def stream(self, tokens, n_predict: int) -> tuple[list[float], list[int], dict]:
        """A streamed greedy completion: the seconds (from sending) at which each token arrived, the token
        ids, and the last event (its ``timings``). llama-server sends a block's tokens one event each, at the
        block's end."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=1800)
        body = json.dumps(completion_body(tokens, n_predict, stream=True))
        t0 = time.perf_counter()
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        answer, times, ids, last = conn.getresponse(), [], [], {}
        for line in answer:
            if not line.startswith(b"data: "):
                continue
            now, last = time.perf_counter() - t0, json.loads(line[6:])
            new = [int(t) for t in last.get("tokens") or ()]
            times, ids = times + [now] * len(new), ids + new
            if last.get("stop"):
                break
        conn.close()
        return times, ids, last

    def tokenize_chat(self, text: str) -> list[int]:
        """``text`` as a user message in the model's chat template, tokenized by llama.cpp."""
        prompt = self.post("/apply-template", {"messages": [{"role": "user", "content": text}]})["prompt"]
        return [int(t) for t in self.post("/tokenize", {"content": prompt, "add_special": True})["tokens"]]


def completion_body(tokens, n_predict: int, **extra) -> dict:
    """The ``/completion`` request of every run (module docstring); ``tokens``: token ids, or a multimodal
    prompt as llama-server takes it (``{"prompt_string": ..., "multimodal_data": [base64, ...]}``), as is."""
    return {
        "prompt": tokens if isinstance(tokens, dict) else [int(t) for t in tokens],
        "n_predict": int(n_predict),
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
        "return_tokens": True,
        **extra,
    }


def timed_completion(server: LlamaServer, tokens, n: int, threads: int) -> Completion:
    """One request, redone (up to :data:`MAX_REDOS` times) while the host took its core, with the cores it
    and others used."""
    for _ in range(MAX_REDOS):
        with CpuShare((server.pid,)) as share:
            c = parse_completion(server.complete(tokens, n))
        if not starved(share, threads):
            break
    return replace(c, cores_ours=share.ours, cores_foreign=share.foreign)
