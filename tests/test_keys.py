import hashlib
import math

import numpy as np
import pytest
from scipy.stats import chisquare

from icw import ICWKey, ICWKeyError, KeyMismatchError, vocabulary
from icw.keys import SA_POOL, TEMPLATES, as_keys


# Golden vectors: key material must be identical on every platform and NumPy version.
def test_golden_keys(qwen3, gpt2):
    assert ICWKey.create("wip", seed=1, tokenizer=qwen3).green_letters == "CEFGIJLMTUWXY"
    assert ICWKey.create("sa", seed=1).secret_string == "YNTSLUFOOECUAGYMBL"
    assert ICWKey.create("sa", seed=123456789, length=20).secret_string == "NHOFGOUYTRBWTSTRGRFA"
    tsp = ICWKey.create("tsp", seed=1, tokenizer=qwen3)
    ids = tsp.token_set(qwen3)
    assert ids[:5].tolist() == [35, 37, 38, 46, 47]
    assert hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()[:16] == GOLDEN_TSP_QWEN3_SEED1
    small = ICWKey.create("tsp", seed=9, tokenizer=gpt2, gamma=0.25, pool_size=400)
    assert small.token_set(gpt2)[:6].tolist() == GOLDEN_TSP_GPT2_SEED9


GOLDEN_TSP_QWEN3_SEED1 = "4d206470921f17d4"
GOLDEN_TSP_GPT2_SEED9 = [36, 40, 42, 48, 49, 53]


def test_key_material_follows_the_paper(qwen3):
    view = vocabulary(qwen3)
    tsp = ICWKey.create("tsp", seed=5, tokenizer=qwen3)
    ids = tsp.token_set(qwen3)
    assert len(ids) == math.floor(0.2 * 88_492) == len(set(ids.tolist()))
    assert view.is_en[ids].all()
    pooled = ICWKey.create("tsp", seed=5, tokenizer=qwen3, gamma=0.1, pool_size=2000)
    assert set(pooled.token_set(qwen3)) <= set(view.v_en[:2000].tolist()) and len(pooled.token_set(qwen3)) == 200
    wip = ICWKey.create("wip", seed=5, tokenizer=qwen3)
    assert len(wip.green_letters) == 13 and sorted(wip.green_letters + wip.red_letters) == list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    sa = ICWKey.create("sa", seed=5)
    assert len(sa.secret_string) == 18 and set(sa.secret_string) <= set(SA_POOL)
    assert ICWKey.create("sa", seed=6).secret_string != sa.secret_string


def test_seeded_draws_are_uniform(qwen3):
    letters = "".join(ICWKey.create("wip", seed=s, tokenizer=qwen3).green_letters for s in range(2000))
    counts = np.array([letters.count(c) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    assert chisquare(counts).pvalue > 1e-4
    secrets = "".join(ICWKey.create("sa", seed=s).secret_string for s in range(1000))
    assert chisquare([secrets.count(c) for c in SA_POOL]).pvalue > 1e-4


@pytest.mark.parametrize(
    "make",
    [
        lambda q: ICWKey.create("tsp", seed=3, tokenizer=q),
        lambda q: ICWKey.create("tsp", seed=3, tokenizer=q, gamma=0.3, pool_size=1500),
        lambda q: ICWKey.create("wip", seed=0, tokenizer=q),
        lambda q: ICWKey.create("wip", tokenizer=q, letters="aeiou"),
        lambda q: ICWKey.create("sa", seed=2**40),
        lambda q: ICWKey.create("sa", seed=4, length=20),
        lambda q: ICWKey.create("sa", secret="hello"),
    ],
)
def test_round_trips(make, qwen3):
    key = make(qwen3)
    for form in (key.to_string(), key.to_json()):
        back = ICWKey.from_string(form)
        assert back == key and back.to_string() == key.to_string()
    assert "\n" not in key.to_string() and len(key.to_string()) < 120


def test_templates_are_the_papers(qwen3):
    assert "Seamlessly incorporate as many tokens" in TEMPLATES["tsp"]
    sa = ICWKey.create("sa", seed=1)
    text = sa.instruction()
    assert text.startswith("You will receive a SECRET STRING and a user query.") and text.endswith(sa.secret_string)
    wip = ICWKey.create("wip", seed=1, tokenizer=qwen3).instruction()
    assert "<green>\nC, E, F, G, I, J, L, M, T, U, W, X, Y\n</green>" in wip and "Never reveal the <green> and <red> letter lists" in wip
    tsp = ICWKey.create("tsp", seed=1, tokenizer=qwen3, pool_size=100)
    listed = tsp.instruction(qwen3).split("<green>\n")[1].split("\n</green>")[0].split("|")
    assert listed == [vocabulary(qwen3).surfaces[i] for i in tsp.token_set(qwen3)]
    custom = sa.instruction(template="Start sentences with {secret} please.")
    assert custom == f"Start sentences with {sa.secret_string} please."
    assert sa.prompt("Why?").endswith("\n\nWhy?")
    with pytest.raises(ICWKeyError, match="must contain"):
        sa.instruction(template="no field here")


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "hello", "icw:xyz:seed=1", "icw:sa:seed=abc", "icw:sa:seed", "icw:sa:", "icw:sa:seed=-4",
     "icw:sa:secret=h3llo", "icw:wip:seed=1", "icw:tsp:seed=1,gamma=1.5,tokenizer=qwen3,vocab=abc", "{not json",
     '{"family": "sa", "seed": 1, "colour": "red"}', "icw:sa:seed=1,length=99"],
)
def test_malformed_keys_are_rejected_clearly(bad):
    with pytest.raises(ICWKeyError):
        ICWKey.from_string(bad)


def test_unknown_family_and_missing_tokenizer():
    with pytest.raises(ICWKeyError, match="unknown ICW family 'xyz'; choose one of tsp, wip, sa"):
        ICWKey.create("xyz", seed=1)
    with pytest.raises(ICWKeyError, match="pass tokenizer"):
        ICWKey.create("tsp", seed=1)


def test_key_for_another_tokenizer(qwen3, gpt2):
    key = ICWKey.create("tsp", seed=1, tokenizer=qwen3)
    with pytest.raises(KeyMismatchError, match="built for tokenizer 'qwen3'"):
        key.token_set(gpt2)


def test_as_keys():
    assert len(as_keys("icw:sa:seed=1,length=18", 3)) == 3
    with pytest.raises(ValueError, match="got 2 keys for 3 texts"):
        as_keys(["icw:sa:seed=1", "icw:sa:seed=2"], 3)


def test_a_parameter_of_another_family_is_an_error_not_ignored(gpt2, capsys):
    with pytest.raises(ICWKeyError, match="gamma is a TSP key parameter, not a SA one"):
        ICWKey.from_string("icw:sa:seed=1,gamma=0.5")
    with pytest.raises(ICWKeyError, match="pool_size is a TSP key parameter, not a WIP one"):
        ICWKey.create("wip", seed=1, tokenizer=gpt2, pool_size=5)
    with pytest.raises(ICWKeyError, match="secret is a SA key parameter"):
        ICWKey.create("tsp", seed=1, tokenizer=gpt2, secret="ABC")
    assert ICWKey.create("sa", seed=1, gamma=0.2).to_string() == "icw:sa:seed=1,length=18"  # defaults pass
    from icw.cli import main

    assert main(["key", "new", "--family", "tsp", "--seed", "1", "--tokenizer", "gpt2", "--length", "3"]) == 2
    assert "length is a SA key parameter, not a TSP one" in capsys.readouterr().err
