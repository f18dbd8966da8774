"""Every `sptune ...` and `python experiments/<script>.py ...` command that the README and docs/ show exists, with
every flag it uses: a renamed command or flag fails here, not in a newcomer's terminal."""

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from sptune.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"^(?:\.venv/bin/)?(?:sptune|python -m sptune\.cli|python experiments/\w+\.py)(?=\s|$)")


def code_lines(path: Path) -> list[str]:
    """The shell lines of a Markdown file's fenced code blocks (continuations joined, comments dropped)."""
    lines, inside, pending = [], False, ""
    for raw in path.read_text().splitlines():
        if raw.startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        line = pending + raw.split(" #", 1)[0].strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        for part in re.split(r"&&|;", line):  # `... && .venv/bin/sptune study ...`
            part = part.strip()
            part = re.sub(r"^.*? -- ", "", part) if " -- " in part else part  # `ray job submit ... -- python ...`
            part = re.sub(r"^(?:[A-Z_]+=\S+ )+", "", part)  # leading VAR=value assignments
            if COMMAND.match(part):
                lines.append(part)
    return lines


def shown_commands() -> list[tuple[str, str]]:
    return [(path.relative_to(ROOT).as_posix(), line) for path in DOCS for line in code_lines(path)]


def subparser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """Walk `sptune data prepare ...` down to the innermost parser; the words left are its arguments."""
    while words:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or words[0] not in actions[0].choices:
            break
        parser, words = actions[0].choices[words[0]], words[1:]
    return parser, words


def script_help(script: str) -> str:
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [script, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            runpy.run_path(str(ROOT / script), run_name="__main__")
    finally:
        sys.argv = argv
    return out.getvalue()


def test_the_docs_show_commands():
    names = {name for name, _ in shown_commands()}
    assert "README.md" in names and len(shown_commands()) >= 10


@pytest.mark.parametrize("where, line", shown_commands())
def test_every_shown_command_and_flag_exists(where, line):
    words = shlex.split(line)
    if words[0].endswith("sptune"):
        words = words[1:]
    elif words[:3] == ["python", "-m", "sptune.cli"]:
        words = words[3:]
    words[0] = words[0].removeprefix(".venv/bin/")
    if words[0].startswith("python"):  # python experiments/<script>.py
        script = words[1]
        assert (ROOT / script).is_file(), f"{where}: {script} does not exist"
        text, flags = script_help(script), words[2:]
    else:
        parser, rest = subparser(build_parser(), words)
        assert parser.prog != "sptune" or not words or words[0].startswith("-"), \
            f"{where}: `sptune {words[0]}` is not a command"
        text, flags = parser.format_help(), rest
    for flag in (w.split("=", 1)[0] for w in flags if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{where}: `{line}` uses {flag}, " \
                                                                           f"which its --help does not list"
