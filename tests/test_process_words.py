"""The project speaks of itself only: its code, tests, benchmarks, tools, studies, configs and docs say what the
code does and why (citing the paper where it is the reason), never how the project was built: no tracker
numbers, no accounts of when and where the work was done, no dated history in comments and docstrings.

`process_words(text, path)` is the check, one file at a time; `test_the_tree_speaks_of_itself_only` runs it on
every tracked text file in scope, and `test_the_check_can_fail` shows it catches what it is meant to catch.
A line that trips it by accident (an upstream project's wording, say) goes into one of the explicit allowlists
below, with the reason beside it.

This file names the words it forbids only inside regular expressions and split string literals, so that it
passes its own check.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What is walked: these folders and root files, text files only (records' csv/json, figures' png are data).
FOLDERS = ("sptune", "tests", "benchmarks", "tools", "experiments", "examples", "configs", "search_spaces", "docs",
           ".ci")
ROOT_FILES = ("README.md", "Dockerfile", "cluster.yaml", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
TEXT_NAMES = {"Dockerfile", "run"}  # run: .ci/run, the CI's shell script

# Words that tell how the project was built, wherever they are (code, strings, comments, prose).
PROCESS = re.compile(r"""
      \b[i]ssues?\b                      # a tracker's item, numbered or not ([i]: so this line is not one)
    | \b[r]eq\s*\d+                      # a numbered requirement of one
    | \b[s]ittings?\b                    # a stretch of work on the project
    | \b[l]ent\b                         # a borrowed machine
    | \b[q]uiet\s+machine\b              # the machine the project's numbers were taken on
    | \b[t]his\s+project's\s+machine\b
""", re.IGNORECASE | re.VERBOSE)

# Upstream references and quotations, removed from a line before PROCESS reads it: another project's tracker
# is that project's, not ours, and a library's own message is quoted as data.
UPSTREAM = re.compile(r"""
      github\.com/[\w.-]+/[\w.-]+/(?:[i]ssues|pull)/\d+   # a link to an upstream thread
    | \b[\w.-]+/[\w.-]+\#\d+                               # owner/repo#123
    | Please\ file\ an\ [i]ssue                            # torch's load error (sptune/run/checkpoints.py drops it)
    | "Version":\s*"2012-10-17"                           # AWS's IAM policy-language version, not a date of ours
""", re.VERBOSE)

# "session" is a technical word in several libraries this project uses, and a process word otherwise (a stretch
# of work). A line that uses it passes when it also says which technical session it means:
SESSION = re.compile(r"\bsessions?\b", re.IGNORECASE)
TECHNICAL_SESSION = re.compile(r"""
      (?i:\bray(?![a-z]))                       # Ray's session: ray.init, ray_session, a Ray instance
    | (?i:pytest) | (?i:fixture) | scope\s*=    # pytest's session and its session-scoped fixtures
    | session-scoped
    | (?i:hparams) | (?i:tensorboard)           # TensorBoard's HParams sessions (one per trial) ...
    | session_start | session_end | SessionEndInfo | _hparams_   # ... and their summaries' tags
    | start_new_session | process\ group       # a POSIX session (subprocess's start_new_session)
    | (?i:python\ session)                      # an interactive Python session
    | engine\.session | \bsession\.py\b        # sptune.experiment.engine.session, the module that joins Ray ...
    | \bimport\b[^#]*\bsession\b | \bsession\.\w    # ... imported, or one of its functions called
    | [A-Z]\w*Session\b | \bSession[A-Z(.]     # a class named after one (SessionEndInfo, tf.Session(...))
""", re.VERBOSE)

# Dated history: where a date tells when something was done rather than being data. In Python it is read in
# comments and docstrings only (a date in code is data, e.g. one a test asserts on); in Markdown everywhere but
# the measurement tables that keep a run's date as a column; in other text files, in their comments.
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
DATED_TABLES = {"docs/benchmarks.md", "docs/records/README.md"}


def python_prose(text: str) -> dict[int, str]:
    """A module's comments and docstrings by line number (1-based): a comment's own text, a docstring's whole
    lines. Every line when the module does not parse."""
    lines = text.splitlines()
    try:
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return dict(enumerate(lines, start=1))
    prose = {token.start[0]: token.string for token in tokens if token.type == tokenize.COMMENT}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                prose.update((n, lines[n - 1]) for n in range(first.lineno, first.end_lineno + 1))
    return prose


def dated(line: str, number: int, path: str, prose: dict[int, str] | None) -> bool:
    """Whether the line carries a date as history (see DATE's comment)."""
    if path.endswith(".py"):
        return bool(DATE.search((prose or {}).get(number, "")))
    if path.endswith(".md"):
        return bool(DATE.search(line)) and not (path in DATED_TABLES and line.lstrip().startswith("|"))
    comment = line.find("#")
    return comment >= 0 and bool(DATE.search(line[comment:]))


def process_words(text: str, path: str = "module.py") -> list[tuple[int, str]]:
    """(line number, line) for every line of `text` (the file at repo-relative `path`, which decides the date
    rule) that tells how the project was built rather than what it does."""
    prose = python_prose(text) if path.endswith(".py") else None
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = UPSTREAM.sub("", line)
        if PROCESS.search(words) or (SESSION.search(words) and not TECHNICAL_SESSION.search(words)) \
                or dated(words, number, path, prose):
            hits.append((number, line.strip()))
    return hits


def in_scope(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path not in ROOT_FILES and path.split("/", 1)[0] not in FOLDERS:
        return False
    return Path(name).suffix in TEXT_SUFFIXES or name in TEXT_NAMES


def tracked_files() -> list[str]:
    """The tracked files in scope, repo-relative (a filesystem walk where git is missing or this is no clone)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS, *ROOT_FILES], cwd=ROOT, check=True,
                                capture_output=True, timeout=60).stdout.decode().split("\0")
        paths = [p for p in listed if p]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for top in FOLDERS:
            for folder, subfolders, files in os.walk(ROOT / top):
                subfolders[:] = [d for d in subfolders if not d.startswith(".") and d != "__pycache__"]
                paths += [Path(folder, f).relative_to(ROOT).as_posix() for f in files]
        paths += [f for f in ROOT_FILES if (ROOT / f).is_file()]
    return sorted(p for p in paths if in_scope(p) and (ROOT / p).is_file())


SELF = "tests/test_process_words.py"


def test_the_tree_speaks_of_itself_only():
    files = tracked_files()
    assert any(p.startswith("sptune/") for p in files) and "README.md" in files, files[:5]
    found = []
    for path in files:
        if path == SELF:
            continue  # the checker names the words it forbids
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        found += [f"{path}:{number}: {line}" for number, line in process_words(text, path)]
    assert not found, (f"{len(found)} line(s) tell how the project was built; say what the code does and why:\n"
                       + "\n".join(found))


def test_the_check_can_fail(tmp_path):
    planted = {
        "tracker": "x = 1  # iss" "ue 12: the fix\n",
        "prose": 'NOTE = "measured in a sit' 'ting"\n',
        "dated comment": "y = 2  # measured 2026" "-12-01\n",
        "dated docstring": 'def f():\n    """Measured on 2026' '-11-29."""\n',
        "work stretch": "# one work ses" "sion was not enough\n",
    }
    clean = ('"""A module that joins Ray."""\n'
             "import ray\n"
             "ray.init(address='auto')  # joins the Ray session\n"
             "from sptune.experiment.engine import session\n"
             "session.stop_processes([])\n"
             "DAY = '2026" "-12-01'  # a date in code is data\n"
             "BOILERPLATE = ('Please file an " "issue',)  # torch's own message\n"
             "# a known bug upstream: ray-project/ray#54305, https://github.com/pytorch/pytorch/" "issues/1\n")
    for name, line in planted.items():
        module = tmp_path / f"{name.replace(' ', '_')}.py"
        module.write_text(clean + line)
        hits = process_words(module.read_text(), module.name)
        assert len(hits) == 1 and hits[0][0] > clean.count("\n"), (name, hits)
    (tmp_path / "clean.py").write_text(clean)
    assert process_words((tmp_path / "clean.py").read_text(), "clean.py") == []
    # Markdown: a date is history outside the measurement tables, data inside them.
    table = "| run | date |\n|---|---|\n| plan | 2026" "-11-25 |\n"
    assert process_words(table, "docs/benchmarks.md") == []
    assert [n for n, _ in process_words(table, "docs/results.md")] == [3]
