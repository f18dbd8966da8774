"""Pooling an experiment's batches of seeds (`sptune report DIR DIR ...`): the batches' kept records (plan.json +
summary.csv) give the same intervals as one run over all their seeds, and batches that ran other settings, or a
seed twice, are refused."""

import csv
import re
from pathlib import Path

import pytest

from study_scripts import load_study
from sptune.cli import experiment as experiments_cli
from sptune.cli.main import main
from sptune.errors import UserError
from sptune.experiment.plan import load_plan, save_plan
from sptune.report import pool, stats, tables as report

REPO = Path(__file__).resolve().parents[1]
ARMS = {("Transformer", "scratch"): 0.40, ("Transformer", "masked"): 0.47, ("S4D", "scratch"): 0.74,
        ("S4D", "masked"): 0.73}


def build_plan(seeds, *flags, study="architectures"):
    script = load_study(study)
    args = experiments_cli.parse_args("", ["--seeds", *map(str, seeds), *flags], extra=script.add_flags)
    plan = script.build(args)
    plan.backend = "tune"
    return plan


def accuracy(model, arm, seed, fraction=1.0):
    """A test accuracy per arm and seed that differs from seed to seed (k / 242, as on OSULeaf's test set), lower
    on less training data."""
    spread = 5 * ((seed * 7 + len(model) + len(arm)) % 5 - 2)
    return round(242 * ARMS[(model, arm)] * (0.8 + 0.2 * fraction) + spread) / 242


def outcomes(model, arm, seed):
    """242 test outcomes ('0'/'1') whose mean is accuracy(model, arm, seed)."""
    hits = round(242 * accuracy(model, arm, seed))
    return "1" * hits + "0" * (242 - hits)


def keep_record(path, seeds, *flags, facts=False, study="architectures"):
    """A batch's kept record, as its report writes it: plan.json and summary.csv, no cells. With `facts`, each
    arm carries what report.run_facts reads from its last run (best step, budget, training loss, test outcomes)."""
    plan = build_plan(seeds, *flags, study=study)
    path.mkdir(parents=True)
    save_plan(path, plan)
    arms = []
    for cell in plan.cells:
        model, seed, fraction = cell.labels["model"], cell.labels["seed"], cell.labels.get("fraction", 1.0)
        for arm in ("scratch",) if cell.labels.get("compute") == "tied" else ("scratch", "masked"):
            arms.append({**cell.labels, "experiment": plan.experiment, "cell": cell.key, "arm": arm,
                         "row": report.row_label(model, arm), "status": "completed", "metric": "accuracy",
                         "test": accuracy(model, arm, seed, fraction), "val": 0.5, "lr": 1e-3, "n_params": 1000,
                         "device_seconds": 10.0, "search_device_seconds": 30.0, "flops": 1e12, "paper": None,
                         "run_dir": str(path / "cells" / cell.key / arm),
                         **({"best_step": 150, "steps": 400, "train_loss": 0.25,
                             "test_hits": outcomes(model, arm, seed)} if facts else {})})
    report.write_summary(arms, path / "summary.csv")
    return path


def test_two_kept_records_pool_to_the_intervals_over_all_their_seeds(tmp_path):
    first, second = keep_record(tmp_path / "a", [50, 51, 52]), keep_record(tmp_path / "b", [53, 54])
    text = "\n".join(pool.pooled([first, second]))
    seeds = range(50, 55)
    gap_change = stats.paired_t([accuracy("S4D", "masked", s) + accuracy("Transformer", "scratch", s)
                                 for s in seeds],
                                [accuracy("Transformer", "masked", s) + accuracy("S4D", "scratch", s)
                                 for s in seeds])
    assert stats.format_paired(gap_change, 100.0) in text and "n=5" in text
    gain = stats.paired_t([accuracy("Transformer", "masked", s) for s in seeds],
                          [accuracy("Transformer", "scratch", s) for s in seeds])
    assert f"SPT gain {stats.format_paired(gain, 100.0)}" in text
    assert "### Seeds 50, 51, 52, 53, 54 (confirmation seeds" in text
    assert "with test-set sampling" not in text  # the runs' result.json are gone: no interval over test examples
    assert f"`{first}`: kept record (plan.json + summary.csv), seeds 50, 51, 52" in text


def test_batches_of_a_fraction_experiment_pool_to_the_table_of_one_run_over_all_their_seeds(tmp_path):
    """data_fractions --cpu runs its seeds in batches too: two batches' records give the Figure 3 table (paired
    gains, data multipliers) that one record of all their seeds gives."""
    batches = [keep_record(tmp_path / "a", [6, 7], "--cpu", study="data_fractions"),
               keep_record(tmp_path / "b", [8], "--cpu", study="data_fractions")]
    whole = keep_record(tmp_path / "whole", [6, 7, 8], "--cpu", study="data_fractions")
    section = "## Test metric vs training-data fraction"
    pooled_text, whole_text = "\n".join(pool.pooled(batches)), "\n".join(pool.pooled([whole]))
    assert section in pooled_text and pooled_text.split(section)[1] == whole_text.split(section)[1]
    seeds = (6, 7, 8)
    gain = stats.paired_t([accuracy("S4D", "masked", s, 0.25) for s in seeds],
                          [accuracy("S4D", "scratch", s, 0.25) for s in seeds])
    row = next(line for line in pooled_text.splitlines() if line.startswith("| 0.25 |"))
    assert stats.format_paired(gain, 100.0) in row and "n=3" in row


def test_a_record_names_its_runs_relative_to_its_directory_and_reads_them_back_where_it_is_kept(tmp_path):
    record = keep_record(tmp_path / "a", [50])
    text = (record / "summary.csv").read_text()
    assert str(tmp_path) not in text and ",cells/ucr-osuleaf-s4-s50/masked," in text
    (tmp_path / "docs").mkdir()
    kept = record.rename(tmp_path / "docs" / "records")  # moved into a repository, as docs/records/ are
    arms = pool.batch_arms(kept, load_plan(kept), record=True)
    assert {a["run_dir"] for a in arms if a["cell"] == "ucr-osuleaf-s4-s50" and a["arm"] == "masked"} == {
        str(kept / "cells" / "ucr-osuleaf-s4-s50" / "masked")}
    outside = tmp_path / "elsewhere" / "finetune"  # a run outside the experiment directory keeps its own path
    assert report.relative_run_dir(str(outside), kept) == str(outside)


def test_a_record_keeps_the_per_seed_facts_of_its_runs_after_they_are_gone(tmp_path):
    """Best steps, training losses and test outcomes come back from summary.csv: the per-seed table and the
    interval that also resamples the test set are reported from records alone."""
    text = "\n".join(pool.pooled([keep_record(tmp_path / "a", [50, 51], facts=True),
                                  keep_record(tmp_path / "b", [52], facts=True)]))
    assert f"| 52 | confirmation | S4D | masked | {100 * accuracy('S4D', 'masked', 52):.2f} | 150/400 | 0.250 |" in text
    arms = (("S4D", "masked"), ("Transformer", "masked"), ("S4D", "scratch"), ("Transformer", "scratch"))
    both = stats.contrast_with_test_sampling([[outcomes(*a, seed) for a in arms] for seed in (50, 51, 52)],
                                             (1, -1, -1, 1))  # the gap change: + - - +
    assert f"with test-set sampling ± {100 * both.half_width:.2f} [{100 * both.low:+.2f}, {100 * both.high:+.2f}]" \
        in text.split("gap under SPT minus gap under scratch")[1]
    assert "—" not in text.split("Per seed")[1]


def test_a_batch_whose_cells_are_on_disk_is_read_from_them(tmp_path):
    record = keep_record(tmp_path / "a", [50, 51])
    live = tmp_path / "live"
    save_plan(live, build_plan([52]))
    (live / "cells").mkdir()  # its cells have not run: every arm is reported missing, none is read from a record
    text = "\n".join(pool.pooled([record, live]))
    assert "experiment directory, seeds 52" in text
    assert "Not completed (left out of every number above): ucr-osuleaf-transformer-s52/scratch (scratch missing)" in text


def test_batches_of_other_settings_are_not_pooled(tmp_path):
    plain = keep_record(tmp_path / "plain", [50])
    tied = keep_record(tmp_path / "tied", [51], "--compute-tied")
    with pytest.raises(UserError, match="ran other settings than"):
        pool.pooled([plain, tied])


def test_a_seed_in_two_batches_is_refused(tmp_path):
    with pytest.raises(UserError, match="ucr-osuleaf-transformer-s51 \\(scratch\\) is in both"):
        pool.pooled([keep_record(tmp_path / "a", [50, 51]), keep_record(tmp_path / "b", [51, 52])])


def test_sptune_report_reads_a_record_without_rewriting_it_and_pools_several(tmp_path, capsys):
    first, second = keep_record(tmp_path / "a", [50]), keep_record(tmp_path / "b", [51])
    before = (first / "summary.csv").read_bytes()
    assert main(["report", str(first)]) == 0
    assert (first / "summary.csv").read_bytes() == before and "n=1" in capsys.readouterr().out
    out = tmp_path / "pooled.md"
    assert main(["report", str(first), str(second), "--out", str(out)]) == 0
    assert "n=2" in out.read_text() and f"file:  {out}" in capsys.readouterr().out
    assert main(["report", str(first), str(first)]) == 2
    assert capsys.readouterr().err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize("decision", ["**The decision, at the declared 20 seeds**",
                                      "**The rotary decision, at the declared 20 seeds**"])
def test_the_readme_confirmation_figures_are_what_its_kept_records_pool_to(decision):
    """The README's decision on each declared confirmation quotes the pooled report of docs/records: the
    command it shows, run on the committed records, prints the figures it states."""
    text = (REPO / "README.md").read_text().split(decision, 1)[1].replace("−", "-")
    command = re.search(r"```bash\nsptune report ([^\n`]+)\n```", text).group(1).split()
    lines = "\n".join(pool.pooled([REPO / d for d in command]))
    n = re.search(r"On these (\d+) seeds", text).group(1)
    quoted = {"gap under SPT minus gap under scratch": r"gap change \*\*([-+][\d.]+) \[([-+][\d.]+), ([-+][\d.]+)\]",
              "- Transformer:": r"Transformer SPT gain ([-+][\d.]+) \[([-+][\d.]+),\s+([-+][\d.]+)\]",
              "- S4D:": r"S4D SPT gain ([-+][\d.]+) \[([-+][\d.]+), ([-+][\d.]+)\]"}
    for line_start, figure in quoted.items():
        mean, low, high = re.search(figure, text).groups()
        line = next(l for l in lines.splitlines() if line_start in l)
        assert re.search(rf"{re.escape(mean)} ± [\d.]+ \(95% CI \[{re.escape(low)}, {re.escape(high)}\], n={n}\)",
                         line), (line, mean, low, high)


def latest_pooled_report(record_prefix):
    """docs/results.md's last `sptune report docs/records/<record_prefix>...` command, the text after it, and
    the lines that command prints when run on the committed records."""
    text = (REPO / "docs" / "results.md").read_text()
    command = re.findall(rf"`sptune report (docs/records/{record_prefix}[^`]+)`", text)[-1]
    lines = "\n".join(pool.pooled([REPO / d for d in command.split()])).splitlines()
    return text.split(command, 1)[1], lines


def test_the_data_fractions_table_in_results_is_what_its_kept_records_pool_to():
    """docs/results.md calls its latest pooled data_fractions table unedited: the command above it, run on the
    committed records, prints each of its rows and the correction line kept under it."""
    text, lines = latest_pooled_report("data-fractions")
    table = text.split("\n\n", 2)[1]
    rows = [row for row in table.splitlines() if row.startswith("| 0.") or row.startswith("| 1 ")]
    assert len(rows) == 4 and all(row in lines for row in rows), (rows, lines)
    assert_correction_under(table, text, lines, count=4)


def assert_correction_under(table, text, lines, count):
    """The line kept under a gain table: the correction for its `count` gains read together, as printed."""
    correction = text.split(table, 1)[1].split("\n\n", 2)[1]
    assert correction.startswith(f"The {count} gains read together") and correction in lines, (correction, lines)


def test_the_spt_ratio_tables_in_results_are_what_its_kept_records_pool_to():
    """The same for spt_ratio's latest pooled report: its accuracy and paired-gain rows, every share, and the
    correction for its six gains (2 models x 3 shares) read together."""
    text, lines, gains = assert_table_rows_printed("spt-ratio", r"\| \d+% ", count=7)
    assert_correction_under(gains, text, lines, count=6)


def test_the_model_sizes_tables_in_results_are_what_its_kept_records_pool_to():
    """The same for model_sizes' latest pooled report: its accuracy rows (2 models x scratch / SPT) and its
    paired-gain rows (one per model), every budget."""
    assert_table_rows_printed("model-sizes", r"\| (Transformer|S4D)", count=6)


def test_the_one_split_selection_table_in_studies_is_what_its_kept_record_prints():
    """docs/studies.md quotes the selection over seeds of the `--val-folds` "before" record unedited: each of its
    four rows is a line `sptune report` prints on the committed record."""
    text = (REPO / "docs" / "studies.md").read_text().split("**Before folds, measured", 1)[1]
    lines = "\n".join(pool.pooled([REPO / "docs/records/architectures-selection-1-5-one-split"])).splitlines()
    rows = [row for row in text.split("\n\n", 2)[1].splitlines() if re.match(r"\| (Transformer|S4D) \|", row)]
    assert len(rows) == 4 and all(row in lines for row in rows), (rows, lines)


def assert_table_rows_printed(record_prefix, row_pattern, count):
    """The latest pooled report's accuracy and paired-gain tables in results.md (the first and third blocks after
    its command): their `count` rows matching `row_pattern` are lines the command prints. Returns the text after
    the command, the printed lines and the gain table."""
    text, lines = latest_pooled_report(record_prefix)
    accuracy, _, gains = text.split("\n\n", 4)[1:4]
    rows = [row for row in (accuracy + "\n" + gains).splitlines() if re.match(row_pattern, row)]
    assert len(rows) == count and all(row in lines for row in rows), (rows, lines)
    return text, lines, gains


def entry(gains, base=0.5):
    """A table entry pair (scratch, SPT) whose per-seed gains are `gains` (accuracy, fractions of 1)."""
    def members(shift):
        return {"metric": "accuracy", "members": [{"seed": s, "test": base + shift[s]} for s in range(len(gains))]}
    return members([0.0] * len(gains)), members(gains)


def test_gains_read_together_are_corrected_for_their_number():
    """A gain whose own 95% interval excludes 0 (p = 0.017) does not survive the correction for reading four;
    a large one does. Points for accuracy; the t-quantile for 98.75% at 4 dof is 4.3147 (tables)."""
    borderline = [0.01, 0.0225, 0.035, 0.0475, 0.06]  # mean 3.5 points, 95% CI [+1.05, +5.95]; 98.75% [-0.31, +7.31]
    large = [0.05, 0.06, 0.07, 0.055, 0.065]          # mean 6.0 points, 98.75% [+4.47, +7.53]
    noise = [0.004, -0.002, 0.012, 0.0, -0.008]
    assert stats.t_interval(borderline).excludes_zero
    line = report.simultaneous_lines([("a", *entry(borderline)), ("b", *entry(large)), ("c", *entry(noise)),
                                      ("d", *entry([-g for g in noise]))])[0]
    assert "(Bonferroni: each at 98.75%)" in line
    assert "a +3.50 [-0.31, +7.31] (p = 0.017); b +6.00 [+4.47, +7.53]" in line
    assert line.endswith("Excluding 0 after the correction: b.")
    two = report.simultaneous_lines([("a", *entry(borderline)), ("c", *entry(noise))])[0]
    assert "each at 97.50%" in two and two.endswith("correction: a.")
    assert report.simultaneous_lines([("a", *entry(borderline))]) == []
    assert report.simultaneous_lines([("a", *entry(borderline)), ("b", *entry([0.01, 0.02]))]) == []  # n=2


def test_the_cross_cpu_table_in_results_is_what_its_two_records_hold():
    """docs/results.md compares seed 11's 20K cells on two kinds of CPU: each row's selected lr and test accuracy
    are the arm's in the AMD record (model-sizes-cpu-11) and in the Intel rerun (model-sizes-cpu-11-20K-intel)."""
    text = (REPO / "docs" / "results.md").read_text().split("### The same seed on another kind of CPU", 1)[1]
    records = [read_summary(REPO / "docs" / "records" / name)
               for name in ("model-sizes-cpu-11", "model-sizes-cpu-11-20K-intel")]
    cell = r"([\d.]+): ([\d.]+)"  # selected lr: test %
    rows = re.findall(rf"^\| (Transformer|S4D), (scratch|masked SPT) \| {cell} \| {cell} \|$", text, re.MULTILINE)
    assert len(rows) == 4, rows
    for model, arm, *quoted in rows:
        for record, (lr, test) in zip(records, [quoted[:2], quoted[2:]]):
            found = next(r for r in record if r["model"] == model and r["column"] == "20K"
                         and r["arm"] == ("masked" if arm == "masked SPT" else "scratch"))
            assert float(found["lr"]) == float(lr) and f"{100 * float(found['test']):.2f}" == test, (model, arm, found)


def read_summary(record_dir):
    with open(record_dir / "summary.csv", newline="") as handle:
        return list(csv.DictReader(handle))
