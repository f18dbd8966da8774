"""`sptune` command line: pretrain, finetune, scratch, compare, data, doctor.

    sptune pretrain configs/listops_mini_transformer.yaml optim.lr=1e-3
    sptune finetune configs/listops_mini_transformer.yaml --from runs/pretrain-listops-mini-transformer-s0-845c8a
    sptune scratch  configs/listops_mini_transformer.yaml
    sptune compare  configs/listops_mini_transformer.yaml      # scratch vs SPT side by side
    sptune compare  configs/pathfinder_tiny_transformer.yaml --seeds 0 1 2   # per seed + paired gain, 95% CI
    sptune doctor   [--address auto]   # can this node (every Ray node) train? backends, versions, tokens/s
    sptune evaluate --model my_layers:make_layer --task ucr-osuleaf --seeds 0 1 2   # your layer vs the baselines

User mistakes (bad values, unknown names, missing data) print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from sptune.errors import UserError
from sptune.experiment.engine import interrupts


def _config(args: argparse.Namespace, stage: str):
    """The stage's config from the command line (sptune.run.train's entry points check its names)."""
    from sptune import config

    return config.load(args.config, args.overrides, stage=stage)


def _print_result(result: dict[str, Any]) -> None:
    if result["status"] != "completed":
        print(f"{result['stage']} FAILED: {result['reason']} (run dir {result['run_dir']})")
        return
    print(f"{result['stage']} done: best val {result['metric']} {result['best_val']:.4f} (val loss "
          f"{result['best_val_loss']:.4f}) at step {result['best_step']}, test {result['test_metric']:.4f}; "
          f"{result['device_seconds']:.0f} device-s, {result['train_flops'] + result['eval_flops']:.3g} FLOPs "
          f"-> {result['run_dir']}")


def cmd_stage(args: argparse.Namespace) -> int:
    from sptune.run import train

    cfg = _config(args, args.command)
    if args.command == "finetune":
        result = train.finetune(cfg, args.from_run, restart=args.restart)
    else:
        result = getattr(train, args.command)(cfg, restart=args.restart)
    _print_result(result)
    return 0 if result["status"] == "completed" else 1


def cmd_compare(args: argparse.Namespace) -> int:
    if args.seeds:
        return compare_seeds(args)
    results = compare_once(args)
    print(compare_table(results))
    return 0 if all(r["status"] == "completed" for r in results.values()) else 1


def compare_once(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """pretrain -> finetune from its best checkpoint, and scratch, with the config (+ overrides) as given."""
    from sptune.run import train

    return train.run_protocol(lambda stage: _config(args, stage), restart=args.restart)


def compare_seeds(args: argparse.Namespace) -> int:
    """`compare --seeds 0 1 2`: the single-seed comparison once per seed (run.seed=S, default run names carry
    the seed), then the paired gain over seeds with its 95% Student-t interval (sptune.report.pairs and
    sptune.report.stats)."""
    import time

    from sptune.report import pairs

    pairs.check_seeds(args.seeds, args.overrides)
    if any(o.split("=", 1)[0].endswith("run.name") for o in args.overrides):
        raise UserError("--seeds runs one set of run directories per seed; leave run.name to its default")
    seed_pairs, metric, base = [], None, list(args.overrides)
    for seed in args.seeds:
        start = time.perf_counter()
        args.overrides = [*base, f"run.seed={seed}"]
        results = compare_once(args)
        print(f"--- seed {seed}")
        print(compare_table(results))
        done = {stage: r for stage, r in results.items() if r.get("status") == "completed"}
        metric = metric or results["scratch"].get("metric")
        seed_pairs.append(pairs.of_seed(seed, done, time.perf_counter() - start,
                                        "completed" if {"finetune", "scratch"} <= set(done) else "a stage failed"))
    args.overrides = base
    print()
    print(pairs.table(seed_pairs, metric))
    return 0 if all(p.complete for p in seed_pairs) else 1


def compare_table(results: dict[str, dict[str, Any]]) -> str:
    scratch = results["scratch"]
    rows = [("scratch", scratch)]
    if "finetune" in results:
        rows.append(("SPT (pretrain -> finetune)", results["finetune"]))
    metric = scratch["metric"]
    pre = results["pretrain"]
    lines = [f"task {scratch['task']} | model {scratch['model']} ({scratch['n_params']:,} parameters) | "
             f"metric {metric}",
             f"pretraining: {pre['steps']} steps, best val {pre['metric']} "
             + (f"{pre['best_val']:.4f}" if pre.get("best_val") is not None else "n/a")
             + f" ({pre['status']}, {pre['device_seconds']:.0f} device-s)",
             "",
             f"{'':28s} {'val (best)':>10s} {'val loss':>8s} {'test':>8s} {'steps':>7s} {'device-s':>8s} {'FLOPs':>9s}"]
    for name, r in rows:
        if r["status"] != "completed":
            lines.append(f"{name:28s} FAILED: {r['reason']}")
            continue
        runs = [r, pre] if name.startswith("SPT") else [r]  # SPT's cost includes its pretraining
        seconds = sum(x["device_seconds"] for x in runs)
        flops = sum(x["train_flops"] + x["eval_flops"] for x in runs)
        lines.append(f"{name:28s} {r['best_val']:10.4f} {r['best_val_loss']:8.4f} {r['test_metric']:8.4f} "
                     f"{r['steps']:7d} {seconds:8.0f} {flops:9.3g}")
    if "finetune" in results and results["finetune"]["status"] == "completed" and scratch["status"] == "completed":
        gain = results["finetune"]["test_metric"] - scratch["test_metric"]
        lines.append(f"\nSPT - scratch (test {metric}): {gain:+.4f}   "
                     f"(SPT device-seconds and FLOPs include pretraining)")
    return "\n".join(lines)


def cmd_doctor(args: argparse.Namespace) -> int:
    from sptune import doctor

    from sptune import config, registry

    registry.check_names(config.load(None, [f"model.name={args.model}"]))  # a layer's contract, before any node
    address = doctor.cluster_address(args.address)
    if address:
        reports = doctor.check_cluster(address, seconds=args.seconds, model=args.model)
    else:
        reports = [doctor.check_node(seconds=args.seconds, model=args.model)]
    print("\n".join(doctor.format_report(r) for r in reports))
    if address:
        able = sum(r["can_train"] for r in reports)
        print(f"{able} of {len(reports)} node(s) can train")
    return 0 if reports and all(r["can_train"] for r in reports) else 1


def cmd_evaluate(args: argparse.Namespace) -> int:
    """`sptune evaluate ...`: the experiment command line (sptune.cli.experiment) over sptune.experiment.evaluate;
    its directory runs/evaluate/<model>-<task>[-smoke] unless --dir names one."""
    from sptune import registry
    from sptune.cli import experiment as experiments_cli
    from sptune.experiment import evaluate

    known, _ = evaluate.name_parser().parse_known_args(args.arguments)
    name = f"{registry.slug(known.model or 'model')}-{known.task or 'task'}"
    return experiments_cli.main(name, evaluate.build, evaluate.__doc__, args.arguments, extra=evaluate.add_flags,
                                root=Path("runs") / "evaluate", prog="sptune evaluate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sptune", description="Self-pretraining for long-sequence models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    helps = {"pretrain": "self-pretrain (masked or causal denoising) on the task's own training data",
             "finetune": "finetune from the best checkpoint of a pretraining run",
             "scratch": "train on the task from a random init (the baseline)",
             "compare": "scratch vs SPT (pretrain then finetune) on one task/model; prints both test metrics"}
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("config", help="YAML config file (see configs/)")
        p.add_argument("overrides", nargs="*", help="section.field=value, e.g. optim.lr=5e-4 model.name=s4")
        if name == "finetune":
            p.add_argument("--from", dest="from_run", required=True, help="pretraining run directory")
        p.add_argument("--restart", action="store_true",
                       help="start the run over: deletes last.pt, best.pt, result.json and tb/ of this config's run "
                            "directory (that directory only, and only because you asked) and trains from step 0; "
                            "needed to reuse a run.name that holds another config or a damaged checkpoint"
                            + ("; applies to all three runs" if name == "compare" else ""))
        if name == "compare":
            p.add_argument("--seeds", nargs="+", metavar="S",
                           help="compare once per seed (run.seed=S) and report the mean paired SPT - scratch "
                                "gain with its 95%% Student-t interval")
        p.set_defaults(func=cmd_compare if name == "compare" else cmd_stage)
    doctor_help = ("check that this node (or, with --address / RAY_ADDRESS, every node of a running Ray cluster) "
                   "can train: device, torch/CUDA versions, which attention and SSM kernels work and are used, "
                   "and training tokens/s; exit 0 when every node can train, else 1")
    p = sub.add_parser("doctor", help=doctor_help, description=doctor_help)
    p.add_argument("--address", default=None,
                   help="Ray cluster to check node by node ('auto' = the running one); default: RAY_ADDRESS, "
                        "else this machine only")
    p.add_argument("--seconds", type=float, default=2.0, help="length of the throughput measurement")
    p.add_argument("--model", default="transformer",
                   help="the model whose training throughput is measured (a built-in layer, an entry-point name or "
                        "package.module:factory: it must import on every node)")
    p.set_defaults(func=cmd_doctor)
    evaluate_help = ("does your architecture still win once everyone is self-pretrained? --model (a built-in layer, "
                     "an entry-point name or package.module:factory) against --baselines on --task, scratch vs SPT "
                     "with the same grid and budget per arm; `sptune evaluate --help` for its flags")
    from sptune.cli import data as data_cli, experiment as experiments_cli, power as power_cli, study as study_cli
    from sptune.experiment import evaluate

    # Its flags listed here (help); main() hands its command line to the experiment parser itself.
    sub.add_parser("evaluate", help=evaluate_help, description=evaluate_help, add_help=False,
                   parents=[experiments_cli.build_parser(evaluate_help, evaluate.add_flags, add_help=False)])

    data_cli.register(sub)  # data list | verify | prepare
    study_cli.register(sub)  # study | resume | results | plan (Ray Tune)
    experiments_cli.register(sub)  # report (experiments, studies)
    power_cli.register(sub)  # power | design (seeds you can plan, sequential looks)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["evaluate"]:  # its own command line (flags before and after the overrides), not argparse's here
        return cmd_evaluate(argparse.Namespace(arguments=argv[1:]))
    parser = build_parser()
    # Overrides may come after options (`finetune cfg --from run optim.lr=1e-4`): argparse leaves
    # those unparsed, so collect every leftover that looks like section.field=value.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "overrides") or any("=" not in item or item.startswith("-") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if getattr(args, "seeds", None):
        # `--seeds 0 1 2 optim.lr=1e-3`: the list ends where the section.field=value overrides begin.
        values = [item for item in args.seeds if "=" not in item]
        if any(not v.lstrip("-").isdigit() for v in values):
            parser.error(f"--seeds takes integers, got {' '.join(values)}")
        args.overrides = [*args.overrides, *(item for item in args.seeds if "=" in item)]
        args.seeds = [int(v) for v in values]
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    interrupts.install()
    try:
        return args.func(args)
    except UserError as exc:
        print(f"sptune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        return interrupts.stopped(stop, "from the last checkpoints")


if __name__ == "__main__":
    sys.exit(main())
