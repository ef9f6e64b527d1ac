"""Gradio Space for the icw_sa metric (evaluate's built-in widget does not run on gradio >= 4)."""

from pathlib import Path

from icw.publish import metric_demo

demo = metric_demo(Path(__file__).with_name("icw_sa.py"))

if __name__ == "__main__":
    demo.launch()
