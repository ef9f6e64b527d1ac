"""The Space's Documents tab in a real browser (Debian's chromium, driven by Playwright): upload a PDF, protect
it, download the protected copy, paste responses, screen them. Skips like ``test_space_browser.py`` when
Chromium or Playwright is missing."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from test_documents import _green_text, _squash, make_pdf
from test_space_browser import _save_screenshot, page, space_url  # noqa: F401 (the Space and browser fixtures)

from icw.reference import reference_corpus

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pypdf = pytest.importorskip("pypdf")


def _text_of(page, selector: str) -> str:  # noqa: F811 (a page, not the fixture)
    return page.locator(selector).inner_text()


def test_protect_a_pdf_and_screen_responses_in_the_browser(space_url, page, tmp_path):  # noqa: F811 (the fixtures)
    pdf = make_pdf(tmp_path / "paper-7.pdf", pages=2)
    page.goto(space_url, wait_until="load", timeout=120_000)
    page.locator("button[role=tab][data-tab-id=documents]").click()
    # no file yet: a message by the button, not a traceback
    page.locator("#icw-doc-protect").click()
    page.wait_for_function("() => (document.querySelector('#icw-doc-status')?.innerText || '')"
                           ".includes('Upload a PDF first')", timeout=30_000)

    page.locator("#icw-doc-upload input[type=file]").set_input_files(str(pdf))
    page.locator("#icw-doc-secret input, #icw-doc-secret textarea").first.fill("a secret for the browser test only")
    page.locator("#icw-doc-page input").fill("2")
    page.locator("#icw-doc-protect").click()
    page.wait_for_function("() => (document.querySelector('#icw-doc-status')?.innerText || '').includes('Protected')",
                           timeout=120_000)
    assert "paper-7" in _text_of(page, "#icw-doc-status") and "page 2" in _text_of(page, "#icw-doc-status")
    entry = json.loads(page.locator("#icw-doc-manifest textarea").input_value().strip().splitlines()[0])
    assert entry["document_id"] == "paper-7" and entry["key"].startswith("icw:wip:") and "secret" not in entry
    assert "a secret for the browser test only" not in json.dumps(entry)

    # the protected PDF downloads from the page, and its second page's text carries the instruction
    link = page.locator("#icw-doc-protected a").first
    link.wait_for(timeout=30_000)
    data = page.request.get(link.get_attribute("href")).body()
    reader = pypdf.PdfReader(io.BytesIO(data))
    assert _squash(entry["instruction"]) in _squash(reader.pages[1].extract_text())
    assert _squash(entry["instruction"]) not in _squash(reader.pages[0].extract_text())

    # the responses box got a one-row template for this document; paste two reviews and screen them
    assert "paper-7,review-1," in page.locator("#icw-doc-responses textarea").input_value()
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["document_id", "response_id", "text"])
    writer.writerow(["paper-7", "follower", _green_text(entry["key"])])
    writer.writerow(["paper-7", "human", reference_corpus()[11].text])
    writer.writerow(["paper-8", "stray", "A review of a paper nobody protected."])
    page.locator("#icw-doc-responses textarea").fill(buffer.getvalue())
    page.locator("#icw-doc-screen").click()
    page.wait_for_function("() => (document.querySelector('#icw-doc-summary')?.innerText || '').includes('flagged')",
                           timeout=120_000)
    summary = _text_of(page, "#icw-doc-summary")
    assert summary.startswith("1 of 2 responses screened flagged at family-wise error rate (Holm) 0.01")
    assert "expected false flags <= 0.0101" in summary
    report = _text_of(page, "#icw-doc-report")
    assert "follower (document paper-7)" in report and "unknown document id" in report
    assert page.locator("#icw-doc-report strong").count() > 0  # the evidence: aligned units in bold
    assert "Traceback" not in page.content()
    shot = _save_screenshot(page, tmp_path, "space_documents.png")
    assert shot.stat().st_size > 10_000
    assert Path(shot).exists()
