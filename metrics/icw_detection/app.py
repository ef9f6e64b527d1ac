"""Gradio Space for the icw_detection metric (evaluate's built-in widget does not run on gradio >= 4).

It needs the icw package: installed (its wheel), or the ``icw/`` folder that
``icw hub publish-metrics`` uploads next to this file (README.md, "Installing icw").
"""

from pathlib import Path

from icw.publish import metric_demo

demo = metric_demo(Path(__file__).with_name("icw_detection.py"))

if __name__ == "__main__":
    demo.launch()
