"""ICW for third parties, end to end: keys per document, PDFs protected, reviews written and screened.

1. ``--num-documents`` one-page PDFs are made with reportlab (a title and a 60-120-word passage of the bundled
   reference corpus' *screening* half), one WIP key each is derived from a secret (``icw.documents.issue_keys``, keys over
   SmolLM2's tokenizer), and each key's instruction is hidden in its PDF (``icw.protect.protect_pdf``).
2. The embedded model (SmolLM2-135M-Instruct) is asked "Write a review of this document." followed by the
   protected PDF's text as pypdf extracts it (hidden instruction included), with the key's logit bias
   (``generate_responses(mode="bias")``), standing in for a model that follows it, and plain (does the small model
   follow the hidden instruction by itself?; ``--num-plain N``: the first N documents only). Batches of
   32 rows, bf16 weights where the CPU has native bf16 (``icw.precision``); the answers are cached, so a rerun
   only screens.
3. Screens (``icw.response_screen.screen_responses``, Holm at alpha 0.01 unless said otherwise):
   * the biased reviews alone, and the plain ones alone;
   * ``--num-human`` human texts (the reference corpus' *audit* half, which never chose a key) each paired
     with a random document: false flags (target 0), the unadjusted rate ``p <= alpha`` (should be about
     alpha), and the family-wise error rate over ``--num-subscreens`` random screens of 100 of them;
   * power as the number of responses screened grows: the biased reviews among ``m - N`` null responses
     (human p-values resampled), Holm and BH;
   * the time per 1,000 responses of a screen of the human texts and the reviews together.

WIP is the family the embedded model's bias carries best (docs/detection-power.md), so it is the one used.

    python benchmarks/third_party.py            # 100 documents, 2,000 human texts: ~15 min (the reviews), then cached
    python benchmarks/third_party.py --quick    # 4 documents, 24-token reviews, 200 human texts
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, rate_with_ci  # noqa: E402

ALPHA = 0.01
SECRET = "icw third-party benchmark secret, not for real use"
QUERY = "Write a review of this document."


def make_pdfs(folder: Path, num: int) -> dict[str, Path]:
    """``num`` one-page PDFs: a title and a passage (60-120 words) of the reference corpus' screening half each."""
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer

    from icw.reference import reference_corpus

    passages = [p for p in reference_corpus() if p.split == "screen" and 60 <= len(p.text.split()) <= 120]
    random.Random(0).shuffle(passages)
    styles = getSampleStyleSheet()
    out = {}
    for i in range(num):
        passage = passages[i]
        path = folder / f"doc-{i:04d}.pdf"
        doc = SimpleDocTemplate(str(path), pagesize=letter, title=f"Document {i}", invariant=1)
        story = [Paragraph(f"Document {i}: a {passage.domain} text", styles["Title"]), Spacer(1, 8),
                 Paragraph(passage.text, styles["BodyText"])]
        doc.build(story)
        out[path.stem] = path
    return out


def reviews(prompts: list[str], keys: list[str], mode: str, tokens: int, cache: Path) -> list[str]:
    """SmolLM2's reviews, cached in ``cache`` (JSON Lines) by prompt, key, mode and length."""
    from icw.generation import generate_responses
    from icw.models import load_model

    done: dict[str, str] = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done[row["id"]] = row["text"]
    ids = [f"{mode}:{tokens}:{hash_text(p + k)}" for p, k in zip(prompts, keys, strict=True)]
    todo = [i for i, rid in enumerate(ids) if rid not in done]
    if todo:
        import torch

        from icw.precision import use_bf16

        model, tok = load_model("smollm2")
        if use_bf16("cpu"):  # bf16 weights under generate's bf16 autocast: no per-step cast (1.6x faster here)
            model = model.to(torch.bfloat16)

        def save(batch: list[int], answers: list[str]) -> None:
            with cache.open("a", encoding="utf-8") as out:
                for j, text in zip(batch, answers, strict=True):
                    done[ids[todo[j]]] = text
                    out.write(json.dumps({"id": ids[todo[j]], "text": text}) + "\n")

        generate_responses(model, tok, [prompts[i] for i in todo], [keys[i] for i in todo] if mode == "bias" else None,
                           mode, max_new_tokens=tokens, batch_size=32, progress=f"{mode} reviews", on_batch=save,
                           generation_kwargs={"no_repeat_ngram_size": 3})
    return [done[rid] for rid in ids]


def hash_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-documents", type=int, default=100)
    parser.add_argument("--num-human", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=160, help="review length (new tokens)")
    parser.add_argument("--num-plain", type=int, help="review only the first N documents without the bias (default: "
                        "all; one batch of 32 already shows whether the small model follows the hidden instruction)")
    parser.add_argument("--num-subscreens", type=int, default=1000)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "icw-third-party-reviews.jsonl"))
    parser.add_argument("--quick", action="store_true", help="4 documents, 24-token reviews, 200 human texts")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_documents, args.num_human, args.tokens, args.num_subscreens, args.num_plain = 4, 200, 24, 100, 4

    import pypdf

    from icw.documents import issue_keys
    from icw.multikey import holm_adjust
    from icw.protect import protect_pdf
    from icw.reference import reference_corpus
    from icw.response_screen import Response, adjust, screen_responses

    folder = Path(tempfile.mkdtemp(prefix="icw-third-party-"))
    start = time.perf_counter()
    pdfs = make_pdfs(folder, args.num_documents)
    entries = issue_keys(SECRET, list(pdfs), family="wip", tokenizer="smollm2")
    manifest = {e.document_id: e for e in entries}
    texts, found = {}, 0
    for d, path in pdfs.items():
        protected = protect_pdf(path, folder / "protected" / path.name, manifest[d].instruction)
        texts[d] = "\n".join(page.extract_text() for page in pypdf.PdfReader(protected).pages)
        found += " ".join(manifest[d].instruction.split()) in " ".join(texts[d].split())
    prepare_s = time.perf_counter() - start
    ids = list(pdfs)
    prompts = [f"{QUERY}\n\n{texts[d]}" for d in ids]
    keys = [manifest[d].key for d in ids]
    start = time.perf_counter()
    num_plain = len(ids) if args.num_plain is None else min(args.num_plain, len(ids))
    plain = reviews(prompts[:num_plain], keys[:num_plain], "plain", args.tokens, Path(args.cache))
    biased = reviews(prompts, keys, "bias", args.tokens, Path(args.cache))
    generate_s = time.perf_counter() - start

    rng = random.Random(1)
    audit = [p.text for p in reference_corpus() if p.split == "audit"]
    humans = rng.sample(audit, min(args.num_human, len(audit)))
    human_rows = [Response(rng.choice(ids), f"human-{i}", t) for i, t in enumerate(humans)]
    bias_rows = [Response(d, f"bias-{d}", t) for d, t in zip(ids, biased, strict=True)]
    plain_rows = [Response(d, f"plain-{d}", t) for d, t in zip(ids[:num_plain], plain, strict=True)]

    def screen(rows, method="holm"):
        return screen_responses(rows, manifest, method=method, alpha=ALPHA, highlights=False)

    on_bias, on_plain, on_human = screen(bias_rows), screen(plain_rows), screen(human_rows)
    start, cpu = time.perf_counter(), time.process_time()
    mixed = screen_responses(human_rows + bias_rows, manifest, alpha=ALPHA)  # with the flagged ones' evidence
    mixed_s, mixed_cpu = time.perf_counter() - start, time.process_time() - cpu
    human_p = np.array([r.p_value for r in on_human.rows])
    bias_p = np.array([r.p_value for r in on_bias.rows])
    sub = np.random.default_rng(2)
    fwer_hits = sum(bool((holm_adjust(sub.choice(human_p, 100, replace=False)) <= ALPHA).any())
                    for _ in range(args.num_subscreens))
    mixed_false = sum(r.flagged for r in mixed.rows if r.response.response_id.startswith("human-"))
    mixed_power = sum(r.flagged for r in mixed.rows if r.response.response_id.startswith("bias-"))

    n, h = len(ids), len(humans)
    print(f"## ICW for third parties: {n} protected PDFs, WIP keys, SmolLM2-135M-Instruct, {args.tokens}-token reviews\n")
    print(f"Hidden instruction found in pypdf's extracted text: {found} of {n} PDFs. Making, keying and protecting "
          f"the PDFs: {prepare_s:.1f} s; writing the {n + num_plain} reviews: {generate_s:.0f} s (cached on a rerun).\n")
    median = lambda rep: float(np.median([r.num_tokens_scored for r in rep.rows]))  # noqa: E731
    print(markdown_table(
        ["responses screened (Holm, alpha 0.01)", "n", "median units scored", "flagged", "rate [95% CI]",
         "unadjusted p <= 0.01"],
        [["reviews with the key's bias (a model that follows the instruction)", n, median(on_bias), on_bias.num_flagged,
          rate_with_ci(on_bias.num_flagged, n), int((bias_p <= ALPHA).sum())],
         ["plain reviews (SmolLM2 reads the instruction, no bias)", num_plain, median(on_plain), on_plain.num_flagged,
          rate_with_ci(on_plain.num_flagged, num_plain), sum(r.p_value <= ALPHA for r in on_plain.rows)],
         ["human texts paired with random documents", h, median(on_human), on_human.num_flagged,
          rate_with_ci(on_human.num_flagged, h), f"{int((human_p <= ALPHA).sum())} ({(human_p <= ALPHA).mean():.2%})"],
         [f"all together: {h} human + {n} biased", h + n, median(mixed), f"{mixed_power} biased, {mixed_false} human",
          f"power {mixed_power / n:.2f}", "-"]]))
    print(f"\nFamily-wise error over {args.num_subscreens} random screens of 100 human texts: "
          f"{rate_with_ci(fwer_hits, args.num_subscreens)} of screens with any flag (target <= {ALPHA}).")
    print(f"Time: {1000 * mixed_s / (h + n):.2f} s wall ({1000 * mixed_cpu / (h + n):.2f} s CPU) per 1,000 responses "
          f"(the screen of {h + n}, evidence of the flagged included).\n")
    rows = []
    for m in (n, 1_000, 10_000, 100_000):
        pad = sub.choice(human_p, max(m - n, 0), replace=True)
        row = [f"{m:,}"]
        for method in ("holm", "bh"):
            adjusted = adjust(np.concatenate([bias_p, pad]), method)
            row.append(f"{(adjusted[:n] <= ALPHA).mean():.2f}")
        row.append(f"{ALPHA / m:.0e}")
        rows.append(row)
    print(markdown_table(["responses screened m (the reviews + human p-values)", "power, Holm (FWER 0.01)",
                          "power, BH (FDR 0.01)", "Holm's first threshold alpha / m"], rows))
    return {"found": found, "documents": n, "human": h, "human_flags": on_human.num_flagged,
            "bias_flags": on_bias.num_flagged, "plain_flags": on_plain.num_flagged, "fwer_hits": fwer_hits}


if __name__ == "__main__":
    main()
