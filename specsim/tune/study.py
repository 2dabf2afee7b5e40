"""A tuning study: Optuna's ask/tell over a search space, simulations mapped by an executor, in batches.

Each round asks ``batch`` trials (seeded TPE, or product order when exhaustive), maps
:func:`~specsim.tune.trial.run_trial` over the deployments not simulated yet and tells the results in order,
so a study's trials depend on the space, the seed and ``batch``, never on ``--executor`` or ``--jobs``.
A study in a storage (SQLite or a journal file) resumes where it stopped and several processes may join it;
``trials`` counts the study's trials in all.
More: ARCHITECTURE.md, Notes by module.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsim.errors import SpecsimError
from specsim.tune.objective import Objective
from specsim.tune.space import SearchSpace
from specsim.tune.trial import Deployment, TrialConfig, TrialResult, TuneContext, run_trial

SEARCHES = ("auto", "tpe", "exhaustive")
OPTUNA_INSTALL = "python -m pip install -e '.[tune]'"
STUDY_ATTR = "specsim_tune"
SQLITE_SUFFIXES, JOURNAL_SUFFIXES = (".db", ".sqlite", ".sqlite3"), (".log", ".jsonl", ".journal")


@dataclass(frozen=True)
class StudyPlan:
    """How to search: ``search`` (auto: exhaustive when the space holds at most ``trials`` points), the
    study's total ``trials``, trials per ask/tell round, the sampler's seed, storage and study name."""

    search: str = "auto"
    trials: int = 50
    batch: int = 8
    seed: int = 0
    storage: str | None = None
    study_name: str = "specsim-tune"

    def resolved(self, space: SearchSpace) -> str:
        if self.search not in SEARCHES:
            raise SpecsimError(f"--search: expected one of {list(SEARCHES)}, got {self.search!r}")
        if self.search == "auto":
            return "exhaustive" if space.size <= self.trials else "tpe"
        return self.search


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: its number in the study, deployment, result, objective value and feasibility."""

    number: int
    deployment: Deployment
    result: TrialResult
    value: float
    feasible: bool

    def to_json(self) -> dict:
        return {
            "number": self.number,
            "deployment": self.deployment.to_json(),
            "value": self.value,
            "feasible": self.feasible,
            "result": self.result.to_json(),
        }


@dataclass(frozen=True)
class StudyOutcome:
    """A study's finished trials (by number), the search it ran and the simulations this run made."""

    search: str
    records: tuple[TrialRecord, ...]
    simulations: int

    def best(self, objective: Objective, device: str | None = None) -> TrialRecord | None:
        """The best feasible trial (on ``device``); ties go to the earliest."""
        best = None
        for r in self.records:
            if r.feasible and (device is None or r.deployment.device == device):
                if best is None or objective.better(r.value, best.value):
                    best = r
        return best


def require_optuna():
    """The ``optuna`` module; SpecsimError naming what to install when it is absent."""
    try:
        import optuna
    except ImportError:
        raise SpecsimError(
            f"specsim tune needs the tune extra (optuna is not installed): {OPTUNA_INSTALL}"
        ) from None
    return optuna


def storage_url(spec: str | None) -> str | None:
    """A storage spec checked: ``sqlite:///...``, a ``*.db`` path (SQLite) or a journal file path."""
    if spec is None or spec.startswith("sqlite:///"):
        return spec
    if Path(spec).suffix in SQLITE_SUFFIXES:
        return "sqlite:///" + str(Path(spec).resolve())
    if Path(spec).suffix in JOURNAL_SUFFIXES:
        return spec
    raise SpecsimError(
        f"--storage: expected sqlite:///PATH, a {'/'.join(SQLITE_SUFFIXES)} file (SQLite) or a "
        f"{'/'.join(JOURNAL_SUFFIXES)} file (journal), got {spec!r}"
    )


# What Optuna's journal replay raises on a line that is not one of its records.
JOURNAL_ERRORS = (ValueError, KeyError, TypeError)


def _storage(optuna, spec: str | None):
    """Optuna's storage for ``spec``, its folder made as every output's is; a file that holds no study store
    is one line naming --storage, not a database driver's traceback."""
    url = storage_url(spec)
    if url is None:
        return None
    Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("sqlite:///"):
        from sqlalchemy.exc import SQLAlchemyError  # optuna's own dependency

        for attempt in range(5):  # processes that start together race to create one file's tables
            try:
                return optuna.storages.RDBStorage(url)
            except SQLAlchemyError as err:
                if attempt == 4:
                    raise SpecsimError(
                        f"--storage {spec!r}: not an SQLite study store ({_reason(err)})"
                    ) from None
                time.sleep(0.2 * (attempt + 1))
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        return JournalStorage(JournalFileBackend(url))
    except JOURNAL_ERRORS as err:
        raise SpecsimError(f"--storage {spec!r}: not an Optuna journal ({_reason(err)})") from None


def _reason(err: Exception) -> str:
    """The first line of a driver's message, without SQLAlchemy's statement and links."""
    orig = getattr(err, "orig", None)
    return str(orig if orig is not None else err).splitlines()[0][:120]


# The options behind each part of a study's fingerprint, named when a stored study differs there.
FINGERPRINT_FLAGS = {
    "target": "--pair/--target",
    "workload": "--requests/--prompt-tokens/--images/--output-tokens/--burstiness/--trace",
    "rate_per_s": "--rate",
    "slo": "--slo",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "seed": "--seed",
    "image_size": "--image-size",
    "space": "--device/--runtime/--tp/--draft/--gamma/--gamma-breaks/--sd-off-from-batch/--max-num-seqs",
    "objective": "--objective/--slo-attainment/--price",
    "search": "--search",
}


def _sha(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def fingerprint(context: TuneContext, space: SearchSpace, objective: Objective, search: str) -> dict:
    """What a stored study must match to be resumed or joined (the context as hashes, whole and by field:
    a trace is long)."""
    ctx = context.to_json()
    return {
        "context_sha256": _sha(ctx),
        "context_fields_sha256": {k: _sha(v) for k, v in ctx.items()},
        "space": space.to_json(),
        "objective": objective.to_json(),
        "search": search,
    }


def _differs(stored: dict, mark: dict) -> list[str]:
    """The options (:data:`FINGERPRINT_FLAGS`) whose part of ``mark`` a stored study's fingerprint differs
    in; a study stored before the context's fields were kept names the context as a whole."""
    mark = json.loads(json.dumps(mark))
    fields, stored_fields = mark.pop("context_fields_sha256"), stored.get("context_fields_sha256")
    out = [k for k in mark if stored.get(k) != mark[k] and k != "context_sha256"]
    if stored.get("context_sha256") != mark["context_sha256"]:
        if stored_fields is None:
            out.insert(0, "context")
        else:
            out[:0] = [k for k in fields if stored_fields.get(k) != fields[k]]
    return [FINGERPRINT_FLAGS.get(k, "the load and SLO options") for k in out]


def _sampler(optuna, search: str, seed: int):
    if search == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)  # every exhaustive trial is enqueued


def _open(optuna, plan: StudyPlan, objective: Objective, search: str, mark: dict):
    storage = _storage(optuna, plan.storage)
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=plan.study_name,
            sampler=_sampler(optuna, search, plan.seed),
            direction=objective.direction,
            load_if_exists=True,
        )
    except JOURNAL_ERRORS as err:  # a journal is read as the study opens; a stored study may disagree
        raise SpecsimError(
            f"--storage {plan.storage!r}: cannot open study {plan.study_name!r} there ({_reason(err)})"
        ) from None
    held = len(study.get_trials(deepcopy=False))
    if held:  # a resumed or joined study: the seed's first draws would repeat the trials it holds
        study.sampler = _sampler(optuna, search, plan.seed + held)
    stored = study.user_attrs.get(STUDY_ATTR)
    if stored is None:
        study.set_user_attr(STUDY_ATTR, mark)
    elif differs := _differs(stored, mark):
        raise SpecsimError(
            f"{differs[0]}: study {plan.study_name!r} in {plan.storage} was made with other settings of "
            f"{', '.join(differs)}; give the same settings, or another --study-name"
        )
    return study


def _record(objective: Objective, number: int, deployment: Deployment, result: TrialResult) -> TrialRecord:
    value = objective.value(deployment, result)
    return TrialRecord(number, deployment, result, value, objective.violation(result) <= 0)


def run_study(
    space: SearchSpace,
    context: TuneContext,
    objective: Objective,
    plan: StudyPlan,
    executor,
    on_round: Callable[[int, TrialRecord | None], None] | None = None,
) -> StudyOutcome:
    """Search ``space`` (module docstring); ``executor`` an entered executor; ``on_round(trials told,
    best so far)`` after each round (progress)."""
    optuna = require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search = plan.resolved(space)
    # the search as asked: --search auto turns exhaustive once --trials reaches the space, and resumes
    study = _open(optuna, plan, objective, search, fingerprint(context, space, objective, plan.search))
    distributions = _distributions(optuna, space)
    known: dict[Deployment, TrialResult] = {}
    records = _stored(optuna, study, objective, known)
    if records and on_round is not None:  # a resumed study: its trials so far
        on_round(len(records), StudyOutcome(search, tuple(records), 0).best(objective))
    target = min(plan.trials, space.size) if search == "exhaustive" else plan.trials
    points = space.enumerate() if search == "exhaustive" else None
    simulations = 0
    while True:
        states = [t.state for t in study.get_trials(deepcopy=False)]
        active = sum(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING) for s in states)
        room = min(plan.batch, target - active)
        if points is not None:
            room = _enqueue(study, space, points, room, known)
        if room <= 0:
            break
        asked = [study.ask(distributions) for _ in range(room)]
        try:
            deployments = [space.deployment(t.params) for t in asked]
            fresh = list(dict.fromkeys(d for d in deployments if d not in known))
            known.update(zip(fresh, executor.map(run_trial, [TrialConfig(context, d) for d in fresh])))
        except BaseException:  # interrupted: the round's trials fail, so a resumed study asks again
            for trial in asked:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        simulations += len(fresh)
        for trial, dep in zip(asked, deployments):
            rec = _record(objective, trial.number, dep, known[dep])
            trial.set_user_attr("deployment", dep.to_json())
            trial.set_user_attr("result", rec.result.to_json())
            trial.set_constraint("feasible", objective.violation(rec.result))
            study.tell(trial, rec.value)
            records.append(rec)
        if on_round is not None:
            on_round(len(asked), StudyOutcome(search, tuple(records), simulations).best(objective))
    records = _stored(optuna, study, objective, {})  # what the study holds, other processes' trials too
    return StudyOutcome(search, tuple(records), simulations)


def _distributions(optuna, space: SearchSpace) -> dict:
    """Optuna distributions of the searched dimensions: an integer range where the choices are one, else
    categorical."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out = {}
    for name, choices in space.searched():
        ints = all(isinstance(c, int) for c in choices)
        if ints and sorted(choices) == list(range(min(choices), max(choices) + 1)):
            out[name] = IntDistribution(min(choices), max(choices))
        else:
            out[name] = CategoricalDistribution(list(choices))
    return out


def _enqueue(study, space: SearchSpace, points, room: int, known: dict) -> int:
    """Enqueue up to ``room`` points of an exhaustive search that no trial of the study holds (finished,
    running or waiting, this process's or another's); how many."""
    held = set(known)
    names = {n for n, _ in space.searched()}
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "COMPLETE" and "deployment" in t.user_attrs:
            held.add(Deployment.from_json(t.user_attrs["deployment"]))
        params = t.params or t.system_attrs.get("fixed_params", {})
        if t.state.name in ("RUNNING", "WAITING") and names <= set(params):
            held.add(space.deployment(params))
    n = 0
    while n < room:
        params = next(points, None)
        if params is None:
            break
        if space.deployment(params) not in held:
            study.enqueue_trial(params)
            n += 1
    return n


def _stored(optuna, study, objective: Objective, known: dict) -> list[TrialRecord]:
    """The study's finished trials as records (``known`` filled with their results)."""
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if "deployment" not in t.user_attrs or "result" not in t.user_attrs:
            continue
        dep = Deployment.from_json(t.user_attrs["deployment"])
        result = TrialResult.from_json(t.user_attrs["result"])
        known[dep] = result
        out.append(_record(objective, t.number, dep, result))
    return sorted(out, key=lambda r: r.number)
