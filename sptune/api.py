"""sptune from Python (a notebook): run or resume a study, read its results as pandas DataFrames.

    import sptune
    study = sptune.run_study("configs/listops_mini_transformer.yaml", ["optim.max_steps=300"], dir="runs/s1")
    df = sptune.load_results(study)                  # one row per trial, every stage
    sptune.load_history(df.run_dir[0])              # that trial's evals

`sptune study` and `sptune resume` are run_study and resume_study with the same options
(sptune.search.options: the flags of `sptune study` and of the paper-experiment scripts). What a study
prints (`output`): "progress" (default: a bar per stage, a line per finished trial, the table),
"verbose" (also Ray Tune's tables and every trial's output), "quiet" (the table only). Whatever the
choice, everything Ray and the trials print goes to <study>/study.log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sptune import files
from sptune.config import STAGES
from sptune.errors import UserError

if TYPE_CHECKING:
    from sptune.records.study_state import StudyState
    from sptune.search.options import Options

OUTPUTS = ("progress", "verbose", "quiet")


def default_dir(config: str | Path, smoke: bool = False, seeds: bool = False) -> Path:
    return Path("runs") / f"{'seeds' if seeds else 'study'}-{Path(config).stem}{'-smoke' if smoke else ''}"


def run_study(config: str | Path, overrides: Sequence[str] = (), dir: str | Path | None = None, *,
              search_space: str | Path | None = None, options: "Options | None" = None, address: str | None = None,
              output: str = "progress", seeds: Sequence[int] | None = None, storage: str | None = None,
              **option_values: Any) -> Path:
    """Create a study (see `sptune study --help` for each option) and run it; returns its directory.

    `config` is a YAML file, `overrides` section.field=value strings; `dir` defaults to
    runs/study-<config name> (runs/seeds-<config name> with `seeds`). The search and resource options are
    `options` (sptune.search.options.Options, the flags of `sptune study`), with any of its fields given
    by name on top, e.g. `run_study(cfg, num_samples=4, logger="mlflow")`. `seeds`: the same study once
    per seed (one study directory each, every seed a cell of the engine's one Tune run) and the paired
    SPT - scratch gain with its 95% CI (sptune.records.seeds). `time_budget_s`: stop cleanly after that
    many wall seconds of this run (what finished is reported; resume continues). `storage`: an object-storage
    prefix (s3://bucket/prefix) the study is mirrored under, as <prefix>/<directory name>, so it outlives the
    cluster (sptune.records.storage). Raises UserError for a bad option, before any Ray work.
    """
    from sptune.records import seeds as seed_cells, storage as durable, studies
    from sptune.search.options import with_values

    options = with_values(options, option_values)
    _check_output(output)
    if storage is not None:
        durable.filesystem(storage)  # a bad URI or missing credentials fail before anything is made
    study_dir = Path(dir) if dir else default_dir(config, options.smoke, bool(seeds))
    space = str(search_space) if search_space else None
    state = None  # a study's, as created: its driver runs it without reading back what was just written
    if seeds:
        spec = seed_cells.create(str(config), list(overrides), study_dir, list(seeds), space, options)
        header = [f"multi-seed study {study_dir.resolve()}: seeds {' '.join(map(str, spec['seeds']))}, "
                  f"one study directory per seed (seed-<s>/)"]
    else:
        state = studies.create(str(config), list(overrides), study_dir, space, options)
        header = [f"study {state.dir}: search space {state.space['path']}, up to "
                  f"{state.options.num_samples} trials per stage, {state.options.max_concurrent} at once",
                  studies.describe_path(state.options), *task_lines(state.stages["scratch"]["task"])]
    if storage is not None:
        header.append(f"mirrored to {durable.attach(study_dir.resolve(), storage)}")
    return _run(study_dir.resolve(), address, output, header, time_budget_s=options.time_budget_s, state=state)


def task_lines(task: dict[str, Any]) -> list[str]:
    """A files task's inferred settings (sptune.tasks.files.describe): the run says what it read."""
    from sptune.experiment.evaluate import task_lines as described

    return described(task["name"], task.get("path", ""))


def resume_study(study_dir: str | Path, *, address: str | None = None, output: str = "progress",
                 retry_failed: bool = False, time_budget_s: float | None = None) -> Path:
    """Continue a study or a multi-seed study whose driver stopped: finished trials are kept, unfinished
    ones continue; `retry_failed` also reruns crashed trials of finished stages from their last checkpoint.
    `study_dir` may be its storage URI (s3://...): the folder is pulled back to the path it had first (a new
    cluster after `ray down`). An experiment continues by running its script again with the same flags."""
    from sptune.records import layout, storage, study_state

    _check_output(output)
    study_dir = storage.pull(str(study_dir)) if storage.is_remote(study_dir) else Path(study_dir).resolve()
    kind = layout.kind_of(study_dir)
    if kind == layout.EXPERIMENT:
        raise UserError(f"{study_dir} is an experiment: run its experiments/*.py script again with the same flags "
                        f"to continue it")
    done, state = [], None
    if kind == layout.STUDY:
        state = study_state.load(study_dir)  # this start's one read of study.json, handed to its driver
        done = [p for p in state.stage_status if state.stage_done(p)]
    return _run(study_dir, address, output, [f"resuming {study_dir}" + (f" (done: {', '.join(done)})" if done
                                                                         else "")], retry_failed, time_budget_s, state)


def evaluate(model: str, task: str, baselines: Sequence[str] | None = None, seeds: Sequence[int] | None = None,
             overrides: Sequence[str] = (), dir: str | Path | None = None, *, task_path: str = "",
             smoke: bool = False, compute_tied: bool = False, backend: str | None = None,
             options: "Options | None" = None, address: str | None = None, **option_values: Any):
    """`sptune evaluate` from Python: `model` (a built-in layer, a registered or entry-point name, or
    "package.module:factory") against `baselines` (default transformer and s4d-legs) on `task`, each scratch and
    self-pretrained with the same grid and budget per arm, as one experiment; returns the architecture table
    as a pandas DataFrame (sptune.report.architectures.frame: scratch, SPT, SPT gain, each gap and its
    change, with paired 95% intervals over `seeds`). `dir` defaults to runs/evaluate/<model>-<task>[-smoke];
    rerunning resumes it. `backend`: "tune" (default) or "plain" (default with `smoke`: no search)."""
    from sptune import registry
    from sptune.experiment import evaluate as comparison
    from sptune.experiment.backends import run_experiment
    from sptune.report import architectures, writer
    from sptune.search.options import with_values

    options = with_values(options, option_values)
    plan = comparison.build_plan(model, task, baselines or comparison.DEFAULT_BASELINES, list(seeds or [0]),
                                 list(overrides), task_path, smoke=smoke, compute_tied=compute_tied)
    plan.smoke, plan.backend = smoke, backend or ("plain" if smoke else "tune")
    name = f"{registry.slug(model)}-{task}{'-smoke' if smoke else ''}"
    experiment_dir = Path(dir) if dir else Path("runs") / "evaluate" / name
    run_experiment(experiment_dir, plan, options, address)
    return architectures.frame(writer.write(experiment_dir).rows, plan.layout["architectures"])


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise UserError(f"output={output!r}; choose one of: {', '.join(OUTPUTS)}")


def _run(results_dir: Path, address: str | None, mode: str, header: list[str], retry_failed: bool = False,
         time_budget_s: float | None = None, state: "StudyState | None" = None) -> Path:
    """Run a study or a multi-seed study (its kind from the folder), then print its report. `state`: a study's
    state where the caller holds it (just created, or read to resume)."""
    from sptune import output
    from sptune.experiment.engine import driver, mirroring
    from sptune.records import layout
    from sptune.report import writer

    log_path = results_dir / files.STUDY_LOG
    with mirroring.mirrored(results_dir), \
            output.captured(log_path, echo=mode == "verbose", show_trials=mode != "quiet") as console:
        if mode != "quiet":
            for line in header + [f"log: {log_path}   (Ray, Tune and every trial's output)"]:
                console.line(line)
        # Tune's tables always go to the log; the terminal gets them only when echoing (verbose).
        rows = None  # a study's, as its driver collected them
        if layout.kind_of(results_dir) == layout.SEEDS:
            driver.run_seeds(results_dir, address=address, verbose=1, time_budget_s=time_budget_s)
        else:
            rows = driver.run_study(results_dir, address=address, verbose=1, retry_failed=retry_failed,
                                    time_budget_s=time_budget_s, state=state)
        written = writer.write(results_dir, rows=rows)
        console.line()
        console.line(written.text)
        console.line(_paths_line(results_dir, written.paths))
        console.line(f"log: {log_path}")
    return results_dir


def report(results_dir: str | Path, plots: bool = True, plot_path: str | Path | None = None
           ) -> tuple[str, list[Path]]:
    """The summary table of any results folder (a study, a multi-seed study or an experiment) and the files
    written beside it (`plots`: also a study's PNG plots), from its run directories alone (no training);
    results.csv is rewritten. `plot_path`: a multi-seed study's plot once more at that path.
    `sptune report` and `sptune results` (the latter without plots); sptune.report.writer writes it."""
    from sptune.report import writer

    written = writer.write(results_dir, plots=plots, plot_path=plot_path)
    return written.text, written.paths


def pooled_report(experiment_dirs: list[str | Path], out: str | Path | None = None,
                  design: str | Path | None = None) -> tuple[str, list[Path]]:
    """One report over the seeds of several batches of one experiment (experiment directories or their kept
    records: sptune.report.pool); `out`: also written there (markdown); `design`: a group-sequential design
    file to apply (else the batches' design.json, if any). `sptune report DIR DIR ...`."""
    from sptune.atomic import write_text
    from sptune.report import pool

    text = "\n".join(pool.pooled(experiment_dirs, design))  # a directory without plan.json: load_plan's UserError
    if out is None:
        return text, []
    write_text(Path(out), text + "\n")
    return text, [Path(out)]


def _paths_line(results_dir: Path, paths: list[Path]) -> str:
    if (results_dir / files.OPTUNA_JOURNAL).is_file():
        return f"Optuna: optuna-dashboard {results_dir / files.OPTUNA_JOURNAL}   plots: {len(paths)} PNG"
    return "files: " + ", ".join(str(p) for p in paths)


def succeeded(results_dir: str | Path) -> bool:
    """Every stage of a study is done with a selected trial; every seed of a multi-seed study is paired."""
    from sptune.records import layout, results, seeds as seed_cells

    if layout.kind_of(results_dir) == layout.SEEDS:
        return seed_cells.all_paired(results_dir)
    rows = results.collect(results_dir)
    return all(results.selected_row(rows, stage) for stage in STAGES)


# ----------------------------------------------------------------------------- results as DataFrames
def load_results(study_dir: str | Path):
    """Every trial of a study as a pandas DataFrame, long format: one row per trial, all stages stacked
    (`stage` column), the searched params as columns (`optim.lr`, ...), and two selection flags:

        best_in_stage         the stage's best trial by validation metric (the one the table reports)
        selected_pretraining  the pretraining trial that finetuning started from

    Rows come from the trials' run directories (as results.csv does), so a running study can be read."""
    import pandas as pd

    from sptune.records import results, study_state

    state = study_state.load(study_dir)
    rows = results.collect(state.dir)
    frame = pd.DataFrame(rows, columns=_columns(rows))
    frame["best_in_stage"] = frame["selected"].fillna(False).astype(bool)
    selected = state.selected.trial if state.selected else None
    frame["selected_pretraining"] = (frame["stage"] == "pretrain") & (frame["trial_id"] == selected)
    return frame.drop(columns="selected")


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    from sptune.records import results

    columns = results.COLUMNS[:2] + results.param_keys(rows) + results.COLUMNS[2:]
    return columns + sorted({key for row in rows for key in row} - set(columns))


def load_history(run_dir: str | Path):
    """A run's evals as a pandas DataFrame (step, train_loss, val_loss, val_metric, lr, tokens_per_s):
    from result.json when the run finished, else from last.pt (a run still going or interrupted)."""
    import pandas as pd

    from sptune.run import checkpoints

    run_dir = Path(run_dir)
    result = run_dir / files.RESULT
    if result.is_file():
        history = files.read_json(result)["history"]
    elif (run_dir / files.LAST).is_file():
        history = checkpoints.load(run_dir / files.LAST)["state"]["history"]
    else:
        raise UserError(f"{run_dir} has no {files.RESULT} or {files.LAST}: not a run directory "
                        f"(or it has not reached its first eval)")
    return pd.DataFrame(history)
