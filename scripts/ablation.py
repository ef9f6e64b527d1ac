"""The paper's training ablation on SmolLM2-135M-Instruct with held-out keys and questions (issue 16).

Rows: Base, +SFT, +SDLP (paper), +SDLP relabelled, +SDLP mixed (relabelled keys and on-policy
batches, lmbda = 0.5), +GRPO, +SDLP+GRPO (GRPO from the best SDLP variant); one joint model per
variant trained on the union of the families' D_cs. Families WIP, SA and TSP (candidate pool
``pool_size``). Columns: AUC and TPR@1%FPR with bootstrap CIs, the verdict rate at alpha = 0.01,
mean z of instructed answers / plain answers / instructed answers scored under another key,
median PPL under the base model, mean answer length, the key-swap probe's A/B/C (SA: at sentence openings), and
AUC under ICWBench's held-out instruction template. Before training, a dose-response step
generates base-model answers with the bias at reduced deltas and reports TPR@1%FPR per
(delta, length), i.e. what lift and answer length a trained model needs.

Held-out questions: ICWBench's split of the bundled questions (test / train disjoint). Held-out
keys: ICWBench's test seeds 0..n-1; training keys come from the pool >= 1,000,000.

Every step is a cell cached under ``--out`` (``cells/*.json``, trained models in ``models/``): a
finished cell is never redone, so the same command resumes after an interruption (or after a
device command's time limit). Usage::

    python scripts/ablation.py --size cpu --device cpu --out runs/ablation-cpu            # reduced, CPU
    python scripts/ablation.py --size gpu --device cuda --out runs/ablation --stop_after 540   # one H100
    python scripts/ablation.py --size tiny --model tiny --out runs/ablation-tiny           # pipeline check

``--model tiny`` swaps SmolLM2 for the tiny random Qwen3 (numbers meaningless; it proves the
pipeline end to end in minutes). Results: ``<out>/ablation.md`` and ``<out>/ablation.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("base", "sft", "sdlp", "sdlp-relabel", "sdlp-mixed", "grpo", "sdlp-grpo")
LABELS = {"base": "Base", "sft": "+SFT", "sdlp": "+SDLP (paper)", "sdlp-relabel": "+SDLP relabelled",
          "sdlp-mixed": "+SDLP mixed (relabel, lmbda 0.5)", "grpo": "+GRPO", "sdlp-grpo": "+SDLP+GRPO (best SDLP)"}
SDLP_OPTIONS = {"sdlp": [], "sdlp-relabel": ["--relabel_keys", "true"],
                "sdlp-mixed": ["--relabel_keys", "true", "--lmbda", "0.5"]}


@dataclass
class Size:
    """Sizes of one ablation run (``--size``)."""

    families: list[str] = field(default_factory=lambda: ["wip", "sa", "tsp"])
    num_h1: int = 300            # D_H1 rows per family
    num_h0: int = 100            # D_H0 rows per family
    train_tokens: int = 256      # D_cs answer length
    eval_tokens: int = 384       # evaluation answer length
    num_eval: int = 300          # positives (and negatives) per cell: held-out queries x keys
    dose_deltas: list[float] = field(default_factory=lambda: [0.5, 1.0, 1.5, 3.0])
    dose_lengths: list[int] = field(default_factory=lambda: [96, 192, 384])
    num_dose: int = 100          # positives per dose cell
    probe_rows: int = 32
    pool_size: int = 300         # TSP candidate pool (fits a 2k-token context with gamma <= 0.3)
    epochs: float = 1.0
    batch: int = 16              # SDLP/SFT rows per step
    lr: float = 2e-4             # LoRA learning rate (not the paper's: it trains full weights at 7e-6)
    lora_r: int = 16
    grpo_steps: int = 20
    grpo_generations: int = 8
    grpo_prompts: int = 8        # prompts per GRPO step
    grpo_tokens: int = 256
    min_completion_tokens: int = 128
    gen_batch: int = 150         # prompts per generate() call
    heldout_template: bool = True


SIZES = {
    # planned for ~25 minutes on one H100 (see docs/experiments/ablation-table.md for the estimate); run it
    # in several device commands: cells resume
    "gpu": Size(),
    # reduced: minutes on an idle CPU, much longer on a loaded one
    "cpu": Size(families=["wip", "sa", "tsp"], num_h1=12, num_h0=4, train_tokens=48, eval_tokens=64, num_eval=12,
                dose_deltas=[1.0, 3.0], dose_lengths=[32, 64], num_dose=12, probe_rows=8, pool_size=200, epochs=1,
                batch=4, grpo_steps=2, grpo_generations=2, grpo_prompts=2, grpo_tokens=32, min_completion_tokens=8,
                gen_batch=12, heldout_template=False),
    # smallest: every cell of the table once, for a pipeline check on a loaded machine (with --model tiny)
    "tiny": Size(families=["wip", "sa"], num_h1=4, num_h0=2, train_tokens=16, eval_tokens=24, num_eval=6,
                 dose_deltas=[3.0], dose_lengths=[24], num_dose=6, probe_rows=4, pool_size=200, epochs=1, batch=2,
                 grpo_steps=1, grpo_generations=2, grpo_prompts=1, grpo_tokens=16, min_completion_tokens=4,
                 gen_batch=6, heldout_template=True),
    # learning curves on one GPU (scripts/transfer_curve.py --size curve): the H100 miniature's 800 + 200
    # rows of D_cs (256 tokens here), the table's held-out evaluation (300 + 300 answers of 384 tokens)
    "curve": Size(families=["wip", "sa"], num_h1=800, num_h0=200, dose_deltas=[1.5, 3.0], dose_lengths=[192, 384],
                  gen_batch=200, heldout_template=False),
    # the CPU probe experiment (WIP, 160 + 40 rows of 112 tokens, LoRA r 16, 60 steps of batch 4,
    # lr 2e-4, probe on 32 held-out rows); use with --variants base,sdlp,sdlp-relabel[,sdlp-mixed]
    "probe": Size(families=["wip"], num_h1=160, num_h0=40, train_tokens=112, eval_tokens=192, num_eval=60,
                  dose_deltas=[3.0], dose_lengths=[112], num_dose=32, probe_rows=32, epochs=1.2, batch=4,
                  gen_batch=40, heldout_template=False),
}


def device_flags(device: str) -> list[str]:
    """Trainer flags for a device; the precision is left to the recipes' one decision (:mod:`icw.precision`:
    bf16 autocast where the CPU or GPU has native bf16, fp32 where it would be emulated)."""
    return ["--use_cpu", str(device == "cpu").lower()]


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.size = args, SIZES[args.size]
        if args.families:
            self.size = replace(self.size, families=[f.strip() for f in args.families.split(",") if f.strip()])
        self.out = Path(args.out)
        (self.out / "cells").mkdir(parents=True, exist_ok=True)
        self.start = time.time()
        self._model: dict[str, Any] = {}
        self._base: tuple[Any, Any] | None = None

    # ------------------------------------------------------------------ plumbing
    def cell(self, name: str, fn: Any) -> Any:
        path = self.out / "cells" / f"{name}.json"
        if path.exists():
            return json.loads(path.read_text())
        if self.args.stop_after and time.time() - self.start > self.args.stop_after:
            print(f"ablation: --stop_after reached before cell {name}; rerun the same command to go on", flush=True)
            sys.exit(0)
        t0 = time.time()
        print(f"ablation: cell {name} ...", flush=True)
        value = fn()
        value = {"seconds": round(time.time() - t0, 1), **value} if isinstance(value, dict) else value
        path.write_text(json.dumps(value))
        return value

    @property
    def base_path(self) -> str:
        if self.args.model != "tiny":
            return self.args.model
        path = self.out / "models" / "tiny-base"
        if not (path / "config.json").exists():
            from icw.models import load_tokenizer
            from icw.testing import tiny_random_model

            tiny_random_model("qwen3").save_pretrained(path)
            load_tokenizer("qwen3").save_pretrained(path)
        return str(path)

    def load(self, path: str) -> tuple[Any, Any]:
        from icw.models import load_model

        if path not in self._model:
            self._model.clear()  # one model in memory at a time (plus the base)
            self._model[path] = load_model(path, device=self.args.device)
        return self._model[path]

    def base(self) -> tuple[Any, Any]:
        if self._base is None:
            from icw.models import load_model

            self._base = load_model(self.base_path, device=self.args.device)
        return self._base

    @property
    def tok(self) -> Any:
        return self.base()[1]

    def queries(self) -> tuple[list[str], list[str]]:
        from icw.bench.dataset import bundled_questions_path, read_questions, split_queries

        test, train = split_queries(read_questions(bundled_questions_path()), num_test=100, num_train=None, seed=0)
        return [q for q, _ in test], [q for q, _ in train]

    def eval_items(self, family: str, n: int) -> tuple[list[str], list[Any]]:
        """Held-out queries repeated with held-out keys (ICWBench's test seeds 0..n-1)."""
        from icw import ICWKey

        test, _ = self.queries()
        queries = [test[i % len(test)] for i in range(n)]
        params = {"pool_size": self.size.pool_size} if family == "tsp" else {}
        keys = [ICWKey.create(family, i, self.tok if family != "sa" else None, **params) for i in range(n)]
        return queries, keys

    # ------------------------------------------------------------------ steps
    def dcs(self) -> str:
        path = self.out / "dcs"

        def build() -> dict:
            from icw.train.synthesis import SynthesisConfig, synthesize

            s = self.size
            config = SynthesisConfig(model_name_or_path=self.base_path, output_dir=str(path), families=s.families,
                                     num_h1=[s.num_h1], num_h0=[s.num_h0], pool_size=s.pool_size,
                                     max_new_tokens=s.train_tokens, batch_size=s.gen_batch, device=self.args.device)
            model, tok = self.base()
            synthesize(config, model, tok, self.queries()[1])
            return {"stats": json.loads((path / "stats.json").read_text())}

        self.cell("dcs", build)
        # a D_cs carried from another machine (or a stale cell) must be the one this run would build
        config = path / "config.json"
        made = json.loads(config.read_text()) if config.exists() else {}
        made_by, length = made.get("model_name_or_path"), made.get("max_new_tokens")
        counts, wanted = (made.get("num_h1"), made.get("num_h0")), ([self.size.num_h1], [self.size.num_h0])
        finished = (path / "data.parquet").exists()
        if not finished or made_by != self.base_path or length != self.size.train_tokens or counts != wanted:
            raise SystemExit(f"ablation: {path} does not hold a finished D_cs of {self.base_path} with answers of "
                             f"{self.size.train_tokens} tokens and {wanted[0][0]} + {wanted[1][0]} rows (data.parquet "
                             f"{'present' if finished else 'missing'}, made by {made_by}, {length} tokens, "
                             f"{counts[0]} + {counts[1]} rows); delete {path} and "
                             f"{self.out / 'cells' / 'dcs.json'} to rebuild it")
        return str(path)

    def dose(self) -> dict:
        """Base model + bias at each delta on held-out queries/keys, truncated to each length."""
        from icw.detection import detection_report
        from icw.generation import generate_responses
        from icw.verification import verify

        s, (model, tok) = self.size, self.base()

        def family_cell(family: str) -> dict:
            queries, keys = self.eval_items(family, s.num_dose)
            plain, plain_ids = generate_responses(model, tok, queries, None, "plain", max_new_tokens=max(s.dose_lengths),
                                                  batch_size=s.gen_batch, return_token_ids=True, seed=1)
            rows, out = [], {"family": family, "cells": []}
            for delta in s.dose_deltas:
                texts, ids = generate_responses(model, tok, queries, keys, "bias", delta=delta,
                                                max_new_tokens=max(s.dose_lengths), batch_size=s.gen_batch,
                                                return_token_ids=True)
                if delta == max(s.dose_deltas):
                    rows = [{"query": q, "key": k.to_string(), "response": t, "response_ids": i}
                            for q, k, t, i in zip(queries, keys, texts, ids, strict=True)]
                for length in s.dose_lengths:
                    pos = tok.batch_decode([i[:length] for i in ids], skip_special_tokens=True)
                    neg = tok.batch_decode([i[:length] for i in plain_ids], skip_special_tokens=True)
                    zp = [r.z_score for r in verify(pos, keys, tok, num_null_keys=1)]
                    zn = [r.z_score for r in verify(neg, keys, tok, num_null_keys=1)]
                    rep = detection_report(zp, zn, num_bootstrap=200)
                    out["cells"].append({"delta": delta, "length": length, "auc": rep.roc_auc, "tpr": rep.tpr_at_fpr,
                                         "mean_z": float(np.mean(zp))})
            out["probe_rows"] = rows[: s.probe_rows]
            return out

        return {f: self.cell(f"dose-{f}", lambda f=f: family_cell(f)) for f in s.families}

    def train(self, variant: str, init: str | None = None) -> str:
        """Train one variant through its recipe (a subprocess, like a user would); LoRA merged for evaluation."""
        s = self.size
        out = self.out / "models" / variant
        merged = out / "merged"

        def run() -> dict:
            common = ["--model_name_or_path", init or self.base_path, "--dataset_name", self.dcs(),
                      "--output_dir", str(out), "--use_peft", "true", "--lora_r", str(s.lora_r),
                      "--lora_alpha", str(2 * s.lora_r), "--report_to", "none",
                      "--save_strategy", "no", "--logging_steps", "5", "--seed", "0",
                      *device_flags(self.args.device)]
            if variant == "sft":
                cmd = ["recipes/sft.py", "--config", "recipes/configs/smollm2-135m/sft.yaml", *common,
                       "--learning_rate", str(s.lr), "--num_train_epochs", str(s.epochs),
                       "--per_device_train_batch_size", str(s.batch), "--max_length", "4096"]
            elif variant.endswith("grpo"):
                cmd = ["recipes/grpo.py", "--config", "recipes/configs/smollm2-135m/grpo.yaml", *common,
                       "--learning_rate", "1e-5", "--max_steps", str(s.grpo_steps),
                       "--num_generations", str(s.grpo_generations),
                       "--per_device_train_batch_size", str(s.grpo_prompts * s.grpo_generations),
                       "--gradient_accumulation_steps", "1",
                       "--max_completion_length", str(s.grpo_tokens), "--min_completion_tokens",
                       str(s.min_completion_tokens), "--loss_type", "grpo"]
            else:
                cmd = ["recipes/sdlp.py", "--config", "recipes/configs/smollm2-135m/sdlp.yaml", *common,
                       "--learning_rate", str(s.lr), "--num_train_epochs", str(s.epochs),
                       "--per_device_train_batch_size", str(s.batch), "--max_response_length", str(s.train_tokens + 1),
                       "--loss_chunk_size", "512", *SDLP_OPTIONS[variant]]
                if "--relabel_keys" in cmd:
                    cmd += ["--relabel_copies", str(self.args.relabel_copies)]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join(
                       [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
            subprocess.run([sys.executable, *cmd], cwd=ROOT, env=env, check=True)
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(str(out)).merge_and_unload()
            model.save_pretrained(merged)
            self.tok.save_pretrained(merged)
            log = out / "trainer_state.json"
            return {"command": " ".join(cmd), "log": json.loads(log.read_text())["log_history"] if log.exists() else []}

        self.cell(f"train-{variant}", run)
        return str(merged)

    def evaluate(self, variant: str, path: str, family: str) -> dict:
        s = self.size

        def run() -> dict:
            from icw import ICWKey
            from icw.detection import detection_report
            from icw.generation import generate_responses
            from icw.templates import HELDOUT_TEMPLATES
            from icw.train.probe import key_swap_probe, other_key
            from icw.train.synthesis import perplexities
            from icw.verification import verify

            model, tok = self.base() if variant == "base" else self.load(path)
            base, _ = self.base()
            queries, keys = self.eval_items(family, s.num_eval)
            gen = {"max_new_tokens": s.eval_tokens, "batch_size": s.gen_batch, "return_token_ids": True}
            pos, pos_ids = generate_responses(model, tok, queries, keys, "instruction", **gen)
            neg, _ = generate_responses(model, tok, queries, None, "plain", seed=1, **gen)
            res_pos = verify(pos, keys, tok)  # full p-values for the verdict (SA's Monte Carlo needs its null secrets)
            zp = [r.z_score for r in res_pos]
            zn = [r.z_score for r in verify(neg, keys, tok, num_null_keys=1)]
            others = [ICWKey.create(family, 500_000 + i, tok if family != "sa" else None,
                                    **({"pool_size": s.pool_size} if family == "tsp" else {})) for i in range(len(keys))]
            zo = [r.z_score for r in verify(pos, others, tok, num_null_keys=1)]
            rep = detection_report(zp, zn, num_bootstrap=1000)
            ppl = [p for p in perplexities(base, tok, queries, pos) if p is not None and np.isfinite(p)]
            row = {"variant": variant, "family": family, **{k: v for k, v in rep.to_dict().items()},
                   "verdict_rate": float(np.mean([r.p_value <= 0.01 for r in res_pos])),
                   "p_value_method": res_pos[0].p_value_method, "mean_z_instructed": float(np.mean(zp)),
                   "mean_z_plain": float(np.mean(zn)), "mean_z_other_key": float(np.mean(zo)),
                   "median_ppl": float(np.median(ppl)) if ppl else float("nan"),
                   "mean_length": float(np.mean([len(i) for i in pos_ids]))}
            if s.heldout_template:
                held, _ = generate_responses(model, tok, queries, keys, "instruction",
                                             template=HELDOUT_TEMPLATES[family], **gen)
                zh = [r.z_score for r in verify(held, keys, tok, num_null_keys=1)]
                row["auc_heldout_template"] = detection_report(zh, zn, num_bootstrap=200).roc_auc
            rows = self.dose()[family]["probe_rows"]
            probe = key_swap_probe(model, tok, rows, base_model=base,
                                   other_keys=[other_key(ICWKey.from_string(r["key"]), tok, i) for i, r in enumerate(rows)],
                                   max_response_tokens=s.eval_tokens)
            row["probe"] = {c: [st.mean, st.stderr] for c, st in probe.stats.items()}
            return row

        return self.cell(f"eval-{variant}-{family}", run)

    # ------------------------------------------------------------------ the table
    def run(self) -> None:
        s = self.size
        self.dcs()
        self.dose()
        paths = {"base": self.base_path}
        results: dict[str, dict] = {}

        def evaluate_all(variant: str) -> None:
            results[variant] = {f: self.evaluate(variant, paths[variant], f) for f in s.families}

        variants = self.args.variants
        evaluate_all("base")
        for variant in ("sft", "sdlp", "sdlp-relabel", "sdlp-mixed", "grpo"):
            if variant in variants:
                paths[variant] = self.train(variant)
                evaluate_all(variant)
        trained = [v for v in ("sdlp", "sdlp-relabel", "sdlp-mixed") if v in results]
        best = max(trained, key=lambda v: np.mean([results[v][f]["roc_auc"] for f in s.families]), default="")
        if "sdlp-grpo" in variants:
            if not best:
                raise SystemExit("ablation: sdlp-grpo starts from the best SDLP variant: add one to --variants")
            paths["sdlp-grpo"] = self.train("sdlp-grpo", init=paths[best])
            evaluate_all("sdlp-grpo")
        self.write(results, best)

    def write(self, results: dict, best: str) -> None:
        s = self.size
        doc = {"size": self.args.size, "model": self.args.model, "device": self.args.device, "sizes": asdict(s),
               "best_sdlp": best or None, "results": results, "dose": self.dose(),
               "wall_seconds_this_invocation": round(time.time() - self.start, 1)}
        (self.out / "ablation.json").write_text(json.dumps(doc, indent=2))
        title = [f"Ablation ({self.args.size} size, model {self.args.model}, device {self.args.device})",
                 f"{s.num_eval} positives and {s.num_eval} negatives per cell, {s.eval_tokens}-token answers"]
        if "sdlp-grpo" in results:
            title.append(f"+SDLP+GRPO starts from {LABELS[best]}")
        if s.num_eval < 100:
            title.append("TPR@1%FPR is not estimable with fewer than 100 negatives (n/e)")
        lines = ["; ".join(title) + ".", "",
                 "| Family | Model | AUC (95% CI) | TPR@1%FPR (95% CI) | verdict@0.01 | z instr / plain / other key "
                 "| median PPL | mean len | probe A / B / C | AUC held-out template |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for f in s.families:
            for v in (v for v in VARIANTS if v in results):
                r = results[v][f]
                probe = ("{:+.2f} / {:+.2f} / {:+.2f}".format(*(r["probe"][c][0] for c in "ABC"))
                         if "probe" in r else "n/a")
                held = f"{r['auc_heldout_template']:.3f}" if "auc_heldout_template" in r else "-"
                lines.append(
                    f"| {f.upper()} | {LABELS[v]} | {r['roc_auc']:.3f} ({r['roc_auc_ci'][0]:.2f}-{r['roc_auc_ci'][1]:.2f}) | "
                    + (f"{r['tpr_at_fpr']:.3f} ({r['tpr_at_fpr_ci'][0]:.2f}-{r['tpr_at_fpr_ci'][1]:.2f}) | "
                       if r["num_negative"] >= 100 else "n/e | ") +
                    f"{r['verdict_rate']:.3f} | "
                    f"{r['mean_z_instructed']:.2f} / {r['mean_z_plain']:.2f} / {r['mean_z_other_key']:.2f} | "
                    f"{r['median_ppl']:.1f} | {r['mean_length']:.0f} | {probe} | {held} |")
        lines += ["", "Key-swap probe (log-odds lift over the base model, mean ± s.e. over rows):", "",
                  "| Family | Model | A | B (instruction) | C (prefix) | plain |", "|---|---|---|---|---|---|"]
        lines += [f"| {f.upper()} | {LABELS[v]} | " + " | ".join(
                  "{:+.3f} ± {:.3f}".format(*results[v][f]["probe"][c]) for c in ("A", "B", "C", "plain")) + " |"
                  for f in s.families for v in VARIANTS if v in results and "probe" in results[v][f]]
        lines += ["", "Dose-response (base model + bias at delta, answers cut to length; TPR@1%FPR / AUC):", "",
                  "| Family | delta | " + " | ".join(f"{n} tokens" for n in s.dose_lengths) + " |",
                  "|---|---|" + "---|" * len(s.dose_lengths)]
        for f, cell in self.dose().items():
            for delta in s.dose_deltas:
                vals = [c for c in cell["cells"] if c["delta"] == delta]
                lines.append(f"| {f.upper()} | {delta} | " + " | ".join(f"{c['tpr']:.2f} / {c['auc']:.2f}" for c in vals) + " |")
        (self.out / "ablation.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--model", default="smollm2", help="smollm2 (embedded), a local folder, or 'tiny'")
    parser.add_argument("--out", default="runs/ablation")
    parser.add_argument("--stop_after", type=float, default=0,
                        help="seconds: start no new cell after this (for time-limited commands; rerun to resume)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated rows to run (base always runs); default: all")
    parser.add_argument("--families", default=None, help="comma-separated families; default: the size's")
    parser.add_argument("--relabel_copies", type=int, default=1,
                        help="relabelled variants: train each D_H1 response under this many fresh keys "
                             "(cells are cached by name: give such a run its own --out)")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := sorted(set(args.variants) - set(VARIANTS)):
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    Run(args).run()


if __name__ == "__main__":
    main()
