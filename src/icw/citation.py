"""The paper that icw implements, cited the same way everywhere (metrics, dataset card, model cards)."""

PAPER_TITLE = "Learning to Follow In-Context Watermark Instructions via Self-Distillation"
PAPER_AUTHORS = "Yepeng Liu, Tianyi Chen, Xuandong Zhao, Dawn Song, Yuheng Bu"
