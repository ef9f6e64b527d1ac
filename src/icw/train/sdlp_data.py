"""SDLP's data path: a ``D_cs`` row tokenized into the teacher's and the student's prompts and the shared
response ids (re-exported by :mod:`icw.train.sdlp`)."""

from __future__ import annotations

from typing import Any

from ..generation import chat_prompt
from ..keys import as_key


# --------------------------------------------------------------------------- tokenization
def tokenize_row(row: dict[str, Any], tokenizer: Any, template: str | None = None,
                 max_response_length: int = 1024, max_prompt_length: int | None = None) -> dict[str, Any]:
    """Token ids of one ``D_cs`` row: teacher prompt (query alone), student prompt
    (instruction + query, or the query alone on ``D_H0`` rows) and response + EOS.

    Prompt and response are tokenized separately so both sides share the response ids exactly.

    Args:
        row (`dict`): one ``D_cs`` row (family, key, query, response, label).
        tokenizer: the policy's tokenizer.
        template (`str`, *optional*): a custom instruction template (see :func:`icw.templates.template_for`;
            ``None``: the paper's).
        max_response_length (`int`, defaults to 1024): responses are cut to this many tokens (EOS included).
        max_prompt_length (`int`, *optional*): the longest student prompt; a longer one is an error naming
            the row.
    """
    query, key_text = row["query"], row.get("key") or ""
    watermarked = bool(row.get("label", 1)) and bool(key_text)
    teacher_prompt = chat_prompt(tokenizer, query)
    student_prompt = chat_prompt(tokenizer, as_key(key_text).prompt(query, tokenizer, template)) if watermarked \
        else teacher_prompt
    ids = tokenizer([teacher_prompt, student_prompt], add_special_tokens=False)["input_ids"]
    if max_prompt_length is not None and len(ids[1]) > max_prompt_length:
        raise ValueError(f"a student prompt has {len(ids[1])} tokens, more than max_prompt_length={max_prompt_length}: "
                         "raise it, or build TSP keys with a smaller pool_size for small-context models")
    # the ids synthesis sampled when D_cs stores them (re-tokenizing the decoded text can differ)
    sampled = row.get("response_ids")
    response = list(sampled) if sampled is not None else tokenizer(row["response"], add_special_tokens=False)["input_ids"]
    response = [t for t in response if t != tokenizer.eos_token_id][: max(max_response_length - 1, 0)]
    return {"teacher_prompt_ids": ids[0], "student_prompt_ids": ids[1],
            "response_ids": response + [tokenizer.eos_token_id], "watermarked": watermarked}


def tokenize_dataset(dataset: Any, tokenizer: Any, template: str | None = None, max_response_length: int = 1024,
                     max_prompt_length: int | None = None) -> Any:
    """:func:`tokenize_row` over a ``datasets.Dataset`` of ``D_cs`` (columns family, key, query, response, label).

    Args:
        dataset: ``D_cs`` (a ``datasets.Dataset``).
        tokenizer: the policy's tokenizer.
        template (`str`, *optional*): a custom instruction template (see :func:`icw.templates.template_for`;
            ``None``: the paper's).
        max_response_length (`int`, defaults to 1024): responses are cut to this many tokens (EOS included).
        max_prompt_length (`int`, *optional*): the longest student prompt; a longer one is an error naming
            the row.
    """
    missing = {"family", "query", "response"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"the SDLP dataset lacks column(s) {sorted(missing)}: build it with `icw train synthesize`")
    return dataset.map(tokenize_row, fn_kwargs={"tokenizer": tokenizer, "template": template,
                                                "max_response_length": max_response_length,
                                                "max_prompt_length": max_prompt_length},
                       desc="tokenizing D_cs")
