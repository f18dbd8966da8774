"""The results of a study: one row per trial (all stages stacked, a `stage` column) and a summary.

Rows are built from the trials' run directories (trial.json, result.json, progress.json), never
only from Ray Tune: Tune forgets or re-numbers things across restores (and Optuna drops the result
of a resumed errored trial), while every run directory says exactly what it ran and reached.

    sptune results <study dir>      # rewrites <study dir>/results.csv and prints the summary

Selection rule (Appendix C.1): in each stage the trial with the best validation metric wins, a tie
broken by the lower validation loss (sptune.selection, the rule that also picks each run's best
checkpoint), and its test metric is the one measured at that trial's best-validation checkpoint;
finetuning starts from the selected pretraining trial's best checkpoint.

Cost columns: device_seconds = (train_seconds + eval_seconds) x devices; train_flops / eval_flops are
the FLOPs counted on the model as it runs (sptune.flops).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Sequence

from sptune import files, protocol
from sptune.atomic import write_text as write_text_atomic
from sptune.config import STAGES
from sptune.records import study_state
from sptune.records.study_state import Selection, StudyState
from sptune.records.trial_rows import COLUMNS, RESULT_KEYS, TrialRow
from sptune.search import boundary

RULE = ("selection: per stage, the trial with the best validation metric (a tie, i.e. the same number of correct "
        "targets or an equal R², broken by the lower validation loss); its test metric is measured at that trial's "
        "best-validation checkpoint (chosen by the same rule); finetuning starts from the selected pretraining "
        "trial's best checkpoint")


def collect(study_dir: str | Path, state: StudyState | None = None) -> list[TrialRow]:
    """Every trial of the study, in stage order then run-directory order; `state`: its study.json where the
    caller holds it (the engine), else read here."""
    study_dir = Path(study_dir)
    state = state if state is not None else study_state.read(study_dir)
    rows = []
    for stage in STAGES:
        stage_dir = study_dir / stage
        if not stage_dir.is_dir():
            continue
        stage_done = state is not None and state.stage_done(stage)
        for run_dir in sorted(p for p in stage_dir.iterdir() if (p / "trial.json").is_file()):
            rows.append(trial_row(run_dir, stage_done))
    extensions = state.extensions if state is not None else {}
    for row in rows:
        row["extension"] = is_extension(row, extensions)
    for stage in STAGES:
        best, how = best_row(rows, stage)
        if best is None:
            continue
        if state is not None and state.stage_done(stage):
            best["selected"], best["selected_by"] = True, how
        else:  # a stage stopped mid-way (a time budget, a kill): its best so far is no result (unfinished)
            best["leading"], best["selected_by"] = True, f"{how}; so far, the stage has not finished"
    return rows


def is_extension(row: TrialRow, extensions: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether the trial ran a value its grid's extension added (`extensions`: study.json's record of them,
    per stage; sptune.search.bracketing)."""
    steps = extensions.get(row["stage"], [])
    return any("value" in step and row.get(step["param"]) == step["value"] for step in steps)


def extension_lines(extensions: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each stage's grid extensions, as the table gives them."""
    out = []
    for stage, steps in extensions.items():
        added = [f"{s['param']} {s['side']} to {s['value']:g}" for s in steps if "value" in s]
        stopped = [f"{s['param']} {s['side']}: stopped at {s['stopped']}" for s in steps if "stopped" in s]
        out.append(f"{stage} grid extension: " + "; ".join(added + stopped))
    return out


def trial_row(run_dir: Path, stage_done: bool) -> TrialRow:
    trial = files.read_json(run_dir / "trial.json")
    result_path, progress_path = run_dir / files.RESULT, run_dir / files.PROGRESS
    result = files.read_json(result_path) if result_path.is_file() else None
    progress = files.read_json(progress_path) if progress_path.is_file() else {}
    last = trial["attempts"][-1]
    init = trial.get("init") or {}
    row: TrialRow = {
        "stage": trial["stage"], "trial_id": trial["trial_id"], "path": trial["path"], "devices": trial["devices"],
        "attempts": len(trial["attempts"]), "start_steps": ";".join(str(a["start_step"]) for a in trial["attempts"]),
        "node_id": last["node_id"], "hostname": last["hostname"], "pid": last["pid"],
        "init_trial": init.get("trial"), "init_step": init.get("step"), "init_checkpoint": init.get("checkpoint"),
        "selected": False, "leading": False, "run_dir": str(run_dir),
        "wall_seconds": trial.get("wall_seconds", progress.get("wall_seconds")),
        **{key: value for key, value in trial["params"].items()},
    }
    if result is not None:
        row.update({key: result.get(key) for key in RESULT_KEYS})
        row["device"] = device_name(result)
    else:
        # Crashed after its last retry (Tune's error, sptune.trials.failures), stopped early (ASHA) or
        # still to be resumed: the latest eval is all there is.
        error = files.read_json(run_dir / files.TRIAL_ERROR) if (run_dir / files.TRIAL_ERROR).is_file() else None
        row.update(status="failed" if error else "stopped" if stage_done else "unfinished",
                   reason=error["error"] if error else None, best_val=progress.get("best_val"),
                   best_val_loss=progress.get("best_val_loss"), best_step=progress.get("best_step"),
                   final_val=progress.get("val_metric"), steps=progress.get("step"),
                   train_seconds=progress.get("train_seconds"), eval_seconds=progress.get("eval_seconds"))
    if row.get("train_seconds") is not None:
        row["device_seconds"] = device_seconds(row)
    return row


def device_name(result: dict[str, Any]) -> str | None:
    """The device a finished run trained on (result.json's provenance; None before provenance was kept)."""
    return (result.get("provenance") or {}).get("device_name")


def run_result(row: TrialRow | None) -> dict[str, Any] | None:
    """The result.json of a row's run directory (None: no row, or its run has not finished)."""
    path = Path(row["run_dir"]) / files.RESULT if row and row.get("run_dir") else None
    return files.read_json(path) if path is not None and path.is_file() else None


def device_seconds(row: TrialRow) -> float:
    """Training + evaluation seconds x the devices the trial held (a fractional GPU counts whole)."""
    return (row["train_seconds"] + (row.get("eval_seconds") or 0.0)) * (row.get("devices") or 1)


def param_keys(rows: list[TrialRow]) -> list[str]:
    """The searched config keys (flattened, e.g. optim.lr) present in any row."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if "." in k and k not in keys and k not in COLUMNS]
    return sorted(keys)


def best_row(rows: list[TrialRow], stage: str) -> tuple[TrialRow | None, str]:
    """The selected trial of a stage among its completed ones, and what selected it (sptune.protocol)."""
    return protocol.select([r for r in rows if r["stage"] == stage])


def selected_row(rows: list[TrialRow], stage: str) -> TrialRow | None:
    """The stage's selected trial (None: the stage has not finished, or no trial of it completed)."""
    return next((r for r in rows if r["stage"] == stage and r.get("selected")), None)


def write_csv(rows: list[TrialRow], path: str | Path, prefix: Sequence[str] = ()) -> Path:
    """results.csv, one schema for a study and a paper experiment: one row per trial, the stage and trial
    first, then the searched params, then COLUMNS. An experiment puts its cell columns (experiment, cell,
    the cell's labels) in `prefix`."""
    return write_rows(rows, path, [*prefix, *COLUMNS[:2], *param_keys(rows), *COLUMNS[2:]])


def write_rows(rows: list[TrialRow], path: str | Path, columns: Sequence[str]) -> Path:
    """A CSV of these columns (a key of a row outside them is left out), written atomically."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(columns)), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(Path(path), out.getvalue())
    return Path(path)


# ----------------------------------------------------------------------------- summary
def summary(study_dir: str | Path, rows: list[TrialRow] | None = None) -> str:
    """The study table; `rows` are collect()'s (its selected / leading marks decide each stage's line)."""
    study_dir = Path(study_dir)
    rows = collect(study_dir) if rows is None else rows
    state = study_state.read(study_dir)
    keys = param_keys(rows)
    cfg = state.stages.get("scratch") if state else None
    lines = [f"study {study_dir}"
             + (f": task {cfg['task']['name']}, model {cfg['model']['name']}, search space {state.space['path']}"
                if cfg else ""),
             RULE, ""]
    header = (f"{'stage':9s} {'trials':>6s} {'ok':>3s} {'fail':>4s} {'stop':>4s}  {'best trial':30s} "
              + " ".join(f"{k.rsplit('.', 1)[-1]:>10s}" for k in keys)
              + f" {'metric':>17s} {'val(best)':>9s} {'val loss':>8s} {'@step':>6s} {'test':>7s} {'wall s':>7s}"
              f" {'stage dev-s':>11s} {'stage FLOPs':>11s}  selected by")
    lines.append(header)
    for stage in STAGES:
        mine = [r for r in rows if r["stage"] == stage]
        if not mine:
            status = state.stage_status.get(stage) if state else None
            lines.append(f"{stage:9s} {0:6d}  " + (f"({status})" if status else "(not run)"))
            continue
        counts = [sum(r.get("status") == s for r in mine) for s in ("completed", "failed")]
        stopped = len(mine) - sum(counts)
        best = next((r for r in mine if r.get("selected") or r.get("leading")), None)  # marked by collect()
        stage_cost = sum(r.get("device_seconds") or 0.0 for r in mine)  # every trial of the stage
        if best is None:
            lines.append(f"{stage:9s} {len(mine):6d} {counts[0]:3d} {counts[1]:4d} {stopped:4d}  (no completed trial)")
            continue
        lines.append(f"{stage:9s} {len(mine):6d} {counts[0]:3d} {counts[1]:4d} {stopped:4d}  {best['trial_id']:30s} "
                     + " ".join(f"{_fmt(best.get(k)):>10s}" for k in keys)
                     + f" {best['metric']:>17s} {best['best_val']:9.4f} {_loss(best.get('best_val_loss')):>8s} "
                     f"{best['best_step']:6d} {best['test_metric']:7.4f} {best['wall_seconds'] or 0:7.0f} "
                     f"{stage_cost:11.0f} {stage_flops(rows, stage):11.3g}  {best['selected_by']}")
    lines += _comparison(rows, state.selected if state else None)
    lines += extension_lines(state.extensions if state else {})
    lines += boundary.warnings({stage: selected_row(rows, stage) for stage in STAGES}, state.space if state else {})
    lines += where(rows)
    failed = [r for r in rows if r.get("status") == "failed"]
    for r in failed:
        lines.append(f"failed: {r['stage']} {r['trial_id']}: {r.get('reason')}")
    lines += ["", "wall s: the best trial's wall time; stage dev-s / FLOPs: device-seconds (training + evaluation) / "
                  "training + evaluation FLOPs of all the stage's trials",
              f"all trials ({len(rows)}): {study_dir / files.RESULTS_CSV}",
              f"TensorBoard: tensorboard --logdir {study_dir}   (runs are named <stage>/<stage>-<trial>-<params>)"]
    return "\n".join(lines)


def where(rows: list[TrialRow]) -> list[str]:
    """Where the finished trials ran: a line per device, with the precision, kernels and versions of its runs
    (their result.json's provenance)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        found = (run_result(row) or {}).get("provenance")
        if found:
            runs.setdefault(found["device_name"], []).append(found)
    lines = []
    for device, found in sorted(runs.items()):
        def values(key: str) -> str:
            return "/".join(sorted({str(p[key]) for p in found}))

        kernels = "/".join(sorted({", ".join(p["kernels"]) or "none" for p in found}))
        lines.append(f"ran on {device}: {len(found)} trial(s), precision {values('precision')}, kernels {kernels}; "
                     f"torch {values('torch')}, CUDA {values('cuda')}, Ray {values('ray')}")
    return lines


def stage_flops(rows: list[TrialRow], stage: str) -> float:
    """Training + evaluation FLOPs of every trial of a stage that has a result."""
    return sum((r.get("train_flops") or 0.0) + (r.get("eval_flops") or 0.0) for r in rows if r["stage"] == stage)


def _comparison(rows: list[TrialRow], selected: Selection | None) -> list[str]:
    """The pretraining trial finetuning started from (`selected`, study.json's), and SPT against scratch."""
    scratch, finetune = selected_row(rows, "scratch"), selected_row(rows, "finetune")  # final selections only
    lines = [""]
    if selected:
        lines.append(f"finetuning started from pretraining trial {selected.trial} at its best checkpoint "
                     f"(step {selected.step}, val {selected.best_val:.4f}, val loss "
                     f"{_loss(selected.best_val_loss)}; selected by {selected.selected_by})")
    if scratch is None or finetune is None:
        return lines
    pre_cost = sum(r.get("device_seconds") or 0.0 for r in rows if r["stage"] == "pretrain")
    ft_cost = sum(r.get("device_seconds") or 0.0 for r in rows if r["stage"] == "finetune")
    sc_cost = sum(r.get("device_seconds") or 0.0 for r in rows if r["stage"] == "scratch")
    spt_flops = stage_flops(rows, "pretrain") + stage_flops(rows, "finetune")
    gain = finetune["test_metric"] - scratch["test_metric"]
    lines.append(f"SPT (pretrain -> finetune) vs scratch, test {scratch['metric']}: {finetune['test_metric']:.4f} vs "
                 f"{scratch['test_metric']:.4f} ({gain:+.4f}); search cost {pre_cost + ft_cost:.0f} vs "
                 f"{sc_cost:.0f} device-seconds, {spt_flops:.3g} vs {stage_flops(rows, 'scratch'):.3g} FLOPs "
                 f"(SPT includes every pretraining trial)")
    return lines


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
