"""The Documents tab: ICW for third parties. Protect an uploaded PDF, then screen pasted responses.

A venue (a teacher, a journal) hides each document's instruction where an LLM reads it and a person does not,
then tests the responses it receives, each under its own document's key, with the error controlled over all of
them (``icw.documents``, ``icw.protect``, ``icw.response_screen``; ``icw documents`` on the command line).
The page keeps the manifest in a text box: protect several PDFs and it grows, one line each.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
from demo_common import UserInputError, friendly

from icw.documents import DocumentError, check_document_id, issue_keys, new_secret
from icw.response_screen import read_responses, report_markdown, screen_responses, summary_line
from icw.verification import DEFAULT_ALPHA

#: The embedded tokenizer the tab's WIP keys are defined over (any text can be screened with them).
TOKENIZER = "smollm2"
MAX_PDF_BYTES = 20 << 20
MAX_RESPONSES_CHARS = 200_000
HEADER = "document_id,response_id,text"
ABOUT = ("**ICW for third parties.** Upload a PDF: a key is derived for it from your secret and the document id, "
         "and its instruction is hidden in the PDF as invisible text (text extraction returns it, so an LLM given "
         "the file reads it; the page renders exactly as before). Later, paste the responses you received (CSV: "
         f"`{HEADER}`): each is tested under its own document's key, and the flags control the error over all of "
         "them (Holm: family-wise; BH: false discovery rate). Disclose the policy to the people you send documents "
         "to. Command line: `icw documents keys|protect|screen`.")


def _manifest(text: str) -> dict[str, Any]:
    """The manifest box's entries by document id (via a file, so the library's reader checks every line)."""
    from icw.documents import read_manifest

    if not (text or "").strip():
        raise UserInputError("The manifest is empty: protect a PDF first (or paste a manifest).")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "manifest.jsonl"
        path.write_text(text, encoding="utf-8")
        try:
            return read_manifest(path)
        except DocumentError as err:
            raise UserInputError(str(err).replace(str(path), "manifest line")) from None


def protect_upload(file: Any, secret: str, document_id: str, page: Any, manifest: str, responses: str = ""):
    """Key the uploaded PDF and hide its instruction: (status, protected PDF, manifest, secret, extracted text,
    the responses box: a one-row template while it holds no response)."""
    from icw.protect import protect_pdf

    try:
        if not file:
            raise UserInputError("Upload a PDF first.")
        source = Path(file if isinstance(file, str) else file.name)
        if source.suffix.lower() != ".pdf":
            raise UserInputError(f"{source.name} is not a PDF: upload a .pdf file.")
        if source.stat().st_size > MAX_PDF_BYTES:
            raise UserInputError(f"{source.name} is larger than {MAX_PDF_BYTES >> 20} MB.")
        secret = (secret or "").strip() or new_secret()
        document_id = check_document_id((document_id or "").strip() or source.stem)
        entries = _manifest(manifest) if (manifest or "").strip() else {}
        entry = entries.get(document_id) or issue_keys(secret, [document_id], family="wip", tokenizer=TOKENIZER)[0]
        out = Path(tempfile.mkdtemp(prefix="icw-protected-")) / f"{document_id}.pdf"
        protect_pdf(source, out, entry.instruction, page=int(page or 1))
        import pypdf

        extracted = "\n".join(p.extract_text() for p in pypdf.PdfReader(out).pages)
    except (UserInputError, DocumentError, ValueError) as err:
        return friendly(err), None, manifest, secret, "", gr.skip()
    if document_id not in entries:
        manifest = (manifest or "").rstrip("\n") + ("\n" if (manifest or "").strip() else "")
        manifest += json.dumps(entry.to_dict(), ensure_ascii=False) + "\n"
    status = (f"Protected **{document_id}** (page {int(page or 1)}): the instruction is in the text an LLM extracts "
              "from the PDF, and the page renders as before. Download it below; its key is in the manifest.")
    template = f'{HEADER}\n{document_id},review-1,"Paste a review of {document_id} here."\n'
    empty = (responses or "").strip() in ("", HEADER)
    return status, str(out), manifest, secret, extracted, template if empty else gr.skip()


def screen_pasted(manifest: str, responses: str, method: str, alpha: Any):
    """Screen the pasted responses (CSV or JSON Lines) against the manifest: (summary, report in Markdown)."""
    try:
        entries = _manifest(manifest)
        text = (responses or "").strip()
        if not text:
            raise UserInputError(f"Paste the responses first (CSV with the header `{HEADER}`).")
        if len(text) > MAX_RESPONSES_CHARS:
            raise UserInputError(f"The responses have {len(text):,} characters; the page screens up to "
                                 f"{MAX_RESPONSES_CHARS:,} (use `icw documents screen` for more).")
        suffix = ".jsonl" if text.startswith("{") else ".csv"
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"responses{suffix}"
            path.write_text(text + "\n", encoding="utf-8")
            try:
                rows = read_responses(path)
            except DocumentError as err:
                raise UserInputError(str(err).replace(f"{path.name}:", "line ").replace(str(path), "the responses")) from None
        report = screen_responses(rows, entries, method=method, alpha=float(alpha))
    except (UserInputError, DocumentError, ValueError) as err:
        return friendly(err), ""
    return summary_line(report), report_markdown(report)


def documents_tab() -> None:
    """The tab's controls and events (called inside ``gr.Tab``)."""
    gr.Markdown(ABOUT)
    with gr.Row():
        with gr.Column(scale=3):
            upload = gr.File(label="Document (PDF)", file_types=[".pdf"], type="filepath", elem_id="icw-doc-upload")
            with gr.Row():
                document_id = gr.Textbox(label="Document id", placeholder="default: the file name",
                                         elem_id="icw-doc-id")
                page = gr.Number(value=1, precision=0, minimum=1, label="Page to hide the instruction on",
                                 elem_id="icw-doc-page")
            secret = gr.Textbox(label="Secret (keys are derived from it; empty: a new random one)", type="password",
                                elem_id="icw-doc-secret")
            protect = gr.Button("Protect the PDF", variant="primary", elem_id="icw-doc-protect")
        with gr.Column(scale=2):
            status = gr.Markdown(elem_id="icw-doc-status")
            protected = gr.File(label="Protected PDF", interactive=False, elem_id="icw-doc-protected")
    with gr.Accordion("What an LLM reads: the protected PDF's extracted text", open=False):
        extracted = gr.Textbox(show_label=False, lines=8, max_lines=20, interactive=False, elem_id="icw-doc-text")
    manifest = gr.Textbox(label="Manifest (JSON Lines: one key per document; never holds the secret)", lines=3,
                          max_lines=8, elem_id="icw-doc-manifest")
    gr.Markdown("### Screen the responses you received")
    with gr.Row():
        with gr.Column(scale=3):
            responses = gr.Textbox(label=f"Responses (CSV with the header {HEADER}, or JSON Lines)", lines=8,
                                   value=HEADER + "\n", elem_id="icw-doc-responses")
        with gr.Column(scale=2):
            method = gr.Radio([("Holm: family-wise error rate", "holm"), ("Benjamini-Hochberg: false discovery rate",
                               "bh")], value="holm", label="Error control over all responses", elem_id="icw-doc-method")
            alpha = gr.Number(value=DEFAULT_ALPHA, label="alpha", step=0.005, elem_id="icw-doc-alpha")
            screen = gr.Button("Screen the responses", variant="primary", elem_id="icw-doc-screen")
    summary = gr.Markdown(elem_id="icw-doc-summary")
    report = gr.Markdown(elem_id="icw-doc-report")
    protect.click(protect_upload, [upload, secret, document_id, page, manifest, responses],
                  [status, protected, manifest, secret, extracted, responses], api_name="protect_document")
    screen.click(screen_pasted, [manifest, responses, method, alpha], [summary, report], api_name="screen_responses")
