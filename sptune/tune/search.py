"""Search spaces: `search_spaces/<task>/<model>.yaml` -> an Optuna searcher (and optional ASHA) for Tune.

A search-space file holds, per stage (pretrain / finetune / scratch), the grid of flattened config
keys to search and the points to evaluate first (the paper's best values, Tables 4-6):

    stages:
      pretrain:
        params: {optim.lr: [1.0e-3, 5.0e-4, 1.0e-4], optim.batch_size: [8, 32, 128]}
        points: [{optim.lr: 1.0e-3, optim.batch_size: 128}]

A list is a categorical grid; `{loguniform: [lo, hi]}` / `{uniform: [lo, hi]}` a continuous range.
Sampler choice (optuna#2021: TPE on a small categorical grid proposes the same point again and
again): a fully categorical grid is searched by Optuna's BruteForceSampler, which never repeats a
point (enqueued points included) and caps the trial count at the grid size; spaces with a
continuous range use TPE. Either way `UniqueOptunaSearch` refuses a point that already ran.

Early stopping: ASHA on our own clock (the fraction of each trial's budget), from an `asha:` block,
`--asha`, or by default for a phase of at least ASHA_MIN_TRIALS trials whose evals meet its rungs
(`--no-asha` turns it off). A trial it stops gets its test metric at its best checkpoint when the
phase ends (sptune.tune.stopped).

Each phase's Optuna study lives in the study directory's journal file (`optuna.journal`, Optuna's
JournalStorage: append-only, safe for concurrent writers), named `<study dir name>/<phase>`, so
`optuna-dashboard <study>/optuna.journal` shows the searches while they run and after. Resume keeps
the same Optuna study: see UniqueOptunaSearch.
"""

from __future__ import annotations

import importlib.resources
import itertools
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.config import STAGES, from_dict, read_yaml
from sptune.errors import UserError
from sptune.registry import check_names

METRIC = "best_val"  # every trial reports its running best validation metric under this name
MODE = "max"  # validation metrics here are accuracy / R2: higher is better
# ASHA's clock: the fraction of its own resolved budget (optim.epochs or optim.max_steps) a trial has
# trained. Optimizer steps would compare a batch-8 trial with a batch-128 one after 16x less data;
# this is our own counter (from the step), not Tune's iterations, which restart when a trial is restored.
TIME_ATTR = "budget"
# ASHA's max_t, just under the whole budget: ASHA puts a rung at max_t when the rungs reach it, and a
# trial judged at its last eval would be stopped before its test evaluation.
FULL_BUDGET = 1.0 - 1e-9
SAMPLERS = ("auto", "brute", "tpe")
RANGES = ("loguniform", "uniform")
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout's root when sptune runs from one


@dataclass
class StageSpace:
    params: dict[str, list[Any] | dict[str, list[float]]]
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def categorical(self) -> bool:
        return all(isinstance(v, list) for v in self.params.values())

    @property
    def grid_size(self) -> int | None:
        return math.prod(len(v) for v in self.params.values()) if self.categorical else None


@dataclass
class SearchSpace:
    path: str
    stages: dict[str, StageSpace]
    task: str = ""  # the task / model the grid was made for ("" = any)
    model: str = ""
    num_samples: int = 9  # trials per stage; a categorical grid caps it at the grid size
    max_concurrent: int = 2
    seed: int = 0
    sampler: str = "auto"
    asha: dict[str, Any] | None = None  # {grace_period (budget fraction), reduction_factor}: off when absent
    resources: dict[str, float] = field(default_factory=dict)  # workers, cpus_per_worker, gpus_per_worker

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "task": self.task, "model": self.model, "num_samples": self.num_samples,
                "max_concurrent": self.max_concurrent, "seed": self.seed, "sampler": self.sampler, "asha": self.asha, "resources": self.resources,
                "stages": {s: {"params": sp.params, "points": sp.points} for s, sp in self.stages.items()}}


def default_path(task: str, model: str) -> Path:
    """search_spaces/<task>/<model>.yaml: from the working directory, else from the source checkout sptune
    runs from (PYTHONPATH or the study scripts, not installed), else the copy installed with the package
    (package data sptune.search_spaces: a wheel, an editable install, a cluster node)."""
    relative = Path(task) / f"{model}.yaml"
    for root in (Path("search_spaces"), SOURCE_ROOT / "search_spaces", installed_search_spaces()):
        if root is not None and (root / relative).is_file():
            return root / relative
    raise UserError(f"no search space for task '{task}' / model '{model}' (search_spaces/{relative} not found); "
                    f"pass one with --search-space")


def installed_search_spaces() -> Path | None:
    """The search_spaces directory installed as package data (pyproject.toml), or None when not installed."""
    try:
        return Path(str(importlib.resources.files("sptune.search_spaces")))
    except ModuleNotFoundError:
        return None


def load(path: str | Path) -> SearchSpace:
    p = Path(path)
    data = read_yaml(p, "search space", "pass a search_spaces/<task>/<model>.yaml file")
    return parse(data, str(p))


def parse(data: Any, path: str = "<search space>") -> SearchSpace:
    """Validate a search-space mapping; every mistake is a UserError naming the file and the key."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping with a 'stages' section")
    known = {"task", "model", "stages", "num_samples", "max_concurrent", "seed", "sampler", "asha", "resources"}
    if set(data) - known:
        raise UserError(f"{path}: unknown keys {sorted(set(data) - known)}; allowed: {', '.join(sorted(known))}")
    stages = data.get("stages")
    if not isinstance(stages, dict) or not stages or set(stages) - set(STAGES):
        raise UserError(f"{path}: 'stages' must map some of {', '.join(STAGES)} to {{params, points}}")
    space = SearchSpace(path=path, stages={name: _stage(path, name, spec) for name, spec in stages.items()},
                        task=str(data.get("task", "")), model=str(data.get("model", "")))
    for key in ("num_samples", "max_concurrent", "seed"):
        if key in data:
            value = data[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "seed" else 1):
                raise UserError(f"{path}: {key}={value!r} must be a positive integer")
            setattr(space, key, value)
    space.sampler = data.get("sampler", "auto")
    if space.sampler not in SAMPLERS:
        raise UserError(f"{path}: sampler={space.sampler!r}; choose one of: {', '.join(SAMPLERS)}")
    if data.get("asha") is not None:
        space.asha = _asha(path, data["asha"])
    resources = data.get("resources") or {}
    allowed = {"workers", "cpus_per_worker", "gpus_per_worker"}
    if not isinstance(resources, dict) or set(resources) - allowed:
        raise UserError(f"{path}: 'resources' may set only {', '.join(sorted(allowed))}")
    space.resources = dict(resources)
    return space


def _stage(path: str, name: str, spec: Any) -> StageSpace:
    where = f"{path}: stages.{name}"
    if not isinstance(spec, dict) or not isinstance(spec.get("params"), dict) or not spec["params"]:
        raise UserError(f"{where} needs 'params': a mapping of config keys (e.g. optim.lr) to value lists")
    if set(spec) - {"params", "points"}:
        raise UserError(f"{where}: unknown keys {sorted(set(spec) - {'params', 'points'})}; use params, points")
    params: dict[str, Any] = {}
    for key, values in spec["params"].items():
        if isinstance(values, list):
            if not values or len(set(map(repr, values))) != len(values):
                raise UserError(f"{where}.params.{key}: give a non-empty list of distinct values")
            for value in values:
                check_value(where, key, value)
        elif isinstance(values, dict) and len(values) == 1 and next(iter(values)) in RANGES:
            kind, bounds = next(iter(values.items()))
            if not (isinstance(bounds, list) and len(bounds) == 2 and 0 < float(bounds[0]) < float(bounds[1])):
                raise UserError(f"{where}.params.{key}: {kind} needs [low, high] with 0 < low < high")
            values = {kind: [float(bounds[0]), float(bounds[1])]}
            check_value(where, key, values[kind][0])
        else:
            raise UserError(f"{where}.params.{key}: give a list of values or {{loguniform: [low, high]}}")
        params[key] = values
    stage = StageSpace(params=params, points=list(spec.get("points") or []))
    for point in stage.points:
        if not isinstance(point, dict) or set(point) != set(params):
            raise UserError(f"{where}.points: each point must set exactly {', '.join(params)}; got {point!r}")
        for key, value in point.items():
            domain = params[key]
            inside = (value in domain) if isinstance(domain, list) else \
                (next(iter(domain.values()))[0] <= float(value) <= next(iter(domain.values()))[1])
            if not inside:
                raise UserError(f"{where}.points: {key}={value!r} is outside its grid {domain}; add it to params")
    return stage


def check_value(where: str, key: str, value: Any) -> None:
    """A searched key must be a real config field and each value a valid setting of it."""
    section, dot, name = key.partition(".")
    if not dot or "." in name:
        raise UserError(f"{where}.params: '{key}' must be a flattened config key section.field (e.g. optim.lr)")
    try:
        check_names(from_dict({section: {name: value}}))
    except UserError as exc:
        raise UserError(f"{where}.params.{key}: {exc}") from None


# Rungs at 1/8 and 3/8 of the budget; a third of the trials go on from each. Measured on the 12-point grid
# of benchmarks/search_efficiency.py (15 search seeds): median compute to come within 1 point of the
# grid's best 36% of the grid's, never missed; with reduction factor 2 (rungs 1/8, 1/4, 1/2) 47% and 3 of
# 15 searches never came within 1 point (the best trial starts slowly and was stopped); grace 1/4: 50%.
DEFAULT_ASHA = {"grace_period": 0.125, "reduction_factor": 3.0}
# ASHA is on by default for a phase of at least this many trials, where its rungs fit the evals (else it
# silently stays off). With fewer, a trial is judged at a rung against one or two others: little compute
# is saved and a slow starter is easily lost.
ASHA_MIN_TRIALS = 8


def phase_asha(options: dict[str, Any], trials: int) -> dict[str, Any] | None:
    """The ASHA settings of a phase of `trials` trials, or None (FIFO). options: pipeline.resolve_options'
    output; asha_min_trials is 0 when ASHA was asked for (--asha, an asha block), so every phase gets it."""
    asha = options.get("asha")
    return asha if asha and trials >= options.get("asha_min_trials", 0) else None


def _asha(path: str, spec: Any) -> dict[str, Any]:
    spec = {} if spec is True else spec
    if not isinstance(spec, dict) or set(spec) - {"grace_period", "reduction_factor"}:
        raise UserError(f"{path}: asha takes grace_period (a fraction of each trial's budget) and reduction_factor")
    out = {key: float(spec.get(key, default)) for key, default in DEFAULT_ASHA.items()}
    if not 0 < out["grace_period"] < 1 or out["reduction_factor"] <= 1:
        raise UserError(f"{path}: asha needs 0 < grace_period < 1 (a fraction of each trial's budget, e.g. 0.125) "
                        f"and reduction_factor > 1")
    return out


def rungs(asha: dict[str, Any]) -> list[float]:
    """ASHA's rungs as fractions of a trial's budget: grace_period x reduction_factor^k below 1."""
    out, rung = [], asha["grace_period"]
    while rung < FULL_BUDGET:
        out.append(rung)
        rung *= asha["reduction_factor"]
    return out


def check_rungs(asha: dict[str, Any], max_steps: dict[int, int], eval_every: int, where: str) -> None:
    """Every rung must be met by an eval of every trial before the next rung (and before its last
    step): else trials are compared after unequal work, or judged at their final eval and stopped
    before testing. `max_steps` maps each searched batch size to its resolved step budget."""
    levels = rungs(asha)
    for batch_size, steps in sorted(max_steps.items()):
        evals = [s / steps for s in range(eval_every, steps, eval_every)]  # the final eval is no rung
        for low, high in zip(levels, levels[1:] + [1.0]):
            if not any(low <= e < high for e in evals):
                raise UserError(
                    f"{where}: ASHA's rung at {low:.4g} of the budget has no eval before {high:.4g} for "
                    f"optim.batch_size={batch_size} ({steps} steps, an eval every {eval_every}); lower "
                    f"optim.eval_every or raise asha.grace_period")


def trial_count(stage: StageSpace, requested: int) -> int:
    """A categorical grid has finitely many points: asking for more would repeat some."""
    return min(requested, stage.grid_size) if stage.categorical else requested


def grid_points(stage: StageSpace) -> list[dict[str, Any]]:
    """Every point of a categorical grid (for tests and for reading a study's coverage)."""
    keys = list(stage.params)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(stage.params[k] for k in keys))]


# ----------------------------------------------------------------------------- Ray Tune / Optuna objects
def journal_storage(path: str | Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(Path(path).resolve())))


def optuna_study_name(study_dir: str | Path, phase: str) -> str:
    return f"{Path(study_dir).resolve().name}/{phase}"


def make_searcher(stage: StageSpace, sampler: str = "auto", seed: int = 0, journal: str | Path | None = None,
                  study_name: str | None = None) -> "UniqueOptunaSearch":
    """The phase's searcher; with `journal` its Optuna study `study_name` is kept in that journal file
    (started afresh: a phase is only built anew when Tune has nothing to restore)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is Tune's job
    distributions = {
        key: CategoricalDistribution(values) if isinstance(values, list)
        else FloatDistribution(*next(iter(values.values())), log="loguniform" in values)
        for key, values in stage.params.items()}
    if sampler == "auto":
        sampler = "brute" if stage.categorical else "tpe"
    if sampler == "brute":
        if not stage.categorical:
            raise UserError("sampler=brute needs a fully categorical grid (lists only, no ranges)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna_sampler = optuna.samplers.BruteForceSampler(seed=seed)
    else:
        optuna_sampler = optuna.samplers.TPESampler(seed=seed)
    storage = None
    if journal is not None:
        storage = journal_storage(journal)
        if study_name in {s.study_name for s in storage.get_all_studies()}:
            # A phase that Tune could not restore (stopped before its first snapshot) starts over;
            # the Optuna trials of that attempt were never known to Tune, so they go too.
            optuna.delete_study(study_name=study_name, storage=storage)
    return UniqueOptunaSearch(space=distributions, metric=METRIC, mode=MODE,
                              points_to_evaluate=[dict(p) for p in stage.points] or None,
                              sampler=optuna_sampler, storage=storage, study_name=study_name)


def limit(searcher: "UniqueOptunaSearch", max_concurrent: int) -> "ResumableLimiter":
    """The searcher behind the phase's concurrency limit (in place of TuneConfig.max_concurrent_trials)."""
    return ResumableLimiter(searcher, max_concurrent=max_concurrent)


class ResumableLimiter(ConcurrencyLimiter):
    """Ray's ConcurrencyLimiter forgets a trial once it errors; when Tune runs it again (resume_errored)
    the limiter dropped its completion (the searcher, so Optuna, never saw the result) and did not count
    it against the limit. Here its first result brings it back among the live trials."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id not in self.live_trials:
            self.live_trials.add(trial_id)
            self.num_unfinished_live_trials += 1
        super().on_trial_result(trial_id, result)


def make_scheduler(asha: dict[str, Any] | None):
    if not asha:
        return None  # FIFO: every trial runs to its last step
    # stop_last_trials=False: a trial that reaches its full budget ends by itself, after its test
    # evaluation (ASHA would stop it at its last eval report, before the trainer writes its result).
    return ASHAScheduler(time_attr=TIME_ATTR, metric=METRIC, mode=MODE, max_t=FULL_BUDGET,
                         grace_period=asha["grace_period"], reduction_factor=asha["reduction_factor"],
                         stop_last_trials=False)


class UniqueOptunaSearch(OptunaSearch):
    """OptunaSearch that never hands out a point it has already handed out, and whose Optuna study
    holds exactly what Tune ran, across restores.

    A repeat (TPE on categorical values) is told back to Optuna as pruned and another point asked
    for; after MAX_REPEATS repeats in a row the searcher reports FINISHED instead of running a
    duplicate. `_seen` is saved with the searcher's state, so a restored study remembers it.

    Optuna states: COMPLETE = the trial ran to its end (its best validation metric is the value),
    FAIL = it diverged or crashed, PRUNED = ASHA stopped it (the last reported value stays).
    Intermediate values are reported at our own step (Tune's iteration restarts on restore).

    With a journal, the pickled searcher reopens the same journal file: Tune.restore brings back
    the searcher of its last snapshot, and the journal may have moved on since. Three cases follow:
    a trial told after the snapshot is not told again; an Optuna trial asked after the snapshot
    (unknown to the restored Tune) is failed and its point queued again, so no grid point is lost;
    an errored trial that Tune runs again (resume_errored) gets a new Optuna trial with its params,
    so its result is not dropped (Optuna cannot reopen a finished trial).
    """

    MAX_REPEATS = 100

    def suggest(self, trial_id: str):
        seen = self.__dict__.setdefault("_seen", set())
        for _ in range(self.MAX_REPEATS):
            params = super().suggest(trial_id)
            if not isinstance(params, dict):
                return params
            key = tuple(sorted((k, repr(v)) for k, v in params.items()))
            if key not in seen:
                seen.add(key)
                return params
            if not self._tell(self._ot_trials.pop(trial_id), None, TrialState.PRUNED):
                return Searcher.FINISHED  # BruteForceSampler: every grid point is taken
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._live(trial_id, reopen=True)
        # Optuna's intermediate values are keyed by our own optimizer step (an int, monotonic across restores).
        step, value = result.get("step"), result.get(self.metric)
        if trial is None or step is None or not _finite(value):
            return
        if step not in self._frozen(trial).intermediate_values:  # a resumed trial repeats its last eval
            trial.report(value, step)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        trial = self._live(trial_id, reopen=not error)
        if trial is None:
            return  # told before the driver stopped: the trial ended after Tune's last snapshot
        result = result or {}
        value = result.get(self.metric)
        if error or result.get("status") == "failed" or not _finite(value):
            state, value = TrialState.FAIL, None
        elif "status" not in result:  # only final results carry a status: stopped early (ASHA)
            state, value = TrialState.PRUNED, None
        else:
            state = TrialState.COMPLETE
        self._tell(trial, value, state)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        self.reopen_journal()

    def reopen_journal(self) -> None:
        """After a restore: the journal may hold trials asked after the restored snapshot."""
        if self._storage is None:
            return
        known = {trial._trial_id for trial in self._ot_trials.values()}
        for frozen in self._ot_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if frozen._trial_id not in known:
                # Asked after Tune's last snapshot: the restored Tune never runs it. Set directly in the
                # storage: a sampler's after_trial must not count it as a visited grid point.
                self._storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL)
                self._ot_study.enqueue_trial(frozen.params)

    # -- helpers
    def _frozen(self, trial: optuna.Trial) -> optuna.trial.FrozenTrial:
        return self._ot_study._storage.get_trial(trial._trial_id)

    def _live(self, trial_id: str, reopen: bool) -> optuna.Trial | None:
        """The Optuna trial of a Tune trial if it can still be reported to / told, else None."""
        trial = self._ot_trials.get(trial_id)
        if trial is None:
            return None
        frozen = self._frozen(trial)
        if frozen.state == TrialState.RUNNING:
            return trial
        if frozen.state == TrialState.FAIL and reopen:  # an errored trial that Tune runs again
            storage = self._ot_study._storage
            new_id = storage.create_new_trial(self._ot_study._study_id, template_trial=optuna.trial.create_trial(
                state=TrialState.RUNNING, params=frozen.params, distributions=frozen.distributions))
            self._ot_trials[trial_id] = optuna.Trial(self._ot_study, new_id)
            return self._ot_trials[trial_id]
        return None

    def _tell(self, trial: optuna.Trial, value: float | None, state: TrialState) -> bool:
        """Tell Optuna; False when BruteForceSampler found its grid exhausted. It then calls
        Study.stop, which raises outside study.optimize; Optuna has stored the state by then."""
        try:
            self._ot_study.tell(trial, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            return False
        return True


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
