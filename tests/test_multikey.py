"""verify_keys / icw detect --keys: many keys per text with Holm's family-wise error control."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from icw import ICWKey, verify, verify_keys
from icw.multikey import holm_adjust
from icw.vocab import vocabulary

HUMAN = ("The committee met on Tuesday to discuss the budget. Members raised concerns about rising costs, "
         "and several proposals were tabled for further review. A final decision is expected next month.")
SA_TEXT = "Here we go. Every day is new. Lots to do. Let us start. Over and out."


def human_passages(count):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _common import human_passages as passages

    return [t for _, t in passages()[:count]]


@pytest.mark.parametrize("family", ["tsp", "wip", "sa"])
def test_every_key_scores_as_verify_does(family, gpt2):
    tok = gpt2 if family != "sa" else None
    keys = [ICWKey.create(family, seed=s, tokenizer=tok) for s in range(12)]
    if family == "wip":
        keys.append(ICWKey.create("wip", tokenizer=gpt2, letters="AEIOU"))  # another key size: its own null
    if family == "sa":
        keys.append(ICWKey.create("sa", secret="HELLO"))  # another secret length: its own null
    texts = [HUMAN, SA_TEXT, "", "12345 !!!"]
    many = verify_keys(texts, keys, tok, num_null_keys=9999)  # verify's Monte Carlo size, for SA
    for text, result in zip(texts, many, strict=True):
        single = verify([text] * len(keys), keys, tok, sequential=False)  # all M secrets, as verify_keys
        np.testing.assert_allclose(result.p_values, [r.p_value for r in single], rtol=1e-12)
        np.testing.assert_allclose(result.z_scores, [r.z_score for r in single], rtol=1e-9, atol=1e-12)
        assert result.num_tokens_scored == single[0].num_tokens_scored
        assert result.statistic == single[0].statistic and "Holm" in result.correction


def test_holm_against_the_step_down_procedure():
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = int(rng.integers(1, 30))
        p = rng.random(k) ** rng.uniform(1, 6)
        alpha = 0.05
        rejected, order = set(), np.argsort(p)
        for i, j in enumerate(order):  # reject while p_(i) <= alpha / (K - i)
            if p[j] > alpha / (k - i):
                break
            rejected.add(int(j))
        adjusted = holm_adjust(p)
        assert {int(j) for j in np.flatnonzero(adjusted <= alpha)} == rejected
        assert (adjusted >= p).all() and (adjusted <= np.minimum(1, k * p) + 1e-15).all()  # never above Bonferroni


def test_the_generating_key_fires_among_many(gpt2):
    view = vocabulary(gpt2)
    keys = [ICWKey.create("wip", seed=s, tokenizer=gpt2) for s in range(300)]
    words = [view.surfaces[i].strip() for i in view.v_en_word[:20000]
             if chr(65 + view.word_letter[i]) in keys[123].green_letters and len(view.surfaces[i].strip()) > 3][:120]
    result = verify_keys(" ".join(words), keys, gpt2)
    assert result.fired == [123] and result.is_watermarked
    assert result.to_dict()["fired"][0]["key"] == keys[123].to_string()
    tsp = [ICWKey.create("tsp", seed=s, tokenizer=gpt2) for s in range(300)]
    text = " ".join(view.surfaces[i] for i in tsp[45].token_set(gpt2)[:150])
    assert verify_keys(text, tsp, gpt2).fired == [45]


def test_family_wise_error_on_human_text(qwen3):
    # 200 keys at 1% each: without a correction ~87% of texts would have a key that fires
    passages = human_passages(60)
    for family in ("wip", "tsp"):
        keys = [ICWKey.create(family, seed=10_000 + s, tokenizer=qwen3) for s in range(200)]
        results = verify_keys(passages, keys, qwen3)
        assert sum(r.is_watermarked for r in results) <= 3  # Binomial(60, <= 0.01): P(> 3) < 0.003
        assert np.mean([np.mean(r.p_values <= 0.01) for r in results]) < 0.03  # the raw per-key level holds


def test_sa_resolution_grows_with_the_number_of_keys():
    keys = [ICWKey.create("sa", seed=s) for s in range(150)] + [ICWKey.create("sa", seed=7, secret="HELLOEOLH")]
    result = verify_keys(SA_TEXT, keys)
    assert "Monte Carlo over 150,999 " in result.p_value_method and result.note is None
    assert verify_keys(SA_TEXT, keys, num_null_keys=999).note.startswith("the Monte Carlo resolution")


def run(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "icw.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=300)


def test_cli_detect_keys(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# one key per user\n" + "\n".join(ICWKey.create("sa", seed=s).to_string() for s in range(5))
                    + "\n\nicw:sa:secret=HELLO\n")
    out = run("detect", "--keys", str(keys), stdin=SA_TEXT)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert row["num_keys"] == 6 and [f["key"] for f in row["fired"]] == ["icw:sa:secret=HELLO"]
    assert row["fired"][0]["index"] == 5 and "Holm" in row["correction"] and "keys" not in row
    assert len(json.loads(run("detect", "--keys", str(keys), "--all-keys", stdin=SA_TEXT).stdout)["keys"]) == 6
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("icw:sa:secret=HELLO\n" + ICWKey.create("wip", seed=1, tokenizer=_gpt2()).to_string() + "\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("icw:sa:secret=HELLO\nnot a key\n")
    for args, message in ((["--keys", str(mixed)], "several families"), (["--keys", str(bad)], "bad.txt:2: malformed"),
                          (["--keys", str(keys), "--key", "icw:sa:secret=HI"], "either --key"),
                          (["--keys", str(tmp_path / "none.txt")], "no such file")):
        out = run("detect", *args, stdin=SA_TEXT)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


def _gpt2():
    from icw.models import load_tokenizer

    return load_tokenizer("gpt2")
