"""CUDA paths: the processors and the SDLP loss give on a GPU what they give on the CPU.

CI has no GPU, so these are skipped there; they run on a GPU machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from icw import ICWKey, sentence_initials
from icw.generation import chat_prompt
from icw.processors import SentenceAcrosticLogitsProcessor, logits_processor

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none here)")]

QUERIES = ["Why is the sky blue?", "How do bees make honey?", "What causes tides?"]


@pytest.mark.parametrize("family", ["tsp", "wip"])
def test_static_processors_add_the_same_bias_on_cuda(qwen3, family):
    keys = [ICWKey.create(family, seed=s, tokenizer=qwen3) for s in (3, 4)]
    proc = logits_processor(keys, qwen3)
    width = 151936  # Qwen3's padded embedding
    scores = torch.randn(4, width, dtype=torch.bfloat16)  # 2 prompts x num_return_sequences=2
    ids = torch.zeros(4, 5, dtype=torch.long)
    on_cpu = proc(ids, scores.clone())
    on_gpu = proc(ids.cuda(), scores.cuda())
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.bfloat16
    assert torch.equal(on_gpu.cpu(), on_cpu)
    assert not torch.equal(on_gpu[0], on_gpu[2])  # each prompt keeps its own key


def test_sa_processor_on_cuda_tracks_what_the_extractor_reads(tiny_qwen):
    model, tok = tiny_qwen
    model = copy.deepcopy(model).cuda()
    tok.padding_side = "left"
    enc = tok([chat_prompt(tok, q) for q in QUERIES], return_tensors="pt", padding=True,
              add_special_tokens=False).to("cuda")
    keys = [ICWKey.create("sa", seed=s) for s in range(3)]
    proc = SentenceAcrosticLogitsProcessor(keys, tok, delta=8.0)
    torch.manual_seed(0)
    out = model.generate(**enc, logits_processor=[proc], max_new_tokens=96, do_sample=True, num_return_sequences=2,
                         pad_token_id=tok.pad_token_id)
    tracked = proc.finish(out)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert len(texts) == 6
    assert tracked == [sentence_initials(t) for t in texts]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_sdlp_loss_on_cuda_matches_cpu(tiny_qwen, tmp_path, lora):
    from datasets import Dataset
    from peft import LoraConfig

    from icw.train.sdlp import SDLPConfig, SDLPTrainer

    base, tok = tiny_qwen
    keys = [ICWKey.create("wip", seed=21, tokenizer=tok), ICWKey.create("sa", seed=22),
            ICWKey.create("tsp", seed=23, tokenizer=tok, pool_size=300)]
    answers = ["Bees gather nectar and bring it home.", "Light scatters. Blue wins. Eyes see it.",
               "The moon pulls the sea."]
    rows = [{"family": k.family, "key": k.to_string(), "query": q, "response": a, "label": 1}
            for k, q, a in zip(keys, QUERIES, answers, strict=True)]
    losses = {}
    for device in ("cpu", "cuda"):
        config = SDLPConfig(output_dir=str(tmp_path / device), report_to="none", use_cpu=device == "cpu",
                            top_k_tsp=100, top_k_sa=100, loss_chunk_size=16)
        peft = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False) if lora else None
        torch.manual_seed(0)  # the same adapter weights on both devices
        trainer = SDLPTrainer(copy.deepcopy(base).train().to(device), config, train_dataset=Dataset.from_list(rows),
                              processing_class=tok, peft_config=peft)
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(3)])
        loss = trainer.compute_loss(trainer.model, {k: v.to(device) for k, v in batch.items()})
        loss.backward()
        grads = [p.grad for p in trainer.model.parameters() if p.requires_grad]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
        if trainer.teacher_model is not None:
            assert all(p.grad is None for p in trainer.teacher_model.parameters())
        losses[device] = loss.item()
    assert losses["cpu"] > 0
    assert losses["cuda"] == pytest.approx(losses["cpu"], rel=1e-3)
