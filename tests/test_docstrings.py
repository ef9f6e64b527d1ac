"""The docstring contract (issue 13): every public class and function documents its arguments.

The rules, kept simple on purpose:

* Modules: every module of the ``icw`` package, plus the metric scripts
  (``metrics/<name>/<name>.py``, found as the installation carries them: :mod:`icw.bundled`). A module whose optional extra is not installed is skipped,
  as the root ``conftest.py`` does for doctests; the metric Spaces' ``app.py`` files launch a
  Gradio app on import and are left out.
* Public callables: the module's ``__all__`` when it has one, otherwise every function and class
  whose name does not start with ``_`` and that is *defined* in that module (not imported).
* Each must have a docstring. When it takes parameters other than ``self``/``cls`` (for a class,
  those of an ``__init__`` defined by an ``icw`` class; for a dataclass, the fields it declares
  itself, not those it inherits from a trl or transformers config), the docstring (for a
  class: the class's or its ``__init__``'s) has an ``Args:`` section (``Parameters:`` is accepted
  for trl-style configs) with one entry per parameter: a line that starts with the parameter's name
  (``*args``/``**kwargs`` may keep their stars; ``a, b:`` documents both), followed by `` (``,
  ``:`` or the end of the line.
* Exempt from the ``Args:`` rule (they still need a docstring): the command-line plumbing, whose
  arguments are documented by ``--help`` rather than by Python callers: ``main``, ``make_parser``,
  ``build_parser``, ``register``, and argparse handlers (a single parameter named ``args``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import icw
from icw.bundled import METRICS_PACKAGE, bundled_folder

#: Distributions of the optional extras: a module that fails to import one of them is skipped.
OPTIONAL = {"sklearn", "datasets", "evaluate", "trl", "peft", "accelerate", "gradio", "scipy", "lm_eval",
            "vllm", "huggingface_hub", "gguf"}
#: Command-line plumbing: documented by ``--help``, not by an Args section.
CLI_NAMES = {"main", "make_parser", "build_parser", "register"}
SECTION = re.compile(r"^(\s*)(Args|Parameters):\s*$", re.MULTILINE)
#: Google-style section headers that end an Args section.
NEXT_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")


def _import(name: str, path: Path | None = None):
    """Import a module by dotted name (or from a file path); ``None`` when an optional extra is missing."""
    try:
        if path is None:
            return importlib.import_module(name)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in OPTIONAL:
            return None
        raise


def _modules() -> list:
    modules = [icw]
    for info in pkgutil.walk_packages(icw.__path__, prefix="icw."):
        module = _import(info.name)
        if module is not None:
            modules.append(module)
    scripts = sorted(bundled_folder(METRICS_PACKAGE).glob("*/*.py"))
    assert scripts, "no metric scripts found"
    for script in scripts:
        if script.name != "app.py":
            module = _import(f"_icw_metric_script_{script.stem}", script)
            if module is not None:
                modules.append(module)
    return modules


def _public(module) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None)
    if names is not None:
        objects = [(name, getattr(module, name)) for name in names]
        return [(name, obj) for name, obj in objects if inspect.isclass(obj) or inspect.isfunction(obj)]
    return [(name, obj) for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
            and getattr(obj, "__module__", None) == module.__name__]


def _params(obj) -> list[str]:
    """Parameter names a caller passes (``self``/``cls`` left out); for a class, its ``icw`` ``__init__``'s."""
    if inspect.isclass(obj):
        init = next((klass.__dict__["__init__"] for klass in obj.__mro__ if "__init__" in klass.__dict__), None)
        owner = next((klass for klass in obj.__mro__ if "__init__" in klass.__dict__), object)
        if init is None or not (owner.__module__.startswith("icw") or owner.__module__.startswith("_icw")):
            return []
        if dataclasses.is_dataclass(obj):
            # A dataclass's own fields; inherited ones (e.g. a trl config's) are its base's to document.
            own = set(obj.__dict__.get("__annotations__", {}))
            return [f.name for f in dataclasses.fields(obj) if f.init and f.name in own]
        obj = init
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    names = []
    for param in signature.parameters.values():
        if param.name in ("self", "cls"):
            continue
        prefix = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}.get(param.kind, "")
        names.append(prefix + param.name)
    return names


def _documented(doc: str) -> set[str]:
    """The names listed in the docstring's Args/Parameters section(s)."""
    names: set[str] = set()
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        match = SECTION.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        for entry in lines[i + 1:]:
            if entry.strip() and (len(entry) - len(entry.lstrip()) <= indent or NEXT_SECTION.match(entry)
                                  and len(entry) - len(entry.lstrip()) <= indent):
                break
            found = re.match(r"^\s+(\*{0,2}\w+(?:, \*{0,2}\w+)*)(\s*\(|\s*:|\s*$)", entry)
            if found:
                for name in found.group(1).split(", "):
                    names.update({name, name.lstrip("*")})
    return names


def _offences(name: str, obj) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and "__init__" in obj.__dict__:
        doc += "\n" + (inspect.getdoc(obj.__dict__["__init__"]) or "")
    if not (obj.__doc__ or "").strip():
        return ["no docstring"]
    params = _params(obj)
    if not params or name in CLI_NAMES or params == ["args"]:
        return []
    if not SECTION.search(doc):
        return [f"no Args section (parameters: {', '.join(params)})"]
    documented = _documented(doc)
    missing = [p for p in params if p not in documented and p.lstrip("*") not in documented]
    return [f"Args does not list: {', '.join(missing)}"] if missing else []


def test_every_public_callable_documents_its_arguments():
    offenders = []
    seen: set[int] = set()
    for module in _modules():
        for name, obj in _public(module):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            for problem in _offences(name, obj):
                offenders.append(f"{module.__name__}.{name}: {problem}")
    assert not offenders, f"{len(offenders)} public callables break the docstring contract:\n" + "\n".join(offenders)


@pytest.mark.parametrize("doc, expected", [
    ("Do it.\n\nArgs:\n    x (`int`): the x.\n    y: the y.\n\nReturns:\n    z (`int`): not an arg.\n",
     {"x", "y"}),
    ("Do it.\n\nArgs:\n    lo, hi (`int`): the bounds.\n", {"lo", "hi"}),
    ("Do it.\n\nParameters:\n    **kwargs:\n        passed on.\n", {"**kwargs", "kwargs"}),
    ("Do it.\n\nExample:\n    x (`int`): not an Args section.\n", set()),
])
def test_args_sections_are_parsed(doc, expected):
    assert _documented(doc) == expected


def test_a_missing_argument_is_reported():
    def documented(x: int, y: int) -> int:
        """Add.

        Args:
            x (`int`): the first term.
        """
        return x + y

    assert _offences("documented", documented) == ["Args does not list: y"]
