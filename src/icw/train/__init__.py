"""Training: cold-start synthesis, SDLP (self-distillation with logit perturbation), GRPO."""
