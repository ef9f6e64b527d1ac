"""Cold-start synthesis of D_cs (the paper's Section 4.1).

    python recipes/synthesize.py --config recipes/configs/smollm2-135m/synthesize.yaml
    accelerate launch recipes/synthesize.py --config recipes/configs/qwen3-14b/synthesize.yaml

Interrupt at any time: rerunning the same command resumes from <output_dir>/rows.jsonl.
"""

from icw.recipe_runner import recipe_errors
from icw.train.synthesis import main, make_parser

if __name__ == "__main__":
    parser = make_parser()
    with recipe_errors(parser, "synthesize"):  # errors a user can fix: one `icw: error: ...` line, exit status 2
        main(*parser.parse_args_and_config())
