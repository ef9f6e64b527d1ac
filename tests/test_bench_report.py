"""icw bench report: verdict-based TPR/FPR beside AUC and TPR@1%FPR, honest with few negatives."""

import json
import subprocess
import sys

import numpy as np
from scipy.stats import binomtest

from icw import ICWKey, verify


def write_run(path, num_pairs):
    """A run folder whose responses are really verified: positives are SA texts following the key,
    negatives are plain sentences (each with its own key)."""
    words = {c: w for c, w in zip("ABCDEFGHILMNOPRSTUWY", ("Apples", "Birds", "Cats", "Dogs", "Every", "Fish", "Good",
                                                           "Here", "It", "Lots", "Many", "Now", "Often", "People",
                                                           "Rain", "Some", "Then", "Under", "We", "You"), strict=True)}
    rows = []
    rng = np.random.default_rng(0)
    for i in range(num_pairs):
        key = ICWKey.create("sa", seed=i)
        secret = key.secret_string[: int(rng.integers(2, 18))]  # some positives follow only a few letters
        positive = " ".join(f"{words[c]} go on." for c in secret)
        negative = " ".join(f"{w} go on." for w in rng.choice(list(words.values()), 12))
        for role, text in (("positive", positive), ("negative", negative)):
            r = verify(text, key, num_permutations=50, num_null_keys=999)
            rows.append({"model": "m", "family": "sa", "id": str(i), "role": role, "attack": "none", "key": key.to_string(),
                         "response": text, "z_score": r.z_score, "p_value": r.p_value, "num_tokens_scored": 1})
    path.mkdir()
    (path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def report(path):
    out = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "report", str(path), "--no-figures",
                          "--num-bootstrap", "50"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout, json.loads((path / "results.json").read_text())["families"]["sa"]


def test_few_negatives_tpr_at_1fpr_not_estimable_and_verdict_rates_with_intervals(tmp_path):
    rows = write_run(tmp_path / "run", 40)
    md, sa = report(tmp_path / "run")
    assert sa["tpr_at_fpr"] is None and "not estimable" in sa["tpr_at_fpr_note"]
    assert "1.000 [1.000, 1.000]" not in md and "TPR@1%FPR is not estimable with fewer than 100 negatives" in md
    hits = sum(r["p_value"] <= 0.01 for r in rows if r["role"] == "positive")
    assert 0 < hits < 40 and sa["verdict_tpr"] == hits / 40
    ci = binomtest(hits, 40).proportion_ci(method="exact")
    assert sa["verdict_tpr_ci"] == [ci.low, ci.high]
    fp = sum(r["p_value"] <= 0.01 for r in rows if r["role"] == "negative")
    assert sa["verdict_fpr"] == fp / 40 and sa["verdict_fpr_ci"][1] > 0.05  # 40 negatives say little about the FPR
    assert f"{hits / 40:.3f} [{ci.low:.3f}, {ci.high:.3f}]" in md and "verdict TPR at p <= 0.01" in md


def test_enough_negatives_give_tpr_at_1fpr_with_its_interval(tmp_path):
    write_run(tmp_path / "run", 100)
    md, sa = report(tmp_path / "run")
    assert sa["tpr_at_fpr"] is not None and sa["tpr_at_fpr_ci"][0] <= sa["tpr_at_fpr"] <= sa["tpr_at_fpr_ci"][1]
    assert "not estimable" not in md


def write_stage(path, follow: int, num_pairs: int = 30, seed: int = 0):
    """One stage of a model line on the same questions and keys: positives follow the first ``follow`` letters of
    their SA secret (varied per question), with the instructed answers' perplexities in quality.jsonl."""
    words = dict(zip("ABCDEFGHILMNOPRSTUWY", ("Apples", "Birds", "Cats", "Dogs", "Every", "Fish", "Good", "Here",
                                                "It", "Lots", "Many", "Now", "Often", "People", "Rain", "Some",
                                                "Then", "Under", "We", "You"), strict=True))
    rng = np.random.default_rng(seed)
    rows, quality = [], []
    for i in range(num_pairs):
        key = ICWKey.create("sa", seed=i)
        letters = list(key.secret_string[: max(1, follow + int(rng.integers(-2, 3)))])
        letters += list(rng.choice(list(words), 12 - len(letters))) if len(letters) < 12 else []
        texts = {"positive": " ".join(f"{words[c]} go on." for c in letters),
                 "negative": " ".join(f"{w} go on." for w in rng.choice(list(words.values()), 12))}
        for role, text in texts.items():
            r = verify(text, key, num_permutations=50, num_null_keys=999)
            rows.append({"model": f"m{follow}", "family": "sa", "id": str(i), "role": role, "attack": "none",
                         "key": key.to_string(), "response": text, "z_score": r.z_score, "p_value": r.p_value,
                         "num_tokens_scored": 1})
        quality.append({"model": f"m{follow}", "family": "sa", "id": str(i), "role": "positive",
                        "attack": "ppl:ref", "metric": "ppl", "reference": "ref", "value": 3.0 + follow / 10 + i / 100})
    path.mkdir()
    (path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "quality.jsonl").write_text("".join(json.dumps(q) + "\n" for q in quality))
    return rows


def test_compare_pairs_each_stage_with_the_one_before(tmp_path):
    """`icw bench compare`: each stage's own summary, and the paired tests against the stage before it on the same
    questions and keys (Wilcoxon on instructed z, exact McNemar on verdicts, the median perplexity ratio)."""
    from scipy.stats import wilcoxon

    base, trained = write_stage(tmp_path / "base", 3), write_stage(tmp_path / "trained", 12)
    out = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "compare", str(tmp_path / "base"),
                          str(tmp_path / "trained"), "--labels", "Base", "+SDLP", "--out", str(tmp_path / "cmp"),
                          "--num-bootstrap", "50"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "cmp" / "stages.json").read_text())
    first, second = result["stages"]
    assert "paired" not in first and first["families"]["sa"]["num_positive"] == 30
    paired = second["paired"]["sa"]
    pos = lambda rows: [r for r in rows if r["role"] == "positive"]  # noqa: E731
    diffs = [b["z_score"] - a["z_score"] for a, b in zip(pos(base), pos(trained), strict=True)]
    assert paired["num_pairs"] == 30 and paired["mean_z_change"] == np.mean(diffs) > 1
    assert paired["wilcoxon_p"] == wilcoxon(diffs).pvalue < 0.001
    flagged = [(a["p_value"] <= 0.01, b["p_value"] <= 0.01) for a, b in zip(pos(base), pos(trained), strict=True)]
    only_after, only_before = sum(b and not a for a, b in flagged), sum(a and not b for a, b in flagged)
    assert only_after > only_before
    assert (paired["flagged_only_after"], paired["flagged_only_before"]) == (only_after, only_before)
    assert paired["mcnemar_p"] == binomtest(only_after, only_after + only_before).pvalue
    assert paired["ppl_ratio"] == np.exp(np.median([np.log((3.0 + 1.2 + i / 100) / (3.0 + 0.3 + i / 100))
                                                    for i in range(30)]))
    table = (tmp_path / "cmp" / "stages.md").read_text()
    assert table in out.stdout and "| Base | 30 + 30 |" in table and "| +SDLP | 30 + 30 |" in table
    assert "not estimable" in table  # TPR@1%FPR from 30 negatives, as icw bench report says
    bad = subprocess.run([sys.executable, "-m", "icw.cli", "bench", "compare", str(tmp_path / "base"),
                          str(tmp_path / "trained"), "--labels", "Base"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "one label per run" in bad.stderr, bad.stderr


def test_quality_table_gives_the_median_perplexity_beside_the_mean(tmp_path):
    """One degenerate answer moves the mean perplexity (the paper's Table 3) several-fold; the report prints the
    median beside it, which it does not move."""
    from icw.bench.report import markdown, summarize

    write_stage(tmp_path / "run", 6)
    path = tmp_path / "run" / "quality.jsonl"
    quality = [json.loads(line) for line in path.read_text().splitlines()]
    quality[0]["value"] = 2205.0  # an answer that repeats one token
    path.write_text("".join(json.dumps(q) + "\n" for q in quality))
    values = [q["value"] for q in quality]
    sa = summarize(tmp_path / "run", num_bootstrap=20)["families"]["sa"]
    assert sa["ppl_by_model"]["ref"] == sa["ppl"] == np.mean(values) > 70
    assert sa["ppl_median_by_model"]["ref"] == np.median(values) < 4
    md = markdown(summarize(tmp_path / "run", num_bootstrap=20))
    assert "| Family | PPL (ref) | median PPL (ref) |" in md
    assert f"| SA | {np.mean(values):.2f} | {np.median(values):.2f} |" in md


def test_sa_openings_count_sentences_that_open_on_the_keys_letters(tmp_path):
    """The SA diagnostic: per sentence position, the share of instructed answers whose sentence there opens with the
    secret's letter at that position, counted from the real texts; the report prints it."""
    from icw.bench.report import markdown, summarize
    from icw.keys import as_key
    from icw.text import sentence_initial_spans

    rows = write_stage(tmp_path / "run", 3)  # positives follow the first 1-5 letters of their secret
    sa = summarize(tmp_path / "run", num_bootstrap=20)["families"]["sa"]
    positives = [r for r in rows if r["role"] == "positive"]
    want = [sum(len(o := [c for _, c in sentence_initial_spans(r["response"])]) > i
                and o[i] == as_key(r["key"]).secret_string[i] for r in positives) / len(positives) for i in range(5)]
    assert sa["sa_openings"] == [round(w, 4) for w in want] and sa["sa_openings"][0] == 1.0 > sa["sa_openings"][4]
    shares = ", ".join(f"{100 * w:.0f}%" for w in want)
    assert f"opens with the key's i-th letter, sentences 1-5: {shares} (about 5% by chance)" in markdown(
        summarize(tmp_path / "run", num_bootstrap=20))


def test_looping_answers_are_counted_in_the_reference_tokens_and_reported_beside_perplexity(tmp_path):
    """Looping answers have a low perplexity; the quality stage records each instructed answer's seq-rep-4 in the
    reference model's tokens (resumable), and the report and the stage table give the share that loop."""
    from icw.bench.compare import compare_stages
    from icw.bench.compare import markdown as stages_markdown
    from icw.bench.quality import repetition_family, seq_rep_n
    from icw.bench.report import markdown, summarize
    from icw.bench.runner import ResultStore
    from icw.models import load_tokenizer

    rows = write_stage(tmp_path / "run", 3, num_pairs=10)
    loop = "The answer is that the Earth's orbit in the Earth's orbit in the Earth's orbit in the Earth's orbit."
    for r in rows[:6]:  # three positives (rows alternate positive, negative) loop
        if r["role"] == "positive":
            r["response"] = loop
    (tmp_path / "run" / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store, quality = ResultStore(tmp_path / "run" / "responses.jsonl"), ResultStore(tmp_path / "run" / "quality.jsonl")
    assert repetition_family(store, quality, "m3", "sa", "smollm2") == 10
    assert repetition_family(store, quality, "m3", "sa", "smollm2") == 0  # resumed: nothing twice
    tok = load_tokenizer("smollm2")
    values = {q["id"]: q["value"] for q in quality.rows() if q["metric"] == "seq_rep_4"}
    assert values == {r["id"]: seq_rep_n(tok(r["response"], add_special_tokens=False)["input_ids"])
                      for r in rows if r["role"] == "positive"}
    assert seq_rep_n(tok(loop, add_special_tokens=False)["input_ids"]) >= 0.5 > max(
        v for i, v in values.items() if int(i) >= 3)
    sa = summarize(tmp_path / "run", num_bootstrap=20)["families"]["sa"]
    assert sa["looping_by_model"] == {"smollm2": 0.3}
    assert sa["seq_rep_by_model"]["smollm2"] == np.mean(list(values.values()))
    md = markdown(summarize(tmp_path / "run", num_bootstrap=20))
    assert "| PPL (ref) | median PPL (ref) | looping (ref) | PPL (smollm2) | median PPL (smollm2) | looping (smollm2) |" in md
    assert f"| SA | {3.3 + 4.5 / 100:.2f} | {3.3 + 4.5 / 100:.2f} | - | - | - | 0.30 |" in md
    assert "seq-rep-4 >= 0.5" in md
    table = stages_markdown(compare_stages([tmp_path / "run"], ["Base"], num_bootstrap=20))
    assert "| looping |" in table and "| 0.30 |" in table
