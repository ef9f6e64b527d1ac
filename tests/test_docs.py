"""The README and docs/**/*.md as tests: every Python block runs, every shell command works as printed.

Per file, its blocks run in document order in one temporary working directory (a `.venv` link
to the checkout's), so a block can use what an earlier one made (a dataset built by
``icw bench build``, a ``key`` defined in Python):

* a ```python block is executed in the file's one namespace; a ```text block right after it is
  the output it must print, exactly;
* a ```bash block: every command's first word must resolve after the README's set-up (a
  program that set-up installs into ``.venv/bin`` is printed with that path, repository paths
  exist, ``python -m`` modules import); the cheap ``icw`` commands (``key``, ``vocab``,
  ``detect``, ``--help``, ``bench build``, dry runs) run for real through a subprocess, with a
  ``# -> TEXT`` comment checked against their output; the other ``icw`` commands must parse.

A block marked by ``<!-- no-test -->`` on the line before its fence is skipped (it needs a GPU,
the network, a running server or a long job, and says so).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
NO_TEST = "<!-- no-test -->"
SHELL = ("bash", "sh", "shell", "console")
#: Programs of the set-up environment: printed as `.venv/bin/NAME`, never bare (a fresh shell lacks them).
VENV_BIN = ROOT / ".venv" / "bin"
#: Shell built-ins and the basic tools every shell has.
BUILTINS = {"cd", "export", "source", ".", "echo", "printf", "cat", "set", "wait", "kill", "head", "tail", "ls",
            "mkdir", "rm", "cp", "mv", "true", "test", "[", "grep", "wc"}
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
#: `icw` sub-commands cheap enough to run for real in the test (seconds, offline, writing only to the cwd).
CHEAP = {("--help",), ("key", "new"), ("vocab",), ("detect",), ("bench", "build"), ("bench", "push"),
         ("hub", "publish-metrics"), ("hub", "metric-path")}
REPO_PATH = re.compile(r"^(?:recipes|scripts|benchmarks|tests|spaces|src|docs|metrics|model_cards)/\S+$")


@dataclass
class Block:
    lang: str
    code: str
    line: int
    skip: bool


def blocks(path: Path) -> list[Block]:
    """Fenced blocks of a markdown file, with the language, the 1-based line of the fence and the skip mark."""
    out, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        skip = start > 0 and lines[start - 1].strip() == NO_TEST
        out.append(Block(match.group(1).lower(), "\n".join(body) + "\n", start + 1, skip))
        i += 1
    return out


def shell_lines(code: str) -> list[str]:
    """Logical command lines of a shell block: continuations joined, comment-only lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def commands(line: str) -> list[list[str]]:
    """The simple commands of one line (split at `&&`, `|`, `;`, `&`, `$(`), each without leading `VAR=...`."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out, current = [], []
    for token in lexer:
        if token in SEPARATORS:
            out.append(current)
            current = []
        else:
            current.append(token)
    out.append(current)
    result = []
    for words in out:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            result.append(words)
    return result


def _fresh_shell_which(name: str) -> str | None:
    """`which` in a fresh shell: the PATH without any virtual environment's bin folder."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "activate").is_file())
    return shutil.which(name, path=path)


def resolution_problem(words: list[str]) -> str | None:
    """Why this command would fail as printed after the README's set-up, or None."""
    program, args = words[0], words[1:]
    if program.startswith("$"):  # "$PY" and friends: defined by the block itself
        return None
    if "/" in program:
        target = Path(program) if program.startswith("/") else ROOT / program
        if program.startswith("/"):
            return None  # a user's own absolute path (a placeholder); nothing to resolve here
        if not target.exists():
            return f"{program} does not exist (after set-up, from the repository root)"
        if not os.access(target, os.X_OK):
            return f"{program} is not executable: print it as `bash {program}`"
    elif (VENV_BIN / program).exists() and program not in BUILTINS:
        return f"bare `{program}` is not on a fresh shell's PATH after set-up: print it as `.venv/bin/{program}`"
    elif program not in BUILTINS and _fresh_shell_which(program) is None:
        return f"`{program}` is not installed by the set-up"
    if program in ("bash", "sh") and args and not args[0].startswith("-") and not (ROOT / args[0]).is_file():
        return f"{args[0]} does not exist"
    if Path(program).name.startswith("python") and len(args) >= 2 and args[0] == "-m":
        module = args[1]
        if module not in ("pytest", "pip", "venv") and find_spec(module) is None:
            return f"module {module} is not importable after set-up"
    for arg in args:
        if REPO_PATH.match(arg) and not any(ch in arg for ch in "*?[") and not (ROOT / arg).exists():
            return f"{arg} does not exist in the repository"
    return None


def icw_args(words: list[str]) -> list[str] | None:
    """The arguments of an `icw` command (`.venv/bin/icw ...` or `icw ...`), else None."""
    return words[1:] if Path(words[0]).name == "icw" else None


def is_cheap(words: list[str]) -> bool:
    args = icw_args(words)
    if args is None:
        return words[0] in BUILTINS
    if not any(tuple(args[: len(prefix)]) == prefix for prefix in CHEAP):
        return False
    if args[:2] in (["bench", "push"], ["hub", "publish-metrics"]):
        return "--dry-run" in args
    return "--lfqa" not in args


def check_icw_parses(args: list[str]) -> None:
    """An `icw` command line that is not run must at least parse (valid sub-command and options)."""
    from icw.cli import build_parser

    try:
        build_parser().parse_args(args)
    except SystemExit as exit_:
        pytest.fail(f"`icw {shlex.join(args)}` does not parse (exit {exit_.code})")


def all_shell_blocks() -> list[tuple[Path, Block]]:
    return [(path, block) for path in DOC_FILES for block in blocks(path) if block.lang in SHELL]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --------------------------------------------------------------------------------------------- tests
def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    first = blocks(ROOT / "README.md")[0]
    assert first.lang == "bash"
    assert shell_lines(first.code)[0].startswith("bash scripts/setup.sh && bash scripts/launch_space.sh")
    test_command = shell_lines(first.code)[1].split("#")[0].strip()
    assert test_command == "bash scripts/setup.sh && .venv/bin/python -m pytest"
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI runs the README's command


def test_relative_links_resolve():
    for path in DOC_FILES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (path.parent / target).exists(), f"{_id(path)} links to missing {target}"


@pytest.mark.parametrize(("path", "block"), all_shell_blocks(),
                         ids=[f"{_id(p)}:{b.line}" for p, b in all_shell_blocks()])
def test_shell_commands_resolve_after_setup(path, block):
    """Each command's first word exists after set-up in a fresh shell; the paths it names exist."""
    problems = []
    for line in shell_lines(block.code):
        for words in commands(line):
            problem = resolution_problem(words)
            if problem:
                problems.append(f"{_id(path)}:{block.line}: {line.strip()}\n    {problem}")
    assert not problems, "\n".join(problems)


def test_resolution_rules_catch_what_a_newcomer_hits():
    """The rules reject exactly what failed for a newcomer (issue 15): bare venv programs, missing paths."""
    assert "print it as `.venv/bin/icw`" in resolution_problem(["icw", "key", "new"])
    assert ".venv/bin/accelerate" in resolution_problem(["accelerate", "launch", "recipes/sdlp.py"])
    assert ".venv/bin/python" in resolution_problem(["python", "recipes/synthesize.py"])
    assert "does not exist" in resolution_problem([".venv/bin/python", "recipes/nope.py"])
    assert "not importable" in resolution_problem([".venv/bin/python", "-m", "icw.no_such_module"])
    assert "is not executable" in resolution_problem(["docs/cli.md"])
    assert resolution_problem([".venv/bin/icw", "key", "new"]) is None
    assert resolution_problem(["bash", "scripts/setup.sh"]) is None
    assert commands('KEY=$(.venv/bin/icw key new --family sa) && echo "$KEY" | .venv/bin/icw detect --key "$KEY"') == [
        [".venv/bin/icw", "key", "new", "--family", "sa"], ["echo", "$KEY"], [".venv/bin/icw", "detect", "--key", "$KEY"]]


@pytest.mark.parametrize("path", DOC_FILES, ids=_id)
def test_doc_file_runs(path, tmp_path, monkeypatch, capsys):
    """Python blocks run in order in one namespace; cheap shell blocks run for real, the rest parse."""
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    doc_blocks = blocks(path)
    ran = 0
    for i, block in enumerate(doc_blocks):
        if block.skip:
            continue
        where = f"{_id(path)}:{block.line}"
        if block.lang == "python":
            capsys.readouterr()
            exec(compile(block.code, where, "exec"), namespace)
            printed = capsys.readouterr().out
            following = doc_blocks[i + 1] if i + 1 < len(doc_blocks) else None
            if following is not None and following.lang == "text" and _adjacent(path, block, following):
                assert printed.strip() == following.code.strip(), f"{where} printed:\n{printed}"
            ran += 1
        elif block.lang in SHELL:
            ran += _run_shell_block(block, where, tmp_path)
    if any(b.lang == "python" and not b.skip for b in doc_blocks):
        assert ran, f"{_id(path)}: nothing ran"


def _adjacent(path: Path, first: Block, second: Block) -> bool:
    """Only blank lines between the end of `first` and the fence of `second`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    end = first.line + first.code.count("\n")  # 0-based index of the closing fence is end
    return all(not line.strip() for line in lines[end + 1: second.line - 1])


def _run_shell_block(block: Block, where: str, cwd: Path) -> int:
    """Run the block's cheap lines as one bash script (variables carry over); parse the other icw lines."""
    script, expectations = ["set -euo pipefail"], []
    for line in shell_lines(block.code):
        simple = commands(line)
        if simple and all(is_cheap(words) for words in simple):
            script.append(line)
            match = re.search(r"#\s*->\s*(.+)$", line)
            if match:
                expectations.append(match.group(1).strip())
        else:
            for words in simple:
                args = icw_args(words)
                if args is not None and args[:1] != ["train"]:  # train options are the recipe's (TrlParser)
                    check_icw_parses(args)
    if len(script) == 1:
        return 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_EVALUATE_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, f"{where} failed (exit {out.returncode}):\n{out.stderr[-3000:]}"
    for expected in expectations:
        assert expected in out.stdout, f"{where}: expected {expected!r} in the output:\n{out.stdout[-3000:]}"
    return 1
