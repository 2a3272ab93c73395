"""reco_mini's rollout and evaluation on what a real chat model brings (issue 32, items 1-3).

1. A response ends at the chat turn's end token as well as at the EOS: a Qwen base tokenizer's EOS is <|endoftext|>,
   while a chat-prompted model closes its turn with <|im_end|>.
2. A chat template that writes the BOS (Llama 3) gets no second one from the tokenizer.
3. --eval-batch caps the responses sampled at once: one problem's n responses in chunks when n > eval_batch.

The tokenizers are real Hugging Face tokenizers built here (no hub); the model is a real tiny Qwen2 whose lm head is
nudged by a forward hook towards one token, so that the test knows what it samples.
"""
from __future__ import annotations

import pytest
import torch

import reco_mini
from reco import cli, hf
from reco.tasks.countdown import Problem, char_tokenizer, tiny_model

CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789 .,:?\n{}\\")
QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
                  "{{ m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
                  "<|end_header_id|>\n\n{% endif %}")


def chat_tokenizer(specials: list[str], eos: str, bos: str | None, template: str):
    """A character-level fast tokenizer with `specials`, the given EOS (and BOS, prepended to every encoding like
    Llama's), and a chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", *specials, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    out = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token=eos,
                                  bos_token=bos, additional_special_tokens=[s for s in specials if s not in (eos, bos)],
                                  padding_side="left")
    out.chat_template = template
    return out


def nudged_model(tok, token: str):
    """A tiny Qwen2 whose logits favour `token` by 50 nats (a forward hook on the lm head)."""
    torch.manual_seed(0)
    model = tiny_model(tok, hidden=32, layers=1, max_positions=512).eval()
    bias = torch.zeros(len(tok))
    bias[tok.convert_tokens_to_ids(token)] = 50.0
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out + bias)
    return model


def math_cfg(**kw) -> reco_mini.Config:
    return reco_mini.Config(task="math", model="given", data="", n_eval=2, max_new_tokens=6, device="cpu", **kw)


def test_a_math_response_ends_at_the_chat_turns_end_token(monkeypatch):
    monkeypatch.setattr(cli, "run_checks", lambda cfg, methods, tasks: [])  # no --data file: rollout only
    tok = chat_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|endoftext|>", None, QWEN_TEMPLATE)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id != im_end
    assert hf.stop_token_ids(tok, "chat") == [tok.eos_token_id, im_end]
    model = nudged_model(tok, "<|im_end|>")
    r = reco_mini.rollout(math_cfg(), model, tok, [{"problem": "what is 1+1?", "answer": "2"}], 2, torch.Generator())
    assert r["resp"][:, 0].tolist() == [im_end, im_end]
    assert r["mask"].sum(-1).tolist() == [1, 1]  # stopped there; before: ran on to max_new_tokens
    assert r["texts"] == ["", ""]


def test_the_generation_configs_eos_ids_end_a_response_too():
    tok = chat_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot|>"], "<|endoftext|>", None,
                         QWEN_TEMPLATE)
    model = nudged_model(tok, "<|eot|>")
    eot = tok.convert_tokens_to_ids("<|eot|>")
    model.generation_config.eos_token_id = [tok.eos_token_id, eot]
    assert eot in hf.stop_token_ids(tok, "plain", model.generation_config)


def test_a_llama_chat_prompt_gets_one_bos(monkeypatch):
    monkeypatch.setattr(cli, "run_checks", lambda cfg, methods, tasks: [])
    specials = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    tok = chat_tokenizer(specials, "<|eot_id|>", "<|begin_of_text|>", LLAMA_TEMPLATE)
    assert tok("ab").input_ids[0] == tok.bos_token_id  # the tokenizer adds a BOS of its own
    model = nudged_model(tok, "<|eot_id|>")
    r = reco_mini.rollout(math_cfg(), model, tok, [{"problem": "1+1?", "answer": "2"}], 2, torch.Generator())
    assert (r["prompt_ids"] == tok.bos_token_id).sum(-1).tolist() == [1, 1]  # before: 2


@pytest.mark.parametrize("n_eval, eval_batch, calls", [(8, 3, [3, 3, 2] * 3), (8, 16, [16, 8]), (8, 8, [8, 8, 8])])
def test_eval_batch_caps_the_responses_sampled_at_once(monkeypatch, n_eval, eval_batch, calls):
    real, seen = reco_mini.sample, []

    def counting(model, prompt_ids, *args, **kwargs):
        seen.append(prompt_ids.shape[0])
        return real(model, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(reco_mini, "sample", counting)
    tok = char_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok, hidden=16, layers=1).eval()
    problems = [Problem((3, 7, 12), 33), Problem((2, 3, 4), 10), Problem((5, 6, 1), 31)]
    cfg = reco_mini.Config(n_eval=n_eval, eval_batch=eval_batch, max_new_tokens=4, device="cpu")
    result = reco_mini.evaluate(cfg, model, tok, problems, "t")
    assert seen == calls and len(result["counts"]) == 3 and len(result["forms"]) == 3
    if n_eval <= eval_batch:  # several problems per call, as before the cap: the same stream
        gen, per_call, counts = torch.Generator().manual_seed(cfg.seed + 1), eval_batch // n_eval, []
        for i in range(0, 3, per_call):
            r = reco_mini.rollout(cfg, model, tok, problems[i: i + per_call], n_eval, gen)
            counts += [int(c) for c in r["rewards"].sum(1).tolist()]
        assert result["counts"] == counts
