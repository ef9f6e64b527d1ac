"""End to end in a real browser: headless Chromium (Debian's ``chromium``) drives the Space.

Open the page, type a query, click generate, wait for the three answers, and check that
z-scores and highlights are rendered; a screenshot is saved under the test's tmp folder (and
copied to ``$ICW_SCREENSHOT_DIR`` when set). Skips with a clear message when Chromium or
Playwright is missing: ``apt-get install -y chromium chromium-driver`` and
``pip install playwright`` (never ``playwright install``: the system Chromium is used).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from test_space import launch_space

CHROMIUM = os.environ.get("ICW_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# long enough that the screenshot tells plain from watermarked at a glance (16-token answers are noise)
TOKENS = 64
if not Path(CHROMIUM).exists():
    pytest.skip(f"Chromium not found at {CHROMIUM}: apt-get install -y chromium chromium-driver "
                "(or set ICW_CHROMIUM) to run the browser test", allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright to run the browser test "
                                 "(the system Chromium is used; no `playwright install` needed)")


@pytest.fixture(scope="module")
def space_url(smollm2):
    _, demo = launch_space(smollm2)
    yield demo.local_url
    demo.close()


@pytest.fixture
def page(tmp_path):
    with playwright.sync_playwright() as p:
        # a fresh profile per test: --user-data-dir is how Playwright's persistent context sets it
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            yield context.new_page()
        finally:
            context.close()


def _save_screenshot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("ICW_SCREENSHOT_DIR"):
        Path(os.environ["ICW_SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(os.environ["ICW_SCREENSHOT_DIR"]) / name)
    return path


def _wait_for_key(page) -> str:
    box = page.locator("#icw-key textarea")
    page.wait_for_function("() => (document.querySelector('#icw-key textarea')?.value || '').startsWith('icw:')",
                           timeout=60_000)
    return box.input_value()


def test_generate_and_detect_in_the_browser(space_url, page, tmp_path):
    page.goto(space_url, wait_until="load", timeout=120_000)  # networkidle can time out on a busy CPU
    key = _wait_for_key(page)
    assert page.title() == "ICW: in-context watermarking demo"  # set by the page's script, once it has run
    assert key.startswith("icw:wip:seed=42,")
    assert "Green letters" in page.locator("#icw-key-material").inner_text()

    # the random-key button changes the seed, and with it the key string
    page.locator("#icw-random-key").click()
    page.wait_for_function(f"() => document.querySelector('#icw-key textarea').value !== {key!r}", timeout=30_000)
    # then a fixed seed, so the answers (sampled with the key's seed) and the screenshot are reproducible
    seed = page.locator("#icw-seed input")
    seed.fill("7")
    seed.press("Enter")
    page.wait_for_function("() => document.querySelector('#icw-key textarea').value.startsWith('icw:wip:seed=7,')",
                           timeout=30_000)

    page.locator("#icw-query textarea").fill("Why is the sky blue?")
    tokens = page.locator("#icw-max-new-tokens input[type=number]")
    tokens.fill(str(TOKENS))
    tokens.press("Enter")
    page.locator("#icw-query textarea").press("Enter")  # Enter in the query box starts a run
    for mode in ("plain", "instruction", "bias"):
        page.wait_for_function(
            f"() => (document.querySelector('#icw-verdict-{mode}')?.innerText || '').includes('z =')",
            timeout=240_000)
    page.wait_for_function("() => document.querySelector('#icw-status')?.innerText.includes('Done')",
                           timeout=30_000)
    shot = _save_screenshot(page, tmp_path, "space_watermark_and_detect.png")
    assert shot.stat().st_size > 10_000

    for mode in ("plain", "instruction", "bias"):
        verdict = page.locator(f"#icw-verdict-{mode}").inner_text()
        assert re.search(r"z = -?\d+\.\d\d · p = (\d\.\de-\d\d|0\.\d+|1)\b", verdict), verdict  # 0.73, 3.3e-05
        assert re.search(r"(Watermarked|Not watermarked)", verdict), verdict
        answer = page.locator(f"#icw-answer-{mode}")
        assert answer.locator(".token").count() > 0
        # the verifier's counted units are highlighted, and the legend names this family's labels
        assert answer.locator(".token.highlighted").count() > 0
        legend = answer.locator("[data-testid='highlighted-text:category-legend']").inner_text()
        assert "green initial" in legend and "red initial" in legend and "green token" not in legend
    assert "Done" in page.locator("#icw-status").inner_text()
    assert "Traceback" not in page.content()
    z = {mode: float(re.search(r"z = (-?\d+\.\d\d)", page.locator(f"#icw-verdict-{mode}").inner_text()).group(1))
         for mode in ("plain", "instruction", "bias")}
    assert z["bias"] > z["plain"] + 1, z  # what a newcomer should see: the logit-biased answer stands out

    # answer 3 goes to the Detect tab with its key; detecting it there gives the same z
    bias_z = re.search(r"z = (-?\d+\.\d\d)", page.locator("#icw-verdict-bias").inner_text()).group(1)
    page.locator("#icw-send-to-detect").click()
    page.locator("#icw-detect").click()
    page.wait_for_function(
        "() => (document.querySelector('#icw-detect-verdict')?.innerText || '').includes('z =')", timeout=60_000)
    assert f"z = {bias_z} " in page.locator("#icw-detect-verdict").inner_text()
    assert page.locator("#icw-detect-answer .token.highlighted").count() > 0
    _save_screenshot(page, tmp_path, "space_detect.png")


def test_a_pasted_key_sets_the_fields_in_the_browser(space_url, page):
    """Paste a key into the key box: family, seed and slider follow, and the pasted key stays as pasted
    (its explicit secret is no field's value); then a seed edit rebuilds the key from the fields."""
    page.goto(space_url, wait_until="load", timeout=120_000)  # networkidle can time out on a busy CPU
    _wait_for_key(page)
    pasted = "icw:sa:seed=5,secret=HI"
    box = page.locator("#icw-key textarea")
    box.fill(pasted)  # what a paste does to the box; no keystrokes
    box.press("Tab")  # and the user moves on
    page.wait_for_function(
        "() => document.querySelector('#icw-family input[value=sa]')?.checked"
        " && document.querySelector('#icw-seed input').value === '5'"
        " && document.querySelector('#icw-length input[type=number]')?.value === '2'", timeout=30_000)
    page.wait_for_timeout(2_000)  # the fields' own change events have run: the paste must still be there
    assert page.locator("#icw-key textarea").input_value() == pasted
    assert "HI" in page.locator("#icw-key-material").inner_text()
    seed = page.locator("#icw-seed input")
    seed.fill("6")
    seed.press("Enter")
    rebuilt = "icw:sa:seed=6,length=2,screen=ref1"  # the fields' key is screened, as `icw key new` makes it
    page.wait_for_function(f"() => document.querySelector('#icw-key textarea').value === {rebuilt!r}", timeout=30_000)
    page.wait_for_timeout(2_000)  # and the rebuilt key does not set the fields back (no loop)
    assert page.locator("#icw-seed input").input_value() == "6"
    assert page.locator("#icw-key textarea").input_value() == rebuilt


def test_friendly_error_in_the_browser(space_url, page, tmp_path):
    page.goto(space_url, wait_until="load", timeout=120_000)  # networkidle can time out on a busy CPU
    _wait_for_key(page)
    query = page.locator("#icw-query textarea")
    assert query.input_value().strip(), "the query box opens prefilled, so a first click runs"
    query.fill("")  # a user who clears it and clicks gets a message, not a traceback
    page.locator("#icw-generate").click()
    page.wait_for_function(
        "() => (document.querySelector('#icw-status')?.innerText || '').includes('Type a question first')",
        timeout=30_000)
    assert "Please check your input" in page.locator("#icw-status").inner_text()
    page.get_by_text("Type a question first").first.wait_for(timeout=10_000)
    assert "Traceback" not in page.content()
    # a malformed pasted key in the Detect tab: the message is shown by the result
    page.locator("button[role=tab][data-tab-id=detect]").click()
    page.locator("#icw-detect-text textarea").fill("Some text to check.")
    page.locator("#icw-detect-key textarea").fill("icw:wip:seed=oops")
    page.locator("#icw-detect").click()
    page.wait_for_function(
        "() => (document.querySelector('#icw-detect-status')?.innerText || '').includes('Malformed key string')",
        timeout=30_000)
    assert "Traceback" not in page.content()
    _save_screenshot(page, tmp_path, "space_empty_query.png")


@pytest.fixture(scope="module")
def trained_folder(tmp_path_factory):
    """A tiny model over SmolLM2's vocabulary, trained by icw's SDLP trainer (two steps on WIP rows) and saved with
    its tokenizer, as the recipes save a model: the page's trained model, without hours of training."""
    from datasets import Dataset

    from icw import ICWKey
    from icw.models import load_tokenizer
    from icw.testing import tiny_random_model
    from icw.train.card import training_facts, write_card
    from icw.train.common import DCSArguments
    from icw.train.sdlp import SDLPConfig, SDLPTrainer

    tok = load_tokenizer("smollm2")
    rows = [{"family": "wip", "key": ICWKey.create("wip", seed=1_000_000 + i, tokenizer=tok).to_string(),
             "query": q, "response": "Bright blue light bounces between bits of air.", "label": 1}
            for i, q in enumerate(["Why is the sky blue?", "How do bees make honey?"])]
    out = tmp_path_factory.mktemp("runs") / "speedrun-wip" / "grpo"  # where the speedrun leaves its last stage
    config = SDLPConfig(output_dir=str(out), report_to="none", use_cpu=True, max_steps=2, per_device_train_batch_size=2,
                        learning_rate=1e-3, save_strategy="no")
    trainer = SDLPTrainer(tiny_random_model("smollm2").train(), config, train_dataset=Dataset.from_list(rows),
                          processing_class=tok)
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(out)
    # the facts and card a recipe writes when training ends (icw_training.json says final)
    write_card(out, training_facts(trainer, "sdlp", DCSArguments(dataset_name="rows"), "tiny"), trainer.state,
               final=True)
    return out


def _answer_with_the_trained_model(page) -> str:
    """Generate 16 tokens a column and wait for the trained column's verdict and the run's end; the verdict."""
    tokens = page.locator("#icw-max-new-tokens input[type=number]")
    tokens.fill("16")
    tokens.press("Enter")
    page.locator("#icw-generate").click()
    page.wait_for_function(
        "() => (document.querySelector('#icw-verdict-trained')?.innerText || '').includes('z =')", timeout=240_000)
    page.wait_for_function("() => document.querySelector('#icw-status')?.innerText.includes('Done')",
                           timeout=60_000)
    return page.locator("#icw-verdict-trained").inner_text()


def test_the_trained_models_column_in_the_browser(space_url, page, tmp_path, trained_folder, monkeypatch):
    """Without a trained model the column says what it would show and the command that makes one; with one
    (ICW_SPACE_TRAINED_MODEL, as `icw space --trained-model` sets it) it answers column 2's prompt, verified with
    the same key, which still names a tokenizer any detector can load."""
    page.goto(space_url, wait_until="load", timeout=120_000)
    _wait_for_key(page)
    note = page.locator("#icw-verdict-trained").inner_text()
    assert "No trained model loaded" in note and "scripts/speedrun.sh" in note and "--trained-model" in note

    monkeypatch.setenv("ICW_SPACE_TRAINED_MODEL", str(trained_folder))
    verdict = _answer_with_the_trained_model(page)
    assert re.search(r"z = -?\d+\.\d\d · p = ", verdict) and "No trained model" not in verdict, verdict
    assert page.locator("#icw-answer-trained .token").count() > 0
    assert "trained model" in page.locator("#icw-status").inner_text()
    assert "tokenizer=smollm2" in page.locator("#icw-key textarea").input_value()
    assert "Traceback" not in page.content()
    _save_screenshot(page, tmp_path, "space_trained_column.png")


def test_the_page_finds_the_speedruns_model_without_a_flag(space_url, page, tmp_path, trained_folder, monkeypatch):
    """A model the speedrun finished under the runs folder (icw.runs) fills the trained column with no flag, and
    the verdict names the model and its card."""
    monkeypatch.delenv("ICW_SPACE_TRAINED_MODEL", raising=False)
    monkeypatch.setenv("ICW_RUNS", str(trained_folder.parents[1]))
    page.goto(space_url, wait_until="load", timeout=120_000)
    _wait_for_key(page)
    verdict = _answer_with_the_trained_model(page)
    assert f"Model: {trained_folder}" in verdict and f"its card: {trained_folder / 'README.md'}" in verdict, verdict
    assert page.locator("#icw-answer-trained .token").count() > 0
    _save_screenshot(page, tmp_path, "space_trained_found.png")
