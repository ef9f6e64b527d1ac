"""pipeline("icw-detection"): agrees with `icw detect`, loads no weights, rejects foreign keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import icw
from icw import ICWKey, KeyMismatchError, verify
from icw.cli import main as cli_main
from icw.keys import ICWKeyError
from icw.pipeline import ICWTokenizerOnlyModel

pipeline = pytest.importorskip("transformers").pipeline

WORDS = {  # a few common words per initial letter, to write texts that favour chosen letters
    "A": "about after again always answer", "B": "because before being better between", "C": "can could change",
    "D": "during different does", "E": "every even early", "F": "from first found", "G": "good great given",
    "H": "have high however", "I": "into instead important", "J": "just join", "K": "keep known", "L": "like large",
    "M": "many more most", "N": "never new number", "O": "other over often", "P": "people part place",
    "Q": "quite quick", "R": "right result rather", "S": "some since small", "T": "take than their",
    "U": "under until usually", "V": "very various", "W": "water when which", "X": "xenon", "Y": "young years",
    "Z": "zero zone",
}


def green_text(letters: str, sentences: int = 6) -> str:
    words = [w for c in letters for w in WORDS[c].split()]
    return " ".join(f"The {' '.join(words[(i * 5 + j) % len(words)] for j in range(9))}." for i in range(sentences))


TEXTS = [
    "Why is the sky blue? Sunlight scatters off air molecules, and blue light scatters most.",
    "Plain prose about rivers, mountains and the weather in spring.",
    "",
]


def cli_detect(key: ICWKey, texts: list[str], tmp_path: Path, capsys, tokenizer: str | None = None) -> list[dict]:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n", encoding="utf-8")
    argv = ["detect", "--key", key.to_string(), "--jsonl", "--highlights", str(src)]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    capsys.readouterr()
    assert cli_main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("tok_name", ["qwen3", "gpt2"])
@pytest.mark.parametrize("family", ["tsp", "wip", "sa"])
def test_pipeline_matches_icw_detect(request, tmp_path, capsys, tok_name, family):
    tok = request.getfixturevalue(tok_name)
    params = {"pool_size": 3000} if family == "tsp" else {}
    key = ICWKey.create(family, 11, tok if family != "sa" else None, **params)
    texts = TEXTS[:2] + [green_text(key.green_letters) if family == "wip" else TEXTS[0] * 3]
    det = pipeline("icw-detection", model=tok, keys=key)
    got = det(texts)
    want = cli_detect(key, texts, tmp_path, capsys, tokenizer=tok_name if family != "sa" else None)
    assert len(got) == len(want) == len(texts)
    for g, w in zip(got, want, strict=True):
        for name in ("family", "z_score", "p_value", "is_watermarked", "num_tokens_scored", "num_aligned"):
            assert g[name] == w[name], name  # number for number, not approximately
        assert [(h["start"], h["end"], h["aligned"]) for h in g["highlights"]] == \
               [(h["start"], h["end"], h["aligned"]) for h in w["highlights"]]
    if family == "wip":
        assert got[2]["is_watermarked"] and got[2]["z_score"] > 4


def test_single_text_per_call_key_and_alpha(qwen3):
    k1, k2 = ICWKey.create("wip", 1, qwen3), ICWKey.create("wip", 2, qwen3)
    text = green_text(k1.green_letters, sentences=2)
    det = pipeline("icw-detection", model=qwen3)  # no key at construction: per call
    one = det(text, keys=k1)
    assert isinstance(one, dict) and one == det([text], keys=k1.to_string())[0]
    mixed = det([text, text], keys=[k1, k2])
    assert mixed[0]["z_score"] == one["z_score"]
    assert mixed[1]["z_score"] == verify(text, k2, qwen3).z_score
    # alpha decides is_watermarked from the same p-value
    p = one["p_value"]
    assert det(text, keys=k1, alpha=min(0.999, p * 1.01))["is_watermarked"]
    assert not det(text, keys=k1, alpha=p * 0.99)["is_watermarked"]
    # batching never changes a number
    texts = [text, TEXTS[0], TEXTS[1], text[:50], TEXTS[0][::-1]]
    assert det(texts, keys=k1, batch_size=2) == det(texts, keys=k1)
    assert "highlights" not in det(text, keys=k1, highlights=False)
    # generators stream lazily, in batches
    stream = det((t for t in texts), keys=k1, batch_size=2)
    assert not isinstance(stream, list) and list(stream) == det(texts, keys=k1)
    with pytest.raises(ValueError, match="one shared key"):
        det(iter(texts), keys=[k1, k2])


def test_spans_are_character_offsets(gpt2):
    key = ICWKey.create("sa", 5, secret="HELLO")
    text = "Here we go. Every day is new. Lots to do. Let us start. Over and out."
    out = pipeline("icw-detection", model=gpt2, keys=key)(text)
    assert [text[h["start"]:h["end"]] for h in out["highlights"]] == list("HELLO")
    assert all(h["aligned"] for h in out["highlights"]) and out["num_aligned"] == 5


def test_model_folder_loads_tokenizer_only(tmp_path, qwen3):
    """A folder (or Hub id) goes through AutoConfig and the tokenizer; weights are never read."""
    from transformers import Qwen3Config

    qwen3.save_pretrained(tmp_path)
    Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, architectures=["Qwen3ForCausalLM"]).save_pretrained(tmp_path)
    # corrupt weight files: any attempt to load them would raise
    (tmp_path / "model.safetensors").write_bytes(b"\x00 these are not weights")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint either")
    key = ICWKey.create("tsp", 4, qwen3, pool_size=2000)
    det = pipeline("icw-detection", model=str(tmp_path), keys=key)
    assert isinstance(det.model, ICWTokenizerOnlyModel)
    assert det.model.config.architectures == ["Qwen3ForCausalLM"]
    assert not hasattr(det.model, "state_dict")
    text = TEXTS[0] * 2
    assert det(text)["z_score"] == verify(text, key, qwen3).z_score
    # save_pretrained keeps tokenizer and config, and the folder loads back the same way
    det.save_pretrained(tmp_path / "saved")
    again = pipeline("icw-detection", model=str(tmp_path / "saved"), keys=key)
    assert again(text) == det(text)
    assert not list((tmp_path / "saved").glob("*.safetensors"))


def test_mismatched_key_is_rejected_clearly(qwen3, gpt2):
    key = ICWKey.create("wip", 3, qwen3)
    det = pipeline("icw-detection", model=gpt2, keys=key)
    with pytest.raises(KeyMismatchError, match=r"built for tokenizer 'qwen3'.*given is 'gpt2'"):
        det("Some text to check.")


def test_bad_input_gives_clear_errors(gpt2):
    key = ICWKey.create("sa", 1)
    det = pipeline("icw-detection", model=gpt2, keys=key)
    with pytest.raises(ValueError, match="non-empty list"):
        det([])
    with pytest.raises(TypeError, match="not a str"):
        det(["fine", 42])
    with pytest.raises(TypeError, match="string or a list of strings"):
        det(42)
    with pytest.raises(ValueError, match="no key"):
        pipeline("icw-detection", model=gpt2)("text")
    with pytest.raises(ICWKeyError, match="unknown ICW family 'xyz'"):
        det("text", keys="icw:xyz:seed=1")
    with pytest.raises(ValueError, match="2 keys for 3 texts"):
        det(["a", "b", "c"], keys=[key, key])
    with pytest.raises(TypeError, match="unknown icw-detection argument"):
        det("text", temperature=0.5)
    with pytest.raises(TypeError, match="needs a Hugging Face tokenizer"):
        pipeline("icw-detection", model=42)


def test_detector_helper_accepts_aliases():
    key = ICWKey.create("sa", 2, secret="AB")
    det = icw.pipeline.detector(key, tokenizer="gpt2")
    assert det("All good. But why.")["num_aligned"] == 2
    wip = ICWKey.create("wip", 2, icw.models.load_tokenizer("gpt2"))
    assert icw.pipeline.detector(wip, tokenizer=None).tokenizer.icw_alias == "gpt2"


def test_registered_on_import_without_eager_transformers_import():
    """`import icw` stays light; the task appears as soon as transformers' pipelines load."""
    code = (
        "import sys, icw\n"
        "assert 'transformers.pipelines' not in sys.modules, 'import icw must not import transformers.pipelines'\n"
        "from transformers import pipeline\n"
        "from transformers.pipelines import PIPELINE_REGISTRY\n"
        "assert 'icw-detection' in PIPELINE_REGISTRY.get_supported_tasks()\n"
        "from icw.models import load_tokenizer\n"
        "det = pipeline('icw-detection', model=load_tokenizer('gpt2'), keys='icw:sa:seed=1,secret=HI')\n"
        "print(det('Hello there. It works.')['num_aligned'])\n"
        "det = pipeline('icw-detection', keys='icw:sa:seed=1,secret=HI')\n"  # the documented call, no model=
        "print(det('Hello there. It works.')['num_aligned'])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "2"]
    assert "No model was supplied" not in out.stderr and "not recommended" not in out.stderr, out.stderr


def _pipeline_noise(build) -> list[str]:
    """What ``build()`` prints through transformers' loggers or Python warnings (one entry each)."""
    import logging
    import warnings

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    handler = Collect()
    root = logging.getLogger("transformers")  # does not propagate to the root logger (caplog would miss it)
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build()
    finally:
        root.removeHandler(handler)
    return handler.messages + [str(w.message) for w in caught]


def test_documented_call_without_model_is_silent(gpt2):
    """``pipeline("icw-detection", keys=key)`` (the documented call) defaults to the key's own tokenizer,
    not to a Hub model, so transformers' "No model was supplied ... not recommended" warning is dropped."""
    wip = ICWKey.create("wip", 3, gpt2)
    assert _pipeline_noise(lambda: pipeline("icw-detection", keys=wip)) == []
    assert _pipeline_noise(lambda: pipeline("icw-detection", keys="icw:sa:seed=1,length=18")) == []
    # other warnings of transformers' pipeline() still get through
    import logging

    other = logging.getLogger("transformers.pipelines")  # the logger of that warning: anything else gets through
    assert _pipeline_noise(lambda: other.warning("No model was supplied, defaulted to gpt2 and revision None.")) \
        == ["No model was supplied, defaulted to gpt2 and revision None."]


def test_sa_keys_need_no_model():
    """SA counts sentence initials, so a detector for SA keys holds no tokenizer; a TSP/WIP key given
    later per call uses the tokenizer it records."""
    key = ICWKey.create("sa", 5, secret="HELLO")
    text = "Here we go. Every day is new. Lots to do. Let us start. Over and out."
    det = pipeline("icw-detection", keys=key)
    assert det.tokenizer is None and det.model.tokenizer is None
    out = det(text)
    assert out["num_aligned"] == 5 and out["z_score"] == verify(text, key).z_score
    assert pipeline("icw-detection", keys=[key.to_string(), "icw:sa:seed=1,secret=HI"])([text, text])[1]["family"] == "sa"
    wip = ICWKey.create("wip", 2, icw.models.load_tokenizer("gpt2"))
    assert det(text, keys=wip)["z_score"] == verify(text, wip, icw.models.load_tokenizer("gpt2")).z_score
    with pytest.raises(ValueError, match="needs keys="):
        pipeline("icw-detection")




def test_registration_when_transformers_pipelines_already_loaded():
    from transformers.pipelines import PIPELINE_REGISTRY

    from icw.pipeline import TASK, install_registration

    saved = PIPELINE_REGISTRY.supported_tasks.pop(TASK)
    try:
        assert TASK not in PIPELINE_REGISTRY.get_supported_tasks()
        install_registration()  # what `import icw` runs: transformers.pipelines is loaded, so register now
        assert PIPELINE_REGISTRY.supported_tasks[TASK]["pt"] == (ICWTokenizerOnlyModel,)
    finally:
        PIPELINE_REGISTRY.supported_tasks[TASK] = saved
