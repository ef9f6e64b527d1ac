"""GRPO with the ICW verifier's z as reward (the paper's Section 4.3), on trl's GRPOTrainer.

    accelerate launch --config_file recipes/accelerate_configs/zero3.yaml recipes/grpo.py \
        --config recipes/configs/qwen3-14b/grpo.yaml

Rolls out on D_H1 prompts (instruction + query); set use_vllm: true where vLLM is installed.
"""

from icw.recipe_runner import recipe_errors
from icw.train.grpo import main, make_parser

if __name__ == "__main__":
    parser = make_parser()
    with recipe_errors(parser, "grpo"):  # errors a user can fix: one `icw: error: ...` line, exit status 2
        main(*parser.parse_args_and_config())
