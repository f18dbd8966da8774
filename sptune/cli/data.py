"""`sptune data list | verify <task|DIR> | prepare <task> --from <source>`: where each task's data
lives, whether it is intact, and how to put it there.

`verify DIR` checks a directory of the researcher's own files (the `files` task, task.path=DIR;
sptune.tasks.files) instead of a registered task: an argument with a path separator, or a directory
that is not also a task name, is such a directory.

Exit codes of the subcommands: 0 ok, 1 `verify` found problems, 2 usage errors (a UserError, which
the CLI prints on one line).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sptune.errors import UserError
from sptune.tasks import files as files_task
from sptune.tasks.base import Task


def _registry() -> dict[str, Task]:
    from sptune.registry import TASKS  # lazy: the registry imports every task module

    return TASKS


def _get(name: str) -> Task:
    from sptune.registry import get_task  # lazy, as in _registry

    return get_task(name)


def _location(task: Task) -> Path:
    """Where the loader will read: the data directory, or for a Hub task with no local copy the
    Hugging Face cache entry it falls back to."""
    data_dir = task.data_dir()
    if "hub_id" in task.extras and not data_dir.exists():
        from sptune.tasks.hub import hf_cache_dir

        return hf_cache_dir(task)
    return data_dir


def verify_task(name: str) -> list[str]:
    """Problems with a task's data, each naming the missing or malformed path and the fix."""
    task = _get(name)
    if task.embedded:
        return []  # generated locally on first use: nothing to download or damage
    if task.verifier is not None:
        return task.verifier(task, task.data_dir())
    if not task.data_dir().exists():
        return [f"missing {task.data_dir()}; {task.data_hint}"]
    return []


def _status(task: Task) -> tuple[str, list[str]]:
    if task.embedded:
        return ("generated" if task.data_dir().exists() else "generated on first use"), []
    problems = verify_task(task.name)
    if not problems:
        return "ok", []
    if not _location(task).exists():
        return "missing", [task.data_hint]
    return f"{len(problems)} problem(s)", problems  # each names its path and fix


def list_tasks() -> str:
    """A table of every registered task: where its data is read from and whether it is there."""
    rows = []
    for name in sorted(_registry()):
        task = _registry()[name]
        status, notes = _status(task)
        rows.append((name, status, str(_location(task)), notes))
    width = max(len(r[0]) for r in rows)
    status_width = max(len(r[1]) for r in rows)
    lines = [f"{'task':<{width}}  {'status':<{status_width}}  data"]
    for name, status, where, notes in rows:
        lines.append(f"{name:<{width}}  {status:<{status_width}}  {where}")
        lines.extend(f"{'':<{width}}    - {note}" for note in notes)
    return "\n".join(lines)


def prepare_task(name: str, source: str) -> None:
    """Unpack or convert `source` (a directory, a tar/zip archive, or `hub`) into the task's data
    directory, then verify the result."""
    task = _get(name)
    if task.embedded:
        raise UserError(f"{name} is generated locally on first use; there is nothing to prepare")
    if task.preparer is None:
        raise UserError(f"{name} has no preparer; {task.data_hint}")
    path = Path(source).expanduser()
    if source != "hub" and not path.exists():
        raise UserError(f"--from {source}: no such file or directory")
    task.preparer(task, path, task.data_dir())
    problems = verify_task(name)
    if problems:
        raise UserError(f"{name}: the prepared data failed verification: {problems[0]}")


# --- argparse ---------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    print(list_tasks())
    return 0


def is_files_dir(arg: str) -> bool:
    """Whether `verify` reads `arg` as a files-task directory rather than a task name: it has a path
    separator, or is an existing directory (a registered task name wins over a same-named directory in
    the working directory)."""
    if any(sep and sep in arg for sep in (os.sep, os.altsep)):
        return True
    return Path(arg).expanduser().is_dir() and arg not in _registry()


def verify_files_dir(path: str) -> int:
    """Print every problem with the files in `path` (exit code 1), or `DIR: ok` and what was inferred (0)."""
    try:
        task = files_task.load_files_task(path)
    except UserError as error:  # load_files_task names only the first problem: list them all
        for problem in files_task.verify_dir(path) or [str(error)]:
            print(problem)
        return 1
    print(f"{task.data_subdir}: ok")
    print(files_task.describe(task))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    if is_files_dir(args.task):
        return verify_files_dir(args.task)
    problems = verify_task(args.task)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{args.task}: ok ({_location(_get(args.task))})")
    return 1 if problems else 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    prepare_task(args.task, args.source)
    print(f"{args.task}: prepared in {_get(args.task).data_dir()}")
    return 0


def register(subparsers) -> None:
    """Add `data list|verify|prepare` to an argparse subparsers object. Each leaf parser sets
    `func(args) -> exit code`."""
    data = subparsers.add_parser("data", help="list, verify and prepare task data",
                                 description="Where each task's data lives ($SPTUNE_DATA), whether it is intact, "
                                             "and how to place it.")
    commands = data.add_subparsers(dest="data_command", metavar="{list,verify,prepare}", required=True)
    commands.add_parser("list", help="every task, where its data is and whether it is present").set_defaults(
        func=_cmd_list)
    verify = commands.add_parser("verify", help="check a task's files, or a directory of your own files "
                                                "(exit 1 if any is missing or malformed)")
    verify.add_argument("task", metavar="TASK|DIR",
                        help="a registered task name, or a directory of your own data (task.name=files "
                             "task.path=DIR): train/test (+ val) as .npz, parquet or a datasets save_to_disk "
                             "directory, with inputs, targets and optional lengths")
    verify.set_defaults(func=_cmd_verify)
    prepare = commands.add_parser("prepare", help="unpack or convert downloaded data into the expected layout")
    prepare.add_argument("task")
    prepare.add_argument("--from", dest="source", required=True, metavar="PATH",
                         help="a directory, a tar/zip archive, or `hub` (Hugging Face tasks, needs network)")
    prepare.set_defaults(func=_cmd_prepare)
