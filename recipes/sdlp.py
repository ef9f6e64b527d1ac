"""SDLP: self-distillation with logit perturbation (the paper's Section 4.2).

    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/sdlp.py \
        --config recipes/configs/qwen3-14b/sdlp.yaml

Any field of the YAML can be overridden on the command line (--learning_rate 1e-5).
"""

from icw.recipe_runner import recipe_errors
from icw.train.sdlp import main, make_parser

if __name__ == "__main__":
    parser = make_parser()
    with recipe_errors(parser, "sdlp"):  # errors a user can fix: one `icw: error: ...` line, exit status 2
        main(*parser.parse_args_and_config())
