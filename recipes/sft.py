"""Ablation baseline: plain SFT (trl's SFTTrainer) on the D_H1 responses with the instruction
in the prompt (:mod:`icw.train.sft`).

    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/sft.py \
        --config recipes/configs/qwen3-14b/sft.yaml

Any field of the YAML can be overridden on the command line (--learning_rate 1e-5).
"""

from icw.recipe_runner import recipe_errors
from icw.train.sft import main, make_parser

if __name__ == "__main__":
    parser = make_parser()
    with recipe_errors(parser, "sft"):  # errors a user can fix: one `icw: error: ...` line, exit status 2
        main(*parser.parse_args_and_config())
