"""What the SDLP teacher writes for TSP: the base model, the query alone, decoded with the TSP bias.

SDLP distils this distribution into the instructed student, so a teacher that loops teaches loops (an on-policy
student learns them faithfully). Per setting (``static:DELTA``: the paper's bias on the green set;
``unused:DELTA``: only on green tokens the answer has not used yet, ``SDLPConfig.tsp_unused_only``;
``split:UNUSED:USED``: one bias on the unused green tokens and another on the used ones, the profile that
``icw train probe --family tsp`` reads off a trained student) it prints, over
the same test questions and held-out keys: the share of looping answers (seq-rep-4 >= 0.5 in the model's tokens),
the verifier's mean z and its verdicts at p <= 0.01, and the median perplexity under the base model.

    .venv/bin/python scripts/tsp_teacher.py --settings plain static:3 static:4 static:5 unused:3 unused:4 unused:5
    .venv/bin/python scripts/tsp_teacher.py --settings unused:3 split:3:2 --num_questions 64 --max_new_tokens 192
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from icw import ICWKey, verify
from icw.bench.quality import LOOPING_REP, seq_rep_n
from icw.generation import DEFAULT_SAMPLING, chat_prompt, user_message
from icw.keys import TEST_SEED_START
from icw.models import load_model
from icw.perplexity import perplexities
from icw.processors import TokenSetPreferenceLogitsProcessor
from icw.questions import bundled_questions


def answers(model, tok, queries: list[str], keys: list[ICWKey], setting: str, max_new_tokens: int) -> list[str]:
    """One sampled answer per query under ``setting`` (``plain``, ``static:DELTA``, ``unused:DELTA`` or
    ``split:UNUSED:USED``)."""
    processors = []
    if setting != "plain":
        kind, *deltas = setting.split(":")
        if kind == "split":  # USED on every green token, then UNUSED - USED more on the unused ones
            unused, used = map(float, deltas)
            processors = [TokenSetPreferenceLogitsProcessor(keys, tok, used),
                          TokenSetPreferenceLogitsProcessor(keys, tok, unused - used, unused_only=True)]
        else:
            processors = [TokenSetPreferenceLogitsProcessor(keys, tok, float(deltas[0]), unused_only=kind == "unused")]
    tok.padding_side = "left"
    prompts = [chat_prompt(tok, user_message(q)) for q in queries]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=processors, max_new_tokens=max_new_tokens,
                         pad_token_id=tok.pad_token_id or tok.eos_token_id, **DEFAULT_SAMPLING)
    return [t.strip() for t in tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--settings", nargs="+", default=["plain", "static:3", "static:5", "unused:4"])
    parser.add_argument("--num_questions", type=int, default=32)
    parser.add_argument("--pool_size", type=int, default=300, help="TSP candidate pool (ICWBench's CPU default)")
    parser.add_argument("--max_new_tokens", type=int, default=112, help="SDLP's answer length in the CPU recipe")
    args = parser.parse_args()
    model, tok = load_model(args.model)
    queries = [q for q, _ in bundled_questions("test")][: args.num_questions]
    keys = [ICWKey.create("tsp", seed=TEST_SEED_START + i, tokenizer=tok, pool_size=args.pool_size)
            for i in range(len(queries))]
    print(f"| teacher | looping (seq-rep-4 >= {LOOPING_REP:g}) | mean z | verdicts at p <= 0.01 | median PPL |")
    print("|---|---|---|---|---|")
    for setting in args.settings:
        texts = answers(model, tok, queries, keys, setting, args.max_new_tokens)
        loops = sum(seq_rep_n(tok(t, add_special_tokens=False)["input_ids"]) >= LOOPING_REP for t in texts)
        results = verify(texts, keys, tok)
        z = np.mean([r.z_score for r in results])
        flagged = sum(r.p_value <= 0.01 for r in results)
        ppl = np.median(perplexities(model, tok, queries, texts))
        print(f"| {setting} | {loops}/{len(texts)} | {z:.2f} | {flagged}/{len(texts)} | {ppl:.2f} |", flush=True)


if __name__ == "__main__":
    main()
