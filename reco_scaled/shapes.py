"""The paper's model geometries, written out, and random-weight stand-ins that need no hub access.

SHAPES holds the config.json values of Qwen2.5-0.5B, Qwen2.5-Math-1.5B, Qwen2.5-Math-7B and
Llama-3.1-8B-Instruct that set parameter count, memory and compute. `random_model_dir` writes a model
directory with random weights of one of them (optionally fewer layers) and a synthetic Qwen-style
tokenizer of the real size, which tests/test_scaled_real_shape.py and benchmarks/gpu_acceptance.py
train with reco_scaled.train.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

_QWEN = dict(model_type="qwen2", hidden_act="silu", rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151643,
             use_sliding_window=False, attention_dropout=0.0)
SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": {**_QWEN, "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
    "qwen2.5-math-1.5b": {**_QWEN, "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                          "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                          "tie_word_embeddings": True, "max_position_embeddings": 4096, "rope_theta": 10000.0},
    "qwen2.5-math-7b": {**_QWEN, "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
                        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                        "tie_word_embeddings": False, "max_position_embeddings": 4096, "rope_theta": 10000.0},
    "llama3.1-8b-instruct": {"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 128256,
                             "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                             "max_position_embeddings": 131072, "rope_theta": 500000.0, "attention_bias": False,
                             "mlp_bias": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
                             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
}
QWEN_REGULAR_TOKENS = 151643  # ids 0..151642; the special tokens follow, from 151643 (<|endoftext|>)
QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *(f"<|reserved_{i}|>" for i in range(19)))


def hf_config(shape: str, layers: int | None = None, **overrides):
    """The transformers config of a shape; `layers` replaces the depth, `overrides` other config values."""
    from transformers import AutoConfig

    values = {**SHAPES[shape], **overrides}
    if layers is not None:
        values["num_hidden_layers"] = layers
    return AutoConfig.for_model(**values)


@functools.cache
def parameter_count(shape: str, layers: int | None = None) -> tuple[int, int]:
    """(all parameters, parameters of one decoder layer), counted on a meta-device model."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(shape, layers))
    return sum(p.numel() for p in model.parameters()), sum(p.numel() for p in model.model.layers[0].parameters())


def synthetic_tokenizer(answers: list[str]):
    """A Qwen2.5-sized tokenizer (151643 regular tokens + Qwen's special tokens, 151665 in all).

    Text is encoded one printable character per token. Every other regular token decodes to
    `\\boxed{a}` for an `a` of `answers` in turn (plus one private-use character, so that tokens are
    distinct), so that a random model's responses end in a gradable answer and about 1/len(answers)
    of them are right: the RL update then has non-zero advantages to act on.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate([chr(c) for c in range(32, 127)] + ["\n"])}
    for j in range(QWEN_REGULAR_TOKENS - len(vocab)):
        vocab[f"\\boxed{{{answers[j % len(answers)]}}}{chr(0xF0000 + j // len(answers))}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=" "))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=QWEN_SPECIAL_TOKENS[0], pad_token=QWEN_SPECIAL_TOKENS[0])
    out.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIAL_TOKENS[1:])})
    return out


def random_model_dir(path: str | Path, shape: str, layers: int | None = None, answers: list[str] = ("0",),
                     seed: int = 0, dtype: torch.dtype = torch.bfloat16, device: str = "cpu", **overrides) -> Path:
    """Write a model directory: random weights of `shape` (initialised on `device`, saved in `dtype` as
    released checkpoints are), its config and, for Qwen shapes, `synthetic_tokenizer(answers)`.
    `overrides` change config values (e.g. hidden_size for a small stand-in). Returns the path."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    config = hf_config(shape, layers, **overrides)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(path)
    if config.model_type == "qwen2":
        synthetic_tokenizer(list(answers)).save_pretrained(path)
    return path
