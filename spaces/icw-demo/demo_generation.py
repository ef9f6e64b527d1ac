"""Generation: all answers written as ONE streamed ``generate`` batch, its time estimate, the Stop button,
and the Watermark-and-detect callback that checks the inputs, streams the batch and verifies the answers."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import gradio as gr
import torch
from demo_common import (
    MAX_NEW_TOKENS,
    MAX_QUERY_CHARS,
    MODES,
    UserInputError,
    cap,
    default_model,
    friendly,
    get_model,
    int8_enabled,
    parse_alpha,
    parse_int,
    trained_model,
)
from demo_detection import render_rows, render_trained, unscored
from demo_keys import build_key, check_key_tokenizer, kgw_config, parse_key
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteriaList,
    WatermarkingConfig,
    WatermarkLogitsProcessor,
)
from transformers.generation.streamers import BaseStreamer

from icw.generation import DEFAULT_SAMPLING, chat_prompt, prompt_overflow, user_message
from icw.keys import ICWKey
from icw.precision import autocast
from icw.processors import logits_processor
from icw.verification import DEFAULT_ALPHA
from icw.vocab import vocabulary


# ------------------------------------------------------------------------------ one batch
class RowsLogitsProcessor(LogitsProcessor):
    """Apply ``processor`` to some rows of the batch only; the other rows' logits pass unchanged.

    This is how one ``generate`` call writes the plain, instructed, ICW-biased and KGW answers
    together: each bias acts on its own row, and a stateful processor (SA) sees a fixed sub-batch.
    """

    def __init__(self, processor: Any, rows: list[int]) -> None:
        self.processor, self.rows = processor, torch.tensor(rows, dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = self.rows.to(scores.device)
        out = scores.clone()
        out[rows] = self.processor(input_ids[rows], scores[rows])
        return out


class _BatchStreamer(BaseStreamer):
    """Collects each generated token of every row (``TextIteratorStreamer`` handles one row only)."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first sends the prompt ids
            self._prompt_seen = True
            return
        self.queue.put(value.reshape(-1).tolist())

    def end(self) -> None:
        self.queue.put(None)


class _StopWhenSet:
    """A stopping criterion that ends generation once any of ``events`` is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        done = any(e.is_set() for e in self.events)
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


#: Every row (plain, instructed, biased, KGW alike) may not repeat a 3-token phrase: a 135M model otherwise
#: loops ("an answer in an answer in ..."), and a loop adds no new distinct token for the detector to count.
NO_REPEAT_NGRAM_SIZE = 3


def sampling_kwargs(temperature: float = DEFAULT_SAMPLING["temperature"], top_p: float = DEFAULT_SAMPLING["top_p"],
                    greedy: bool = False) -> dict[str, Any]:
    if greedy:
        return {"do_sample": False, "no_repeat_ngram_size": NO_REPEAT_NGRAM_SIZE}
    return {**sampling_kwargs(greedy=True), "do_sample": True, "temperature": float(temperature), "top_p": float(top_p)}


def batch_rows(tok: Any, query: str, key: ICWKey, kgw: bool, modes: tuple[str, ...] | None = None
               ) -> tuple[list[str], list[str]]:
    """(row names, chat prompts): plain, instructed, ICW-biased (or only ``modes``), and KGW-biased when asked."""
    rows = list(modes or [mode for mode, _, _ in MODES]) + (["kgw"] if kgw else [])
    prompts = [chat_prompt(tok, user_message(query, key, "instruction" if row == "instruction" else "plain", tok))
               for row in rows]
    return rows, prompts


#: Every batch is decoded on this one long-lived thread: torch's CPU thread pool stays warm on it. A fresh
#: thread per click cost ~25 ms more per decoding step of SmolLM2 on a 2-core CPU (37 -> 65 ms at int8).
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="icw-generate")


def generate_batch(model: Any, tok: Any, query: str, key: ICWKey, *, delta: float | None = None,
                   max_new_tokens: int = 120, sampling: dict[str, Any] | None = None, seed: int = 0,
                   kgw: WatermarkingConfig | None = None, stop: threading.Event | None = None,
                   modes: tuple[str, ...] | None = None) -> Iterator[tuple[list[str], int, bool]]:
    """Write all answers (plain, instructed, ICW-biased, or only ``modes``; KGW with ``kgw``) in ONE ``generate``
    call; yield (texts so far, tokens written, finished).

    The final texts are decoded from the returned sequences exactly as
    :func:`icw.generation.generate_responses` decodes them.
    """
    rows, prompts = batch_rows(tok, query, key, kgw is not None, modes)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    device = next(model.parameters()).device
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    processors = LogitsProcessorList([RowsLogitsProcessor(logits_processor(key, tok, delta), [rows.index("bias")])]
                                     if "bias" in rows else [])
    if kgw is not None:
        kgw_proc = WatermarkLogitsProcessor(vocab_size=model.config.vocab_size, device=device, **kgw.to_dict())
        processors.append(RowsLogitsProcessor(kgw_proc, [rows.index("kgw")]))
    streamer, abandoned = _BatchStreamer(), threading.Event()
    stop = stop or threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            torch.manual_seed(int(seed))
            # bf16 where native (icw.precision), except over the int8 weights a CPU model gets here
            precision = contextlib.nullcontext() if device.type == "cpu" and int8_enabled() else autocast(device)
            with torch.inference_mode(), precision:
                box["out"] = model.generate(
                    **enc, logits_processor=processors, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                    streamer=streamer, stopping_criteria=StoppingCriteriaList([_StopWhenSet(stop, abandoned)]),
                    **(sampling or sampling_kwargs()))
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err
            streamer.end()

    job = _DECODER.submit(work)
    ids: list[list[int]] = [[] for _ in rows]
    finished = [False] * len(rows)
    eos = {tok.eos_token_id, tok.pad_token_id} - {None}
    steps, last = 0, 0.0
    try:
        while (step := streamer.queue.get()) is not None:
            steps += 1
            for i, token in enumerate(step):
                if not finished[i]:
                    ids[i].append(token)
                    finished[i] = token in eos
            if time.monotonic() - last > 0.25:  # a few UI updates per second are enough
                last = time.monotonic()
                yield [tok.decode(r, skip_special_tokens=True) for r in ids], steps, False
    finally:  # also runs when gradio closes this generator on cancel: free the CPU at once
        abandoned.set()
        job.result()
    if "error" in box:
        raise box["error"]
    texts = tok.batch_decode(box["out"][:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    yield [t.strip() for t in texts], steps, True


def warm_up(model_name: str) -> None:
    """Write two tokens of a batch on the decoding thread, so the first click finds it warm."""
    model, tok = get_model(model_name)
    key = ICWKey.create("sa", 0)
    for _ in generate_batch(model, tok, "Hi", key, max_new_tokens=2, sampling={"do_sample": False}):
        pass


# ------------------------------------------------------------------- how long, and Stop
#: Seconds per decoding step of a batch, per (model, rows), as measured by the last run: the first
#: estimate of the next run. A run's own estimate comes from its own tokens as they stream in.
_STEP_SECONDS: dict[tuple[str, int], float] = {}


class StepClock:
    """Seconds per decoding step, measured from the streamed tokens themselves (prompt lengths, the
    biases and the machine's load included), so the time left it reports is the run's own."""

    def __init__(self, remembered: float | None = None) -> None:
        self.first: tuple[float, int] | None = None
        self.per_step = remembered

    def tick(self, steps: int) -> float | None:
        now = time.perf_counter()
        if self.first is None:
            self.first = (now, steps)
        elif steps > self.first[1]:
            self.per_step = (now - self.first[0]) / (steps - self.first[1])
        return self.per_step


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


#: One stop flag per browser session, set by the Stop button.
_STOPS: dict[str, threading.Event] = {}


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "default"


def request_stop(request: gr.Request = None) -> None:
    """Stop button: the running generation ends after its current token; what was written is
    still verified and shown."""
    event = _STOPS.get(_session(request))
    if event is not None:
        event.set()


# --------------------------------------------------------------- the Generate callback
def _prompt_fits(model: Any, tok: Any, key: ICWKey, query: str, max_new_tokens: int) -> None:
    overflow = prompt_overflow(model, tok, [key.prompt(query, tok)], max_new_tokens)
    if overflow is not None:
        n, limit = overflow
        hint = (" Lower the TSP candidate pool or gamma, or Max new tokens." if key.family == "tsp"
                else " Shorten the query or lower Max new tokens.")
        raise UserInputError(f"The instructed prompt is {n:,} tokens; with {max_new_tokens} new tokens it exceeds "
                             f"this model's context of {limit:,} tokens.{hint}")


def check_inputs(query: str, family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any, length: Any,
                 key_string: str, delta: float, model_name: str, max_new_tokens: int, alpha: float = DEFAULT_ALPHA,
                 temperature: float = DEFAULT_SAMPLING["temperature"], top_p: float = DEFAULT_SAMPLING["top_p"],
                 greedy: bool = False, sample_seed: Any = 0, kgw: bool = True) -> SimpleNamespace:
    """The Generate callback's inputs, checked and converted (loads the model, generates nothing).

    Raises :class:`~demo_common.UserInputError` for anything the user can fix; else returns the run's
    query (and the notice when it was cut), key, model and tokenizer, alpha, delta, token budget and
    sampling settings.
    """
    model_name = (model_name or default_model()).strip()
    query = (query or "").strip()
    if not query:
        raise UserInputError("Type a question first, e.g. “Why is the sky blue?”.")
    query, notice = cap(query, MAX_QUERY_CHARS, "query")
    alpha = parse_alpha(alpha)
    sample_seed = parse_int(sample_seed, "sampling seed")
    key = parse_key(key_string) if key_string and key_string.strip() else build_key(
        family, seed, gamma, pool_size, num_letters, length, model_name)
    model, tok = get_model(model_name)
    check_key_tokenizer(key, tok, "generate")
    max_new_tokens = max(1, min(int(max_new_tokens), MAX_NEW_TOKENS))
    _prompt_fits(model, tok, key, query, max_new_tokens)
    trained_name, trained = trained_model(), None
    if trained_name is not None:
        trained = get_model(trained_name)
        if vocabulary(trained[1]).fingerprint != vocabulary(tok).fingerprint:
            raise UserInputError(f"The trained model {trained_name!r} has another tokenizer than {model_name!r}, so "
                                 "one key cannot serve both: start the page with a model trained from this one.")
    return SimpleNamespace(query=query, notice=notice, model_name=model_name, model=model, tok=tok, key=key,
                           trained_name=trained_name, trained=trained,
                           alpha=alpha, delta=float(delta) if delta else None, max_new_tokens=max_new_tokens,
                           sampling=sampling_kwargs(temperature, top_p, bool(greedy)), sample_seed=sample_seed,
                           kgw=bool(kgw))


def watermark_and_detect(query: str, family: str, seed: Any, gamma: float, pool_size: Any, num_letters: Any,
                         length: Any, key_string: str, delta: float, model_name: str, max_new_tokens: int,
                         alpha: float = DEFAULT_ALPHA, temperature: float = DEFAULT_SAMPLING["temperature"],
                         top_p: float = DEFAULT_SAMPLING["top_p"], greedy: bool = False, sample_seed: Any = 0,
                         kgw: bool = True, request: gr.Request = None):
    """Answer the query three ways (plain, instructed, biased) plus the KGW baseline in ONE batch,
    streaming, then verify each answer.

    Yields the status line, then per answer (highlighted text, verdict) for plain, instructed,
    ICW-biased and KGW, then the details as JSON.
    """
    start = time.perf_counter()  # "Done in" counts from the click: checks, prompt, tokens and verdicts
    blank: list[tuple[str, str | None]] = []
    # status; (answer, verdict) of plain, instructed, biased, KGW and the trained model; details
    outputs: list[Any] = ["", blank, "", blank, "", blank, "", blank, "", blank, "", None]
    try:
        run = check_inputs(query, family, seed, gamma, pool_size, num_letters, length, key_string, delta, model_name,
                           max_new_tokens, alpha, temperature, top_p, greedy, sample_seed, kgw)
    except UserInputError as err:
        outputs[0] = friendly(err)
        yield tuple(outputs)
        return
    query, notice, model_name, model, tok, key = run.query, run.notice, run.model_name, run.model, run.tok, run.key
    alpha, delta, max_new_tokens, sampling, sample_seed = (run.alpha, run.delta, run.max_new_tokens, run.sampling,
                                                           run.sample_seed)
    prefix = (notice + "\n\n") if notice else ""
    n_rows = 3 + bool(kgw)
    clock = StepClock(_STEP_SECONDS.get((model_name, n_rows)))
    what = "three answers" + (" and the KGW baseline" if kgw else "") + (", then the trained model's answer"
                                                                        if run.trained is not None else "")
    estimate = (f"about {_seconds(clock.per_step * max_new_tokens)} on this machine ({clock.per_step:.2f} s per "
                "token step in the last run)" if clock.per_step else "timing the first tokens")
    outputs[0] = f"{prefix}Writing {what} as one batch, up to {max_new_tokens} tokens each, with {model_name}: {estimate}."
    yield tuple(outputs)
    stop = _STOPS[_session(request)] = threading.Event()
    kgw_cfg = kgw_config(key.seed) if kgw else None
    try:
        for texts, steps, done in generate_batch(model, tok, query, key, delta=delta, max_new_tokens=max_new_tokens,
                                                 sampling=sampling, seed=sample_seed, kgw=kgw_cfg, stop=stop):
            for i, text in enumerate(texts):
                outputs[1 + 2 * i] = unscored(text)
            if not done:
                per_step = clock.tick(steps)
                left = (f", {per_step:.2f} s per token step: at most {_seconds((max_new_tokens - steps) * per_step)} "
                        "left (less if the answers end sooner)" if per_step else "")
                outputs[0] = f"{prefix}Writing {what} as one batch: token {steps} of {max_new_tokens}{left}."
                yield tuple(outputs)
    except (ValueError, TypeError) as err:
        raise gr.Error(str(err), title="Please check your input") from None
    if clock.per_step and steps >= 8:
        _STEP_SECONDS[(model_name, n_rows)] = clock.per_step
    details: dict[str, Any] = {
        "key": key.to_string(), "model": model_name, "alpha": alpha, "sampling": {**sampling, "seed": sample_seed},
        "answers": [{"mode": mode, "text": text} for (mode, _, _), text in zip(MODES, texts, strict=False)],
        "kgw": {"text": texts[3], "seed": key.seed, "config": kgw_cfg.to_dict()} if kgw else None,
    }
    outputs[1:9] = render_rows(details, key, tok, alpha, model)
    if run.trained is not None:
        outputs[0] = f"{prefix}Writing column 2's answer again with the trained model {run.trained_name} ..."
        yield tuple(outputs)
        trained_model, trained_tok = run.trained
        for texts, _, done in generate_batch(trained_model, trained_tok, query, key, max_new_tokens=max_new_tokens,
                                             sampling=sampling, seed=sample_seed, stop=stop, modes=("instruction",)):
            outputs[9] = unscored(texts[0])
            if not done:
                yield tuple(outputs)
        details["trained"] = {"model": run.trained_name, "text": texts[0]}
    outputs[9:11] = render_trained(details, key, alpha)
    elapsed = details["seconds"] = round(time.perf_counter() - start, 2)
    if stop.is_set():
        details["stopped"] = True
        outputs[0] = (f"{prefix}Stopped after {steps} of {max_new_tokens} tokens ({elapsed:.0f} s): the answers are "
                      f"cut short and verified as they stand, with the key `{key.to_string()}`.")
    else:
        outputs[0] = (f"{prefix}✔ Done in {elapsed:.0f} s: {what} to the same query in one batch, verified with the "
                      f"key `{key.to_string()}`.")  # the highlights' legend is shown once, above the answers
    outputs[11] = details
    yield tuple(outputs)
