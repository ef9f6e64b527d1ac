"""Repository-wide pytest set-up: offline Hugging Face libraries, and doctest collection over ``src/icw``.

``pyproject.toml`` runs ``--doctest-modules`` over ``tests`` and ``src/icw``, so every ``>>>``
example in the package is executed. Modules that need an optional extra are left out of that
collection when the extra is not installed (the examples of the core package always run).
"""

from __future__ import annotations

import importlib.util
import os

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (pyproject's addopts) every worker, and every process its tests start, gets its share of
# the cores for torch: two workers of two OpenMP threads each would oversubscribe two cores.
# Set before anything imports torch, which reads it once.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // _WORKERS)))
# Fresh folders per test session, removed at exit: a datasets cache (the shared ~/.cache one keys local folders by
# path and modification time, so a folder rebuilt at a reused pytest tmp path could be read from an older build),
# and an empty runs folder (icw.runs), so a model a long run finished on this machine never reaches the tests' Space.
for _var, _prefix in (("HF_DATASETS_CACHE", "icw-test-datasets-"), ("ICW_RUNS", "icw-test-runs-")):
    if _var not in os.environ:
        import atexit
        import shutil
        import tempfile

        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix)
        atexit.register(shutil.rmtree, os.environ[_var], ignore_errors=True)

#: Package paths whose import needs an optional extra, with the distributions they import.
_NEEDS_EXTRA = {
    "src/icw/detection.py": ("sklearn",),  # bench
    "src/icw/bench": ("datasets", "sklearn"),  # bench
    "src/icw/evaluate_metrics.py": ("datasets", "evaluate"),  # bench
    "src/icw/publish.py": ("datasets", "evaluate"),  # bench
    "src/icw/train": ("datasets", "trl"),  # train
    "src/icw/integrations/datatrove.py": ("datatrove", "orjson", "pyarrow"),  # datatrove
}

collect_ignore = [path for path, modules in _NEEDS_EXTRA.items()
                  if any(importlib.util.find_spec(m) is None for m in modules)]
