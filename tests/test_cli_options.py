"""No option that means nothing (issue 71): every numeric option of every ``icw`` command refuses zero and
negative values where they mean nothing, at parse time, in one ``icw: error:`` line naming the option; an
option that only applies with another is refused without it.

The options are found by walking the parser tree (``icw.cli.build_parser``), the training recipes' parsers
(``make_parser`` of each ``icw train`` sub-command) included, so a new option is covered the day it is
added: it must refuse ``0`` and ``-1``, or be listed in :data:`MEANINGFUL` with the values it takes.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator

import pytest

from icw.argtypes import NUMBER_TYPES, NumberType
from icw.cli import build_parser, main
from icw.cli_corpus import DEFAULTS as CORPUS_OPTIONS
from icw.train.cli import RECIPES

#: Options (by ``dest``) for which zero or a negative value means something, and why.
MEANINGFUL: dict[str, set[str]] = {
    "seed": {"0"},  # any seed >= 0 is a key or a sampling seed
    "shuffle_seed": {"0"},
    "seed_offset": {"0"},
    "key_seed": {"0"},
    "key_seed_offset": {"0"},
    "num_train": {"0"},  # a test-only ICWBench build
    "num_h1": {"0"},  # a family without D_H1 (or D_H0) rows
    "num_h0": {"0"},
    "max_fpr": {"0"},  # screen for keys with no false positive at all
    "top_k_tsp": {"0"},  # 0: the full vocabulary
    "top_k_wip": {"0"},
    "top_k_sa": {"0"},
    "relabel_num_keys": {"0"},  # 0: a fresh key per row
    "relabel_curriculum": {"0"},
    "lmbda": {"0"},  # off-policy
    "min_completion_tokens": {"0"},  # no length rule
    "z_floor": {"0", "-1"},  # rewards: any finite number
    "rejected_reward": {"0", "-1"},
    "utility_weight": {"0"},  # a weight of 0 switches its reward term off
    "evasion_bonus": {"0"},
    "z_penalty": {"0"},
}
#: What the recipes need on this machine before their own options are read: trl's configs refuse bf16
#: without a GPU, and the adaptive attack needs its positives.
RECIPE_BASE = {"sdlp": ["--use_cpu", "true"], "grpo": ["--use_cpu", "true", "--bf16", "false"],
               "sft": ["--use_cpu", "true", "--bf16", "false"], "adaptive-attack": ["--positives", "runs/x"]}


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """``(command path, parser)`` of every leaf command, the recipes' own parsers in place of ``icw train``'s
    pass-through ones."""
    subs = list(_subparsers(parser))
    if not subs:
        yield path, parser
    for name, sub in subs:
        if path == ("train",):
            module = importlib.import_module(RECIPES[name][0] if name in RECIPES else "icw.train.probe")
            yield (*path, name), module.make_parser(prog=f"icw train {name}") if name in RECIPES else module.make_parser()
        else:
            yield from _commands(sub, (*path, name))


def _owned(parser: object, dest: str) -> bool:
    """Whether icw defines the option: the recipes' parsers also carry trl's and transformers' own fields,
    whose checks are theirs."""
    for dtype in getattr(parser, "dataclass_types", None) or ():
        for klass in dtype.__mro__:
            if dest in getattr(klass, "__annotations__", {}):
                return klass.__module__.startswith("icw")
    return True


def numeric_options() -> list[tuple[tuple[str, ...], object, argparse.Action]]:
    out = []
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            numeric = isinstance(action.type, NumberType) or action.type in (int, float)
            if action.option_strings and numeric and _owned(parser, action.dest):
                out.append((path, parser, action))
    return out


OPTIONS = numeric_options()


def _filler(action: argparse.Action) -> list[str]:
    """A valid value for a required option, so that only the option under test is wrong."""
    value = "1" if action.type in (int, float) or isinstance(action.type, NumberType) else "x"
    value = str(action.choices[0]) if action.choices else value
    return [action.option_strings[0], value] if action.option_strings else [value]


def _parse_error(path: tuple[str, ...], parser: object, argv: list[str], capsys) -> str:
    """The one-line error of parsing ``argv`` (which must fail), as the ``icw`` command prints it."""
    required = [a for a in parser._actions if a.required and a.option_strings[:1] != argv[:1]]
    argv = [*argv, *(arg for a in required for arg in _filler(a))]
    if path[0] == "train" and path[1] in RECIPES:
        # a TrlParser: its dataclasses' checks raise ValueError, which `icw train` prints in one line
        with pytest.raises((ValueError, SystemExit)) as err:
            parser.parse_args_and_config([*RECIPE_BASE.get(path[1], []), *argv])
        return f"icw: error: {err.value}\n" if err.type is ValueError else capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        if path[0] == "train":
            parser.parse_args(argv)
        else:
            build_parser(path[0]).parse_args([*path, *argv])
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_the_walk_finds_the_options():
    found = {(path[0], a.dest) for path, _, a in OPTIONS}
    assert {("detect", "batch_size"), ("detect", "num_proc"), ("detect", "max_chars"), ("key", "seed"),
            ("bench", "num_bootstrap"), ("bench", "concurrency"), ("space", "port"), ("demo", "max_new_tokens"),
            ("train", "batch_size"), ("train", "top_k_wip"), ("train", "max_samples")} <= found
    assert len(OPTIONS) > 60


@pytest.mark.parametrize(("path", "parser", "action"), OPTIONS,
                         ids=[f"{' '.join(p)} {a.option_strings[0]}" for p, _, a in OPTIONS])
def test_numeric_option_refuses_what_means_nothing(path, parser, action, capsys):
    if not getattr(parser, "dataclass_types", None):  # an argparse option: its type states its domain
        assert action.type in NUMBER_TYPES, f"{action.option_strings[0]}: type= one of icw.argtypes"
    for value in ("0", "-1"):
        if value in MEANINGFUL.get(action.dest, set()):
            continue
        err = _parse_error(path, parser, [action.option_strings[0], value], capsys)
        assert err.startswith("icw: error: ") and err.count("\n") == 1, err
        assert action.dest in err.replace("-", "_"), err  # names the option


def _exit_status(argv: list[str]) -> int:
    """``icw ARGV``'s exit status (argparse's errors exit at parse time)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize("argv", [["--batch-size", "0"], ["--num-proc", "0"], ["--num-proc", "-3"]])
def test_detect_refuses_zero_sizes_in_one_line(tmp_path, capsys, argv):
    (tmp_path / "x.txt").write_text("Hello there. General Kenobi.")
    code = _exit_status(["detect", "--key", "icw:sa:seed=1,length=18", *argv, str(tmp_path / "x.txt")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1 and argv[0] in captured.err


@pytest.mark.parametrize("name", sorted(CORPUS_OPTIONS))
def test_corpus_options_need_dataset(tmp_path, capsys, name):
    (tmp_path / "x.txt").write_text("Hello there. General Kenobi.")
    option = "--" + name.replace("_", "-")
    value = "local" if name == "executor" else "2"
    code = _exit_status(["detect", "--key", "icw:sa:seed=1,length=18", option, value, str(tmp_path / "x.txt")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1
    assert f"{option} only applies to corpus detection" in captured.err and "--dataset" in captured.err


def test_all_keys_needs_keys(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("Hello there. General Kenobi.")
    assert _exit_status(["detect", "--key", "icw:sa:seed=1,length=18", "--all-keys", str(tmp_path / "x.txt")]) == 2
    assert "--all-keys" in capsys.readouterr().err


def test_a_recipe_option_ends_in_one_line_through_icw_train(capsys):
    assert _exit_status(["train", "synthesize", "--batch_size", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "icw: error: --batch_size: expected a whole number >= 1, got 0\n"
