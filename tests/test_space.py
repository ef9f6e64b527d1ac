"""The Gradio Space (spaces/icw-demo): launched on 127.0.0.1 and called with gradio_client.

Real model (the embedded SmolLM2), real HTTP calls: the z-scores each tab returns must agree
with ``icw detect`` and ``icw.verify``; bad input must come back as a friendly message.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "spaces" / "icw-demo"
TOKENS = 16  # short answers keep the suite fast; the statistics do not need long ones here

gradio_client = pytest.importorskip("gradio_client", reason="the Space tests need the [space] extra (gradio_client)")


def load_space_app():
    """Import spaces/icw-demo/app.py once per session (shared with the browser test)."""
    if "icw_space_app" not in sys.modules:
        spec = importlib.util.spec_from_file_location("icw_space_app", SPACE / "app.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["icw_space_app"] = module
        spec.loader.exec_module(module)
    return sys.modules["icw_space_app"]


def space_room(name: str):
    """One of the Space's sibling modules (``demo_detection``, ...), imported as app.py imports it."""
    load_space_app()  # puts the Space's folder on sys.path
    return importlib.import_module(name)


def launch_space(smollm2):
    """Build and launch the demo on a free local port, reusing the session's SmolLM2."""
    app = load_space_app()
    space_room("demo_common")._MODELS.setdefault("smollm2", smollm2)
    demo = app.build_demo("smollm2")
    demo.queue(default_concurrency_limit=1).launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True,
                                                   **app.launch_kwargs())
    return app, demo


@pytest.fixture(scope="module")
def space(smollm2):
    app, demo = launch_space(smollm2)
    client = gradio_client.Client(demo.local_url, verbose=False)
    yield app, client
    demo.close()


def generate(client, query="Why is the sky blue?", family="wip", seed=11, key_string="", model="smollm2",
             tokens=TOKENS, pool_size=300, delta=0.0, **controls):
    """Call /watermark_and_detect; ``controls`` (alpha, temperature, top_p, greedy, sample_seed, kgw) by name."""
    return client.predict(query, family, seed, 0.2, pool_size, 13, 18, key_string, delta, model, tokens,
                          **controls, api_name="/watermark_and_detect")


def icw_detect_cli(key: str, texts: list[str]) -> list[dict]:
    """Run the real ``icw detect`` command on texts (JSON Lines on stdin)."""
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    out = subprocess.run([sys.executable, "-m", "icw.cli", "detect", "--key", key, "--jsonl"], input=lines,
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def labels(highlighted) -> set[str]:
    value = highlighted["value"] if isinstance(highlighted, dict) and "value" in highlighted else highlighted
    return {item["class_or_confidence"] for item in value if item["class_or_confidence"]}


def rendered_z(markdown: str) -> float:
    match = re.search(r"z = (-?\d+\.\d\d)", markdown)
    assert match, markdown
    return float(match.group(1))


def check_against_icw_detect(app, family, details, answers, tokenizer):
    """Every answer's z and p equal `icw detect`'s and icw.verify's; the page shows the same z."""
    from icw import ICWKey, verify

    rows = details["answers"]
    assert [r["mode"] for r in rows] == ["plain", "instruction", "bias"]
    assert all(r["text"].strip() for r in rows)
    key = ICWKey.from_string(details["key"])
    cli = icw_detect_cli(details["key"], [r["text"] for r in rows])
    local = verify([r["text"] for r in rows], key, tokenizer if family != "sa" else None)
    for i, row in enumerate(rows):
        assert row["z_score"] == pytest.approx(cli[i]["z_score"], abs=1e-9)
        assert row["p_value"] == pytest.approx(cli[i]["p_value"], rel=1e-9)
        assert row["z_score"] == pytest.approx(local[i].z_score, abs=1e-9)
        hl, verdict = answers[2 * i], answers[2 * i + 1]
        if row["num_tokens_scored"]:
            assert rendered_z(verdict) == pytest.approx(row["z_score"], abs=0.006)
            assert labels(hl) and labels(hl) <= set(app.COLORS[family]), hl


@pytest.mark.slow
@pytest.mark.parametrize("family", ["tsp", "sa"])  # WIP: test_readme_client_example
def test_watermark_tab_agrees_with_icw_detect(space, smollm2, family):
    from icw import ICWKey

    app, client = space
    # the SA run also checks that a long query is capped with a visible notice
    query = "Why is the sky blue? " * 120 if family == "sa" else "Why is the sky blue?"
    status, *answers, details = generate(client, query=query, family=family, seed=5)
    assert "✔ Done" in status, status
    assert (f"only the first {app.MAX_QUERY_CHARS:,} were used" in status) == (family == "sa")
    key = ICWKey.from_string(details["key"])
    assert key.family == family and key.seed == 5
    if family == "tsp":
        assert key.pool_size == 300  # the small candidate pool keeps the instruction in context
    check_against_icw_detect(app, family, details, answers, smollm2[1])


@pytest.mark.slow
def test_docs_client_example(space, smollm2, capsys):
    """docs/space.md's gradio_client example (skipped by test_docs: it needs the app), run as written
    against the live app (short answers)."""
    app, client = space
    code = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "space.md").read_text(encoding="utf-8"), re.S).group(1)
    assert '"http://127.0.0.1:7860/"' in code and '"smollm2", 120,' in code
    code = code.replace('"http://127.0.0.1:7860/"', repr(client.src)).replace('"smollm2", 120,', f'"smollm2", {TOKENS},')
    namespace: dict = {}
    exec(compile(code, "docs/space.md", "exec"), namespace)
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [words[0] for words in printed if words[0] in ("plain", "instruction", "bias")] == [
        "plain", "instruction", "bias"]
    float(printed[-1][0])  # the last line is the Detect tab's z
    details = namespace["details"]
    assert details["key"].startswith("icw:wip:seed=42,")
    check_against_icw_detect(app, "wip", details, namespace["answers"], smollm2[1])
    assert namespace["result"]["z_score"] == pytest.approx(details["answers"][2]["z_score"], abs=1e-9)


@pytest.mark.slow
def test_detect_tab_agrees_with_icw_detect(space):
    from icw import ICWKey, verify

    _, client = space
    text = ("Sunlight reaches the air. Many tiny molecules scatter blue light more than red light. "
            "Our eyes see that scattered blue everywhere. Red and orange win at sunset. "
            "Each sunset shows this with longer paths through air.")
    keys = [ICWKey.create("sa", 3, secret="SMORE").to_string(),
            _key("tsp", 9, pool_size=400), _key("wip", 9)]
    # one `icw detect` run (the SA key) is enough here: the first tab's test runs it for every family
    expected = [icw_detect_cli(keys[0], [text])[0]] + [verify(text, k).to_dict() for k in keys[1:]]
    for key, want in zip(keys, expected, strict=True):
        status, hl, verdict, details = client.predict(text, key, "key", api_name="/detect")
        assert details["z_score"] == pytest.approx(want["z_score"], abs=1e-9)
        assert details["num_aligned"] == want["num_aligned"]
        assert rendered_z(verdict) == pytest.approx(want["z_score"], abs=0.006)
        assert labels(hl), hl
    # the SA secret SMORE is spelled by the sentence initials S, M, O, R, E
    status, hl, verdict, details = client.predict(text, keys[0], "key", api_name="/detect")
    assert details["num_aligned"] == 5 and labels(hl) == {"matched initial"}


def _key(family: str, seed: int, **params) -> str:
    from icw import ICWKey
    from icw.models import load_tokenizer

    return ICWKey.create(family, seed, load_tokenizer("smollm2"), **params).to_string()


@pytest.mark.slow
def test_stop_ends_generation_early(space):
    """The Stop button (API /stop, same session) ends the batch; what was written is verified."""
    app, client = space
    job = client.submit("Write a long essay about the ocean.", "wip", 1, 0.2, 300, 13, 18, "", 0, "smollm2",
                        app.MAX_NEW_TOKENS, api_name="/watermark_and_detect")
    deadline = time.time() + 120
    while time.time() < deadline and not any("token" in (o[0] or "") and o[1] for o in job.outputs()):
        time.sleep(0.1)  # until the first tokens have streamed in
    start = time.time()
    client.predict(api_name="/stop")
    status, *answers, details = job.result(timeout=120)
    assert status.startswith("Stopped after"), status
    assert details["stopped"] and [r["mode"] for r in details["answers"]] == ["plain", "instruction", "bias"]
    # far fewer than the 400 tokens asked for (about 300 words), and well before they could be written
    for row in details["answers"]:
        assert row["text"] and len(row["text"].split()) < 150
        assert "z_score" in row  # verified as it stands
    assert time.time() - start < 60


@pytest.mark.slow
def test_one_batch_streams_all_answers_with_a_time_estimate_and_kgw(space, smollm2):
    """The answers are written together (all columns grow in the same update), the page says how
    long it will take, and the KGW column's verdict is transformers' own WatermarkDetector's."""
    import torch
    from scipy.stats import norm
    from transformers import WatermarkDetector

    app, client = space
    job = client.submit("Why is the sky blue?", "wip", 3, 0.2, 300, 13, 18, "", 0, "smollm2", 24,
                        api_name="/watermark_and_detect")
    status, *answers, details = job.result(timeout=300)
    outputs = job.outputs()
    first = outputs[0][0] or outputs[1][0]
    assert re.search(r"about \d+ s on this machine \(\d+\.\d\d s per token step in the last run\)|timing the "
                     r"first tokens", first), first
    streaming = [o for o in outputs if "token " in (o[0] or "") and " of 24" in o[0]]
    assert streaming, [o[0] for o in outputs]
    # the time left comes from this run's own tokens as they stream in
    assert any(re.search(r"token \d+ of 24, \d+\.\d\d s per token step: at most \d+ s left", o[0]) for o in streaming)
    assert any(all(o[1 + 2 * i] for i in range(4)) for o in streaming)  # four columns filled at once
    assert "✔ Done" in status and "one batch" in status
    kgw = details["kgw"]
    model, tok = smollm2
    ids = tok(kgw["text"], add_special_tokens=False)["input_ids"]
    detector = WatermarkDetector(model_config=model.config, device="cpu", watermarking_config=kgw["config"],
                                 ignore_repeated_ngrams=True)
    own = detector(torch.tensor([ids]), z_threshold=float(norm.isf(0.01)), return_dict=True)
    assert kgw["z_score"] == pytest.approx(float(own.z_score[0]))
    assert kgw["is_watermarked"] == bool(own.prediction[0])
    assert kgw["p_value_method"].startswith("normal approximation")
    verdict = answers[7]
    assert rendered_z(verdict) == pytest.approx(kgw["z_score"], abs=0.006) and "Caveat" in verdict
    check_against_icw_detect(app, "wip", details, answers, tok)


@pytest.mark.slow
def test_sampling_seed_and_greedy_controls(space):
    _, client = space
    texts = {}
    for name, controls in {"seed0": {"sample_seed": 0}, "seed0again": {"sample_seed": 0},
                           "seed1": {"sample_seed": 1}, "greedy0": {"greedy": True, "sample_seed": 0},
                           "greedy1": {"greedy": True, "sample_seed": 1}}.items():
        *_, details = generate(client, tokens=12, kgw=False, **controls)
        assert details["kgw"] is None
        texts[name] = [r["text"] for r in details["answers"]]
    assert texts["seed0"] == texts["seed0again"]  # reproducible
    assert texts["seed0"] != texts["seed1"]  # the seed is no longer fixed
    assert texts["greedy0"] == texts["greedy1"]  # greedy ignores the seed


@pytest.mark.slow
def test_alpha_rejudges_and_attack_redetects(space, smollm2):
    from icw import ICWKey, verify
    from icw.bench.attacks import DeletionAttack

    _, client = space
    detection = space_room("demo_detection")
    *_, details = generate(client, tokens=24)
    key = ICWKey.from_string(details["key"])
    # alpha = 0.999: nearly every answer is "watermarked"; the verdicts follow p <= alpha
    *verdicts, rescored = client.predict(details, 0.999, api_name="/rescore")
    for row, verdict in zip(rescored["answers"], verdicts, strict=False):
        assert row["alpha"] == 0.999 and row["is_watermarked"] == (row["p_value"] <= 0.999)
        assert ("**Watermarked**" in verdict) == row["is_watermarked"]
    table = client.predict(details, "deletion", 0.5, 0.01, 3, api_name="/attack")
    attacked, _ = DeletionAttack(0.5, 3)([r["text"] for r in details["answers"]])
    want = verify(attacked, key, smollm2[1])
    lines = [line for line in table.splitlines() if line.startswith("| ") and "z before" not in line]
    assert len(lines) == 4 and lines[-1].startswith("| KGW baseline")
    for line, result in zip(lines, want, strict=False):
        assert f"| {result.z_score:.2f} | {detection.format_p(result.p_value)} |" in line
    assert "Generate answers first" in client.predict(None, "synonym", 0.3, 0.01, 0, api_name="/attack")


def test_p_values_and_z_disagreement_read_as_people_read_them(smollm2):
    from scipy.stats import norm

    from icw import ICWKey, verify

    detection = space_room("demo_detection")
    assert [detection.format_p(p) for p in (0.7312, 0.0123, 3.27e-05, 1.0)] == ["0.73", "0.012", "3.3e-05", "1"]
    # a real text whose exact p and the normal tail of its z fall on both sides of some alpha
    tok = smollm2[1]
    text = ("Apples and bananas are tasty. Zebras yawn quietly near the river while many birds sing loudly. "
            "Some people think that green gardens grow best under a warm sun.")
    for seed in range(40):
        key = ICWKey.create("wip", seed, tok)
        result = verify(text, key, tok)
        normal = float(norm.sf(result.z_score))
        if abs(normal - result.p_value) > 0.01 and min(normal, result.p_value) > 0.001:
            break
    else:
        pytest.fail("no key gave a text whose exact and normal p-values differ")
    alpha = (normal + result.p_value) / 2
    judged = verify(text, key, tok, alpha=alpha)
    assert (judged.z_score > norm.isf(alpha)) != judged.is_watermarked
    sentence = detection.z_disagreement(judged)
    assert sentence and "exact p-value" in sentence and detection.format_p(judged.p_value) in sentence
    assert sentence in detection.verdict_markdown(judged)
    assert detection.z_disagreement(verify(text, key, tok, alpha=min(normal, result.p_value) / 2)) is None  # both agree


def test_make_key_endpoint(space):
    _, client = space
    key, material = client.predict("wip", 7, 0.2, 500, 13, 18, "smollm2", api_name="/make_key")
    assert key.startswith("icw:wip:seed=7,") and "tokenizer=smollm2" in key
    assert "Green letters" in material
    key, material = client.predict("sa", 7, 0.2, 500, 13, 12, "smollm2", api_name="/make_key")
    from icw import ICWKey

    assert ICWKey.from_string(key).secret_string in material and len(ICWKey.from_string(key).secret_string) == 12
    key, material = client.predict("tsp", 7, 0.2, 500, 13, 18, "smollm2", api_name="/make_key")
    assert "pool_size=500" in key and "100 tokens" in material


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": "   "}, "Type a question first"),
        ({"key_string": "icw:wip:seed=oops"}, "Malformed key string"),
        ({"key_string": "not a key"}, "Malformed key string"),
        ({"key_string": "qwen3-wip"}, "made for the 'qwen3' tokenizer"),
        ({"key_string": "qwen3-wip"}, "in the Model menu"),  # advice names controls this tab has
        ({"alpha": 2}, "alpha (the significance level) must lie between 0 and 1"),
        ({"family": "tsp", "pool_size": 0}, "exceeds this model's context"),
        ({"seed": None}, "seed must be a whole number"),
    ],
)
def test_watermark_tab_bad_input_is_friendly(space, kwargs, message):
    _, client = space
    if kwargs.get("key_string") == "qwen3-wip":  # a valid key, but for another tokenizer
        from icw import ICWKey
        from icw.models import load_tokenizer

        kwargs = {"key_string": ICWKey.create("wip", 1, load_tokenizer("qwen3")).to_string()}
    status, *answers, details = generate(client, **kwargs)
    assert status.startswith("**Please check your input:**") and message in status, status
    assert "Traceback" not in status and details is None and not any(answers)


@pytest.mark.parametrize(
    ("text", "key", "tokenizer", "message"),
    [
        ("", "icw:sa:seed=1,length=18", "key", "Paste the text"),
        ("Some text.", "", "key", "key string is empty"),
        ("Some text.", "icw:nope:seed=1", "key", "Malformed key string"),
        ("Some text to check.", "smollm2-wip", "qwen3", "made for the 'smollm2' tokenizer"),
        ("Some text to check.", "smollm2-wip", "qwen3", "in the Tokenizer menu"),
    ],
)
def test_detect_tab_bad_input_is_friendly(space, text, key, tokenizer, message):
    _, client = space
    if key == "smollm2-wip":
        key = _key("wip", 1)
    status, hl, verdict, details = client.predict(text, key, tokenizer, api_name="/detect")
    assert status.startswith("**Please check your input:**") and message in status, status
    assert "Traceback" not in status and details is None and not hl and not verdict


def test_detect_tab_nothing_to_score(space):
    _, client = space
    for key in ("icw:sa:seed=1,length=18", _key("wip", 2), _key("tsp", 2, pool_size=400)):
        status, hl, verdict, details = client.predict("12345 67 890 ... !!!", key, "key", api_name="/detect")
        assert verdict.startswith("**Nothing to score**"), verdict
        assert details["num_tokens_scored"] == 0 and details["p_value"] == 1.0


def test_long_text_is_capped_with_notice(space):
    app, client = space
    text = "Cats nap often. " * (app.MAX_TEXT_CHARS // 16 + 50)
    status, hl, verdict, details = client.predict(text, "icw:sa:seed=1,length=18", "key", api_name="/detect")
    assert f"only the first {app.MAX_TEXT_CHARS:,} were used" in status
    assert len(details["text"]) == app.MAX_TEXT_CHARS


def test_model_choice_from_environment(monkeypatch, tmp_path):
    common = space_room("demo_common")
    monkeypatch.delenv("ICW_SPACE_MODEL", raising=False)
    assert common.default_model() == "smollm2"
    monkeypatch.setenv("ICW_SPACE_MODEL", str(tmp_path / "no-model-here"))
    assert common.default_model() == str(tmp_path / "no-model-here")
    with pytest.raises(common.UserInputError, match="Cannot load model"):
        common.get_model("")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not common.is_online()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert common.is_online()


# ------------------------------------------------- the first minutes on the page (functions called directly)
def page_defaults(smollm2) -> dict:
    """The Watermark tab's controls as the page starts (the key string is built by the page's load event)."""
    import gradio as gr

    app = load_space_app()
    space_room("demo_common")._MODELS.setdefault("smollm2", smollm2)
    with gr.Blocks():
        ui = app.watermark_tab("smollm2", online=False)
    return {name: field.value for name, field in zip(app.GENERATE_INPUTS, app.controls(ui, app.GENERATE_INPUTS),
                                                     strict=True)}


def test_first_click_with_the_defaults_and_each_example_passes_the_input_checks(smollm2):
    """The query box starts with a real query, and the Generate callback's input checks accept the page's
    defaults and every example (one per family) as they stand; nothing is generated."""
    common, generation = space_room("demo_common"), space_room("demo_generation")
    defaults = page_defaults(smollm2)
    assert defaults["query"].strip() == common.DEFAULT_QUERY
    run = generation.check_inputs(*defaults.values())  # GENERATE_INPUTS is the callbacks' argument order
    assert run.query == common.DEFAULT_QUERY and run.key.family == defaults["family"] == "wip"
    assert {family for _, family, _ in common.EXAMPLES} == {"tsp", "wip", "sa"}
    for query, family, seed in common.EXAMPLES:
        run = generation.check_inputs(*{**defaults, "query": query, "family": family, "seed": seed}.values())
        assert (run.key.family, run.key.seed, run.query) == (family, seed, query)
    with pytest.raises(common.UserInputError, match="Type a question first"):
        generation.check_inputs(*{**defaults, "query": "  "}.values())


def test_a_pasted_key_sets_family_sliders_and_seed(smollm2):
    """Pasting a key string sets the fields to what it holds, and the fields then keep the pasted key
    (even one with an explicit secret, which no field describes) instead of rebuilding another, even
    when their change events carry a half-updated form; leaving a box whose key the fields describe moves none."""
    from icw import ICWKey

    keys = space_room("demo_keys")
    tok = smollm2[1]
    skip = keys.gr.skip()
    wip42 = ICWKey.create("wip", 42, tok).to_string()
    form = ("wip", 42, 0.2, 500, 13, 18)  # the page as it starts, its key written by the app
    pasted = "icw:sa:seed=5,secret=HI"
    family, seed, gamma, pool_size, num_letters, length = keys.pasted_key_fields(pasted, *form)
    assert (family, seed, length["value"]) == ("sa", 5, 2) and length["minimum"] <= 2  # slider widened
    assert all(update == skip for update in (gamma, pool_size, num_letters))  # left as they are
    # each field's change event, sent while the others are still on their way (length still 18 here), keeps it
    for name, half_updated in (("family", ("sa", 42, 0.2, 500, 13, 18)), ("seed", ("sa", 5, 0.2, 500, 13, 18)),
                               ("length", ("sa", 5, 0.2, 500, 13, 2))):
        assert keys.field_changed(name)(pasted, *half_updated, "smollm2") == (skip, skip), name
    rebuilt, _ = keys.field_changed("seed")(pasted, "sa", 6, 0.2, 500, 13, 2, "smollm2")  # seed edited
    assert rebuilt == "icw:sa:seed=6,length=2,screen=ref1"  # the Space screens the keys it builds
    # leaving the box that holds the rebuilt key moves nothing: the fields describe it
    assert keys.pasted_key_fields(rebuilt, "sa", 6, 0.2, 500, 13, 2) == (skip,) * 6
    # a change of a field the key does not use (gamma for an SA key) keeps the key
    assert keys.field_changed("gamma")(pasted, "sa", 5, 0.3, 500, 13, 2, "smollm2") == (skip, skip)

    tsp = ICWKey.create("tsp", 4, tok, gamma=0.25, pool_size=400).to_string()
    family, seed, gamma, pool_size, *_ = keys.pasted_key_fields(tsp, *form)
    assert (family, seed, gamma["value"], pool_size) == ("tsp", 4, 0.25, 400)
    assert keys.field_changed("pool_size")(tsp, "tsp", 4, 0.25, 400, 13, 18, "smollm2")[0] == skip
    assert keys.field_changed("pool_size")(tsp, "tsp", 4, 0.25, 300, 13, 18, "smollm2")[0].startswith("icw:tsp:seed=4,")
    wip = ICWKey.create("wip", 9, tok, num_letters=7).to_string()
    family, seed, _, _, num_letters, _ = keys.pasted_key_fields(wip, *form)
    assert (family, seed, num_letters["value"]) == ("wip", 9, 7)
    assert keys.pasted_key_fields("icw:wi", *form) == (skip,) * 6  # a half-typed key: nothing moves
    assert keys.pasted_key_fields(wip42, *form) == (skip,) * 6  # the page's own key: nothing moves
    # the page syncs on leaving the box or Enter, never on change, which a key the app writes also fires
    (sync,) = [f for f in load_space_app().demo.fns.values() if f.name == "pasted_key_fields"]
    assert sorted(event for _, event in sync.targets) == ["blur", "submit"]


def test_alpha_is_checked_on_submit_and_typing_never_raises(smollm2, recwarn):
    """alpha re-judges on Enter or leaving the box (not at each keystroke); a half-typed value is a
    message, never an exception."""
    app, detection = load_space_app(), space_room("demo_detection")
    space_room("demo_common")._MODELS.setdefault("smollm2", smollm2)
    (rescore,) = [f for f in app.demo.fns.values() if f.api_name == "rescore"]
    assert sorted(event for _, event in rescore.targets) == ["blur", "submit"]
    details = {"key": "icw:sa:seed=1,length=18", "model": "smollm2", "alpha": 0.01, "kgw": None,
               "answers": [{"mode": mode, "text": "Bees hum. Every hive works."} for mode, _, _ in app.MODES]}
    for typed in ("", "0", "0.", "-", "abc", None, 2):
        assert detection.rescore(dict(details), typed) == (detection.gr.skip(),) * 6  # 5 verdicts and the details
        assert detection.rescore(None, typed) == (detection.gr.skip(),) * 6
    *verdicts, rescored = detection.rescore(dict(details), "0.5")
    assert rescored["alpha"] == 0.5 and all("p ≤ 0.5" in verdict for verdict in verdicts[:3])
    assert verdicts[4] == space_room("demo_common").NO_TRAINED_MODEL  # no trained model: what its column would show


def test_the_legend_is_shown_once(smollm2):
    """The highlights' legend sits above the answers (for the key in use), not again in the status line."""
    app, generation = load_space_app(), space_room("demo_generation")
    defaults = page_defaults(smollm2)
    *_, (status, *answers, details) = generation.watermark_and_detect(*{**defaults, "max_new_tokens": 8,
                                                                         "kgw": False}.values())
    assert status.startswith("✔ Done") and "Highlights" not in status, status
    assert app.key_legend(details["key"]).startswith("**Highlights:** only word-initial")
    tsp = app.key_legend("icw:sa:seed=1,length=18")
    assert "sentence initials" in tsp and app.key_legend("icw:nope") == app.gr.skip()


# --------------------------------------------------------------------------- packaging
def test_space_folder_is_a_valid_space_repo():
    import yaml
    from packaging.requirements import Requirement

    readme = (SPACE / "README.md").read_text(encoding="utf-8")
    header = yaml.safe_load(readme.split("---")[1])
    assert header["sdk"] == "gradio" and (SPACE / header["app_file"]).is_file()
    assert header["license"] == "apache-2.0" and "HuggingFaceTB/SmolLM2-135M-Instruct" in header["models"]
    import gradio

    assert header["sdk_version"].split(".")[0] == gradio.__version__.split(".")[0]
    reqs = [Requirement(line.split("#")[0].strip()) for line in (SPACE / "requirements.txt").read_text().splitlines()
            if line.split("#")[0].strip()]
    # requirements.txt must cover icw's own dependencies (the bundle ships icw's source)
    import tomllib

    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {r.name.lower().replace("_", "-") for r in reqs}
    missing = [d for d in core if Requirement(d).name.lower().replace("_", "-") not in names]
    assert not missing, f"add {missing} to spaces/icw-demo/requirements.txt"
    assert "torch" in names


def test_bundle_writes_an_uploadable_space(tmp_path):
    bundle = tmp_path / "space"
    out = subprocess.run(["bash", str(ROOT / "scripts" / "launch_space.sh"), "--bundle", str(bundle)],
                         capture_output=True, text=True, timeout=60, check=True)
    assert "Space folder ready" in out.stdout
    space_files = [p.name for p in SPACE.iterdir() if p.is_file()]  # app.py and every room beside it
    assert {"app.py", "README.md", "requirements.txt", "demo_generation.py"} <= set(space_files)
    for name in (*space_files, "icw/__init__.py", "icw/verification.py"):
        assert (bundle / name).is_file(), name
    assert not list(bundle.rglob("__pycache__"))
    # the Hub runs app.py from the Space repo's root: its rooms and icw must come from the bundle
    code = "import app, demo_generation, icw; print(demo_generation.__file__); print(icw.__file__)"
    run = subprocess.run([sys.executable, "-c", code], cwd=bundle, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert all(Path(line).resolve().is_relative_to(bundle.resolve()) for line in run.stdout.splitlines()), run.stdout


def test_readme_first_command_launches_the_space(tmp_path):
    """The README's first command (its launch part) serves the page and prints the URL."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```bash\n(.*?)\n", readme).group(1).split("#")[0].strip()
    assert "scripts/launch_space.sh" in first, first
    launch = first.split("&&")[-1].strip()
    env = {k: v for k, v in os.environ.items() if k != "GRADIO_SERVER_PORT"}
    proc = subprocess.Popen(f"{launch} --port {_free_port()}", shell=True, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        url, lines, deadline = None, [], time.time() + 150
        while time.time() < deadline and url is None:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line)
            match = re.search(r"running at (http://127\.0\.0\.1:\d+/?)", line)
            url = match.group(1) if match else None
        assert url, "".join(lines)
        with urllib.request.urlopen(url + "config", timeout=30) as response:
            config = response.read().decode()
        assert "ICW: in-context watermarking demo" in config and "Watermark and detect" in config
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
