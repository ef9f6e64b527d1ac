"""``icw space``: the demo Space (watermarking and detection side by side) from the installed package.

The Space's folder (``spaces/icw-demo/`` in the repository) has one copy; the wheel carries it as the
data package ``icw._space`` (``pyproject.toml`` maps it, as it maps ``metrics/``), so a ``pip install``
of icw runs the same page that ``scripts/launch_space.sh`` runs in a checkout: its ``app.py`` in a
fresh interpreter (the page imports its rooms, ``demo_*.py``, from its own folder), offline unless
``HF_HUB_OFFLINE=0`` is set, on 127.0.0.1 and port 7860 (or the next free one) unless told otherwise.

Example:
    >>> from icw.space import space_app
    >>> space_app().name
    'app.py'
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from .argtypes import port
from .bundled import SPACE_PACKAGE, bundled_folder


def space_app() -> Path:
    """The Space's ``app.py``, inside the installed package (or the checkout's ``spaces/icw-demo/``)."""
    return bundled_folder(SPACE_PACKAGE) / "app.py"


def _main(args: argparse.Namespace) -> None:
    if importlib.util.find_spec("gradio") is None:
        raise ValueError("icw space needs gradio: pip install 'icw[space]'")
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", env["HF_HUB_OFFLINE"])
    env["GRADIO_SERVER_NAME"] = args.host or env.get("GRADIO_SERVER_NAME", "127.0.0.1")
    if args.port:
        env["GRADIO_SERVER_PORT"] = str(args.port)
    if args.trained_model:
        env["ICW_SPACE_TRAINED_MODEL"] = args.trained_model
    app = space_app()
    print(f"Starting the ICW demo Space from {app.parent} (loads the model first; Ctrl+C stops it) ...", flush=True)
    os.execve(sys.executable, [sys.executable, str(app)], env)  # the page owns the process from here on


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``icw space`` to the CLI's subparsers."""
    space = sub.add_parser("space", help="run the demo Space (watermark and detect side by side) in your browser")
    space.add_argument("--port", type=port, help="port to serve on (default: 7860, or the next free one)")
    space.add_argument("--host", help="address to serve on (default: 127.0.0.1; 0.0.0.0 to share on your network)")
    space.add_argument("--trained-model", metavar="MODEL",
                       help="a model trained with icw's recipe (a folder or a Hub id): its answer to the instructed "
                            "prompt is shown beside the base model's (default: the newest model scripts/speedrun.sh "
                            "finished under ~/.cache/icw/runs)")
    space.set_defaults(func=_main)
