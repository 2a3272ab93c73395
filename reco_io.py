"""reco_io.py: the plumbing of reco_mini.py, kept out of the file that teaches the method.

The command line (RunSettings, the plumbing's flags; a flag and its help for every config field; the checks of the
settings; one-line errors, exit code 2; --quick's budget), the registry decorator, the math task's files and model
(loaded with one-line errors), the tokens that end a response, the record the on_step hook gets (Step), the checks of
occurrence_weights' arguments, the memory-saving token_stats (reco_mini's --head-chunk path, tested against its
readable one), the precision and gradient-checkpointing switches, the step's log row and the trajectory file, the
non-finite stop, atomic checkpoint writes, and the Pass@k table and plot, which reco_scaled's evaluation uses too.
Nothing here imports reco_mini: it is handed what it needs.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NoReturn

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

PROG = "reco_mini.py"


def opt(default, help: str):
    """A config field with its --help text beside it."""
    return field(default=default, metadata={"help": help})


class ConfigError(ValueError):  # a bad setting; the message names the flag
    def __init__(self, name: str, message: str):
        super().__init__(f"--{name.replace('_', '-')} {message}")
        self.name, self.message = name, message


def check(checks: list[tuple[str, bool, str]]) -> None:
    """Raise ConfigError for the first (field, ok, message) that is not ok."""
    for name, ok, message in checks:
        if not ok:
            raise ConfigError(name, message)


def register(registry: dict, name: str):
    """Decorator: file a function in `registry` under `name`, the value its flag takes."""

    def file_under_name(fn):
        registry[name] = fn
        return fn

    return file_under_name


@dataclass
class RunSettings:
    """reco_mini.Config's plumbing flags: where it runs and writes, memory and precision, logging."""
    device: str = opt("auto", "cpu | cuda | auto")
    out: str = opt("", "output directory (default runs/default, or runs/quick with --quick)")
    quick: bool = opt(False, "a tiny budget: a smoke test of the whole pipeline (QUICK)")
    eval_batch: int = opt(0, "most responses sampled at once to evaluate (0: 4096, math 64)")
    micro_batch: int = opt(0, "rows per forward; gradients add up over the mini-batch (0 = all)")
    head_chunk: int = opt(-1, "row-tokens per lm-head slice (0 = full logits; -1: math 256)")
    dtype: str = opt("float32", "float32 | bfloat16: bf16 autocast, fp32 weights (docs/one_gpu.md)")
    gradient_checkpointing: bool = opt(False, "recompute each decoder layer in the backward pass")
    log: str = opt("", "also log each RL step to: tensorboard, wandb (log.jsonl is always written)")


# --quick: the defaults it replaces (a flag given explicitly still wins)
QUICK = dict(n_train=64, n_test=16, hidden=64, layers=2, sft_steps=300, steps=4, prompts_per_step=8, n_eval=32)


def loss_checks(cfg, occurrences: list[str], token_ratios: list[str], advantages: list[str], gates: list[str],
                weights: list[str]) -> list[tuple[str, bool, str]]:
    """reco_mini.LossConfig's checks of the policy-loss settings: (field, ok, message)."""
    return [
        ("advantage", cfg.advantage in advantages, f"must be one of {advantages}"),
        ("pass_k", cfg.pass_k >= 1, "must be >= 1"),
        ("prompt_gate", cfg.prompt_gate in gates, f"must be one of {gates}"),
        ("response_weight", cfg.response_weight in weights, f"must be one of {weights}"),
        ("ucpo_tau", 0 <= cfg.ucpo_tau <= 1, "must be in [0, 1]"),
        ("ucpo_score", cfg.ucpo_score in ("mean", "sum"), "must be mean or sum"),
        ("simko_k", cfg.simko_k >= 1, "must be >= 1"),
        ("simko_alpha", 0 <= cfg.simko_alpha <= 1, "must be in [0, 1]"),
        ("simko_lambda", cfg.simko_lambda > 0, "must be > 0"),
        ("simko_quantile", 0 <= cfg.simko_quantile <= 1, "must be in [0, 1]"),
        ("simko_scale", cfg.simko_scale in ("advantage", "ratio"), "must be advantage or ratio"),
        ("occurrence", cfg.occurrence in ("", *occurrences), f"must be one of {occurrences}"),
        ("occurrence_apply", cfg.occurrence_apply in ("all", "positive"), "must be all or positive"),
        ("token_ratio", cfg.token_ratio in ("", *token_ratios), f"must be one of {token_ratios}"),
        ("focal_gamma", cfg.focal_gamma is None or cfg.focal_gamma >= 0, "must be >= 0"),
        ("variance_cap", cfg.variance_cap > 0, "must be > 0"),
        ("variance_norm", cfg.variance_norm in ("batch", "none"), "must be batch or none"),
        ("clip_low", 0 < cfg.clip_low < 1, "must be in (0, 1)"),
        ("clip_high", cfg.clip_high > 0, "must be > 0"),
        ("dual_clip", cfg.dual_clip == 0 or cfg.dual_clip > 1, "must be 0 (off) or > 1"),
        ("kl_coef", cfg.kl_coef >= 0, "must be >= 0"),
        ("aggregation", cfg.aggregation in ("token-mean", "seq-mean-token-mean"),
         "must be token-mean or seq-mean-token-mean"),
    ]


def mini_only(cfg) -> list[str]:
    """The policy-loss fields set to one of the peers' methods, which only reco_mini's own loop applies (issue 42): an
    advantage, a prompt gate, a response weight, or the token term that reads the logits. Other trainers refuse them."""
    peers = {"advantage": "grpo", "prompt_gate": "none", "response_weight": "none"}
    return [name for name, plain in peers.items() if getattr(cfg, name) != plain] + (
        ["token_ratio"] if cfg.token_ratio == "simko" else [])


def run_checks(cfg, methods: list[str], tasks: list[str]) -> list[tuple[str, bool, str]]:
    """reco_mini.Config's checks of the run's own settings (task, files, sizes, flags): (field, ok, message)."""
    import reco_log
    from reco_data import missing_file

    n = cfg.prompts_per_step * cfg.group_size
    return [
        ("methods", all(m in methods for m in cfg.method_list),
         f"must be a comma-separated subset of {list(methods)}"),
        ("task", cfg.task in tasks, f"must be one of {', '.join(tasks)}"),
        ("task", cfg.task not in ("math", "code", "code-chat") or bool(cfg.model and cfg.data),
         f"{cfg.task} needs --model and --data"),
        ("data", not missing_file(cfg.data), f"{cfg.data}: no such file"),  # a dataset name is checked when loaded
        ("eval_data", not missing_file(cfg.eval_data), f"{cfg.eval_data}: no such file"),
        ("steps", cfg.steps >= 1, "must be >= 1"),
        ("group_size", cfg.group_size >= 2, "must be >= 2"),
        ("temperature", cfg.temperature > 0, "must be > 0 (sampling divides the logits by it)"),
        ("lr", cfg.lr > 0, "must be > 0"),
        ("grad_clip", cfg.grad_clip >= 0, "must be >= 0"),
        ("minibatches", cfg.minibatches >= 1 and n % cfg.minibatches == 0,
         f"must divide prompts-per-step x group-size ({n})"),
        ("n_train", cfg.task in ("math", "code", "code-chat") or cfg.n_train >= cfg.prompts_per_step,
         "must be >= --prompts-per-step"),
        ("n_eval", cfg.n_eval >= 1, "must be >= 1"),
        ("ks", all(k.strip().isdigit() and 1 <= int(k) <= cfg.n_eval for k in cfg.ks.split(",") if cfg.ks),
         "must be integers in [1, --n-eval]"),
        ("eval_every", cfg.eval_every >= 0, "must be >= 0"),
        ("micro_batch", cfg.micro_batch >= 0, "must be >= 0 (0 = the whole mini-batch)"),
        ("dtype", cfg.dtype in ("float32", "bfloat16"), "must be float32 or bfloat16"),
        ("log", not reco_log.check_sinks(cfg.log), reco_log.check_sinks(cfg.log)),
        ("head_chunk", cfg.head_chunk >= -1, "must be >= 0 (0 = full logits), or -1 for the task's default"),
    ]


def resolve_defaults(cfg, task, methods: list[str], tasks: list[str]) -> None:
    """reco_mini.Config's settings that default to the task's (0, or -1 for --head-chunk), the task's own defaults
    (task.config_defaults, for fields left at Config's default: as with --quick, a flag set to Config's default takes
    the task's), the output directory (runs/default, or runs/quick with --quick) and the device ("auto": cuda when
    there is one)."""
    own = {f.name: f.default for f in fields(cfg)}
    changed = {name: value for name, value in task.config_defaults.items() if getattr(cfg, name) == own[name]}
    for name, value in changed.items():
        setattr(cfg, name, value)
    if changed:  # the checks again, on the task's values
        check(cfg.checks() + run_checks(cfg, methods, tasks))
    cfg.max_new_tokens = cfg.max_new_tokens or task.max_new_tokens
    cfg.out = cfg.out or ("runs/quick" if cfg.quick else "runs/default")
    cfg.eval_batch = cfg.eval_batch or task.eval_batch
    cfg.head_chunk = task.head_chunk if cfg.head_chunk < 0 else cfg.head_chunk
    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"


def fail(message: str) -> None:
    """A one-line error on stderr and exit code 2: bad input never ends in a traceback."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_entry_point(prog: str, main: Callable[[], object], bad_input: tuple[type[BaseException], ...]) -> NoReturn:
    """Run a program's main(): bad input (an error of `bad_input`, or a SystemExit that carries a message) becomes
    one line, `prog: error: ...`, on stderr and exit code 2; anything else keeps its traceback."""
    try:
        code = main()
    except bad_input as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"{prog}: error: {(str(message).strip().splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        print(f"{prog}: {e.code.strip().splitlines()[0]}" if e.code.strip() else f"{prog}: error", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        fail(message)


def flag_order(cls: type) -> list:
    """The fields of dataclass `cls` in the order its flags are listed: its own first, then each base's in the
    method resolution order (reco_mini.Config: its own, the loss's, the peers', the task's, then RunSettings')."""
    own = [name for c in cls.__mro__ for name in vars(c).get("__annotations__", {})]
    by_name = {f.name: f for f in fields(cls)}
    return [by_name[name] for name in dict.fromkeys(own) if name in by_name]


def parse_config(cls: type, argv: list[str] | None, description: str):
    """`cls` (a dataclass whose fields carry a "help" metadata entry) from command-line flags.

    --quick replaces the defaults of the fields named in QUICK; flags given explicitly still win. The
    dataclass validates itself and raises ValueError naming the flag, which becomes a one-line error.
    """
    parser = _OneLineParser(prog=PROG, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    types = {"int": int, "float": float, "str": str, "float | None": float}
    for f in flag_order(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=types[f.type], default=f.default, help=f.metadata["help"])
    parser.add_argument("--method", help="a single method (the same as --methods M)")
    args = vars(parser.parse_args(argv))
    args["methods"] = args.pop("method") or args["methods"]
    if args["quick"]:
        args |= {k: v for k, v in QUICK.items() if args[k] == next(f.default for f in fields(cls) if f.name == k)}
    try:
        return cls(**args)
    except ValueError as e:
        fail(str(e))


def describe_settings(cfg) -> str:
    """The start-up lines: what runs where, then each setting that differs from its default, one per line.

    `cfg` is a dataclass whose default instance is `type(cfg)()`; the full config goes to results.json.
    """
    default = type(cfg)()
    changed = [(f.name, getattr(cfg, f.name), getattr(default, f.name)) for f in flag_order(type(cfg))
               if getattr(cfg, f.name) != getattr(default, f.name)]
    shown = [("--" + name.replace("_", "-") + ("" if value is True else f" {value}"),
              "off" if default_value is False else repr(default_value) if default_value == "" else str(default_value))
             for name, value, default_value in changed]
    width = max((len(flag) for flag, _ in shown), default=0)
    methods = getattr(cfg, "methods", "").replace(",", ", ")
    lines = [f"{PROG}: {methods} on {getattr(cfg, 'device', '?')}, writing {getattr(cfg, 'out', '?')}/ "
             f"(the full config goes to its results.json)"]
    lines += [f"  {flag:<{width}}  (default {d})" for flag, d in shown] or ["  every setting at its default"]
    return "\n".join(lines)


def load_hf(name_or_path: str, device: str):
    """(tokenizer, model) of a Hugging Face causal LM, left-padded, fp32; a one-line error if it cannot load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32).to(device)
    except (OSError, ValueError) as e:
        fail(f"--model {name_or_path}: cannot load it ({str(e).strip().splitlines()[0]})")
    except Exception:
        if problem := unreadable_weights(name_or_path):  # a truncated or corrupt weights file is bad input too
            fail(f"--model {name_or_path}: cannot load it ({problem})")
        raise
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    return tokenizer, model


def unreadable_weights(model_dir: str | Path) -> str | None:
    """'FILE: cannot read its weights (reason)' for the first weights file of a local model directory that cannot
    be read (a truncated or corrupt *.safetensors or *.bin), else None. Reads the safetensors headers and maps the
    .bin files: call it after a load failed, to tell bad input from a bug."""
    paths = sorted(Path(model_dir).glob("*.safetensors")) + sorted(Path(model_dir).glob("*.bin"))
    for path in paths:
        try:
            if path.suffix == ".safetensors":
                from safetensors import safe_open

                with safe_open(str(path), "pt") as f:
                    f.keys()
            else:
                torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except Exception as e:  # SafetensorError, UnpicklingError, RuntimeError: every way a weights file is unreadable
            return f"{path}: cannot read its weights ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"
    return None


def stop_token_ids(tokenizer, template: str | None, generation_config=None) -> list[int]:
    """Tokens that end a response: the tokenizer's EOS, the EOS ids of the model's generation config and, for the
    qwen-boxed or a chat template, ``<|im_end|>`` (a Qwen base model's EOS is ``<|endoftext|>``, but it closes the
    chat turn with ``<|im_end|>`` and may then keep writing, and a later ``\\boxed{}`` would be graded).
    `template` None (no prompt template, e.g. countdown): none. reco_mini's math task and reco_scaled's engines."""
    if template is None:
        return []
    eos = getattr(generation_config, "eos_token_id", None)
    stop = [tokenizer.eos_token_id] + (eos if isinstance(eos, list) else [eos])
    if template in ("qwen-boxed", "chat") and "<|im_end|>" in tokenizer.get_vocab():
        stop.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return list(dict.fromkeys(t for t in stop if t is not None))


def has_bos(text: str, tokenizer) -> bool:
    """Chat templates (Llama 3) already write the BOS token; the tokenizer must not add a second."""
    return bool(tokenizer.bos_token) and text.startswith(tokenizer.bos_token)


@torch.no_grad()
def check_lm_head(model) -> None:
    """--head-chunk makes the logits as lm_head(decoder's last hidden state): refuse a model whose forward does more
    there (a logit scale, a soft cap), by comparing both on four tokens."""
    ids = torch.arange(1, 5, device=model.device)[None] % model.config.vocab_size
    full = model(input_ids=ids, use_cache=False).logits.float()
    try:
        split = model.get_output_embeddings()(model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state)
    except (AttributeError, NotImplementedError, TypeError) as e:
        raise ValueError(f"--head-chunk: {type(model).__name__} has no decoder and lm head to call apart ({e}); "
                         "use --head-chunk 0") from e
    if not torch.allclose(full, split.float(), rtol=1e-4, atol=1e-4):
        raise ValueError(f"--head-chunk: {type(model).__name__}'s logits are not its lm head applied to the last hidden "
                         "state; use --head-chunk 0")


@dataclass
class Step:
    """One RL step once the response weights are computed: what reco_mini.train_rl's on_step hook is given.
    B = P*G rows, problem-major; T response tokens."""
    problems: list  # the step's P problems
    group_size: int  # G
    texts: list[str]  # the P*G decoded responses
    resp: Tensor  # [B, T] response token ids
    mask: Tensor  # [B, T] float, 1 on response tokens
    responses: list[list[int]]  # each response's token ids
    rewards: Tensor  # [P, G]
    advantages: Tensor  # [B]
    old_logp: Tensor  # [B, T] log pi_old(y_t)
    v_old: Tensor  # [B, T] V_old(s_t)
    v_old_mean: Tensor  # 0-d
    entropy: Tensor  # [B, T] H_old(s_t)
    weights: Tensor  # [B] w_i
    loss_cfg: object  # reco_mini.LossConfig, the method's (loss_config)
    task: object  # the reco_task task
    tokenizer: object


def occurrence_inputs(seq_logprobs: Tensor, mode: str, modes: list[str], responses: list | None,
                      lengths: Tensor | None, advantages: Tensor | None, apply: str, keys: list | None):
    """reco_mini.occurrence_weights' arguments, checked (ValueError naming the one that is wrong or missing):
    the responses as P*G tuples (given as P*G lists, problem-major, or as P lists of G) or None, and the lengths
    [P, G] in float64 (from the responses when not given) or None."""
    P, G = seq_logprobs.shape
    if mode not in modes or apply not in ("all", "positive"):
        raise ValueError(f"unknown occurrence mode {mode!r} or apply {apply!r}")
    if apply == "positive" and advantages is None:
        raise ValueError("apply='positive' needs advantages")
    flat = None
    if responses is not None:
        groups = responses if len(responses) == P != P * G else [responses]  # P lists of G, or one list
        flat = [tuple(r) for group in groups for r in group]
        if len(flat) != P * G:
            raise ValueError(f"responses has {len(flat)} entries, expected P*G = {P * G}")
        if lengths is None:
            lengths = torch.tensor([len(r) for r in flat], device=seq_logprobs.device).view(P, G)
    if {"count": flat, "token-mean": lengths, "canonical": keys}.get(mode, 0) is None:
        raise ValueError(f"occurrence mode {mode!r} needs responses (or lengths for token-mean, keys for canonical)")
    return flat, None if lengths is None else lengths.double()


def stop_if_not_finite(loss: float, grad_norm: float, where: str, run_dir: Path) -> None:
    """Stop the run, before the optimizer step, on a non-finite loss or gradient: the last good weights stay
    (run_dir/model.pt)."""
    ckpt = Path(run_dir) / "model.pt"
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        kept = f"last good checkpoint kept at {ckpt}" if ckpt.exists() else "no checkpoint yet"
        sys.exit(f"error: non-finite loss or gradient in {where}; {kept}")


def token_stats(logits: Tensor, targets: Tensor, temperature: float = 1.0, chunk: int = 256,
                head: torch.nn.Module | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """reco_mini's memory-saving path (--head-chunk > 0, and --task math by default): its token_logprobs,
    variance_stat and token_entropy in one pass without their fp32 copies of [B, T, V], one fp32 slice of about
    `chunk` tokens at a time, the same values bit for bit from the logits (tests/test_mini_token_stats.py checks it
    against the readable path, as llm.c checks its fast path). log pi's gradient recomputes its slice in the backward
    pass (checkpoint), so only the logits stay alive. [B,T,V],[B,T] -> 3 x [B,T]; V and H: no gradient. With `head`
    (the lm head), `logits` are the last hidden states [B,T,H]: each slice makes its logits, and the backward pass
    remakes them, so no [B, T, V] tensor is kept."""
    def one_slice(z: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = z if head is None else head(z)
        z = (z.double() if z.dtype == torch.float64 else z.float()) / temperature  # the one upcast
        logp = F.log_softmax(z, dim=-1)
        with torch.no_grad():
            v, h = 1.0 - F.softmax(z, dim=-1).square().sum(-1), -(logp.exp() * logp).sum(-1)
        return logp.gather(-1, y.unsqueeze(-1)).squeeze(-1), v, h

    width = max(1, chunk // max(1, logits.shape[0]))
    grad = torch.is_grad_enabled() and logits.requires_grad
    parts = [checkpoint(one_slice, z, y, use_reentrant=False) if grad else one_slice(z, y)
             for z, y in zip(logits.split(width, dim=1), targets.split(width, dim=1))]
    logp, v, h = (torch.cat(t, dim=1) for t in zip(*parts))
    return logp, v.detach(), h.detach()


def check_training(cfg, loss_cfg, model, base_on_device: bool) -> None:
    """reco_mini.train_rl's checks before the first step: the KL term needs the base on the model's device, and
    --head-chunk > 0 a model whose logits are its lm head on the last hidden state, and no term that reads them."""
    if loss_cfg.kl_coef > 0 and not base_on_device:
        raise ValueError("--kl-coef > 0 needs the base model on the model's device")
    if cfg.head_chunk > 0:
        check_lm_head(model)
        if loss_cfg.token_ratio == "simko":
            raise ConfigError("head_chunk", "> 0 keeps no logits, which --token-ratio simko reads")


def step_row(step: int, rewards: Tensor, A: Tensor, w: Tensor, v_old_mean: Tensor, entropy: Tensor,
             kl_base: Tensor | None, mask: Tensor) -> dict:
    """The first fields of a reco_mini log row (docs/design.md section 2): the rewards [P, G] and the share of groups
    with a success, mean |A|, the weights' range, V_old's batch mean, the mean token entropy and, when the base was at
    hand, k3 to it [B, T], both over the response tokens (mask), and the mean response length."""
    tokens = mask.sum()
    row = {"step": step, "reward_mean": rewards.mean().item(),
           "pass_rate": (rewards.max(1).values > 0).float().mean().item(), "adv_abs_mean": A.abs().mean().item(),
           "w_min": w.min().item(), "w_mean": w.mean().item(), "w_max": w.max().item(),
           "v_old_mean": float(v_old_mean), "entropy": ((entropy * mask).sum() / tokens).item()}
    if kl_base is not None:
        row["kl_base"] = ((kl_base * mask).sum() / tokens).item()
    return row | {"response_length": mask.sum(-1).mean().item()}


def update_summary(stats: dict[str, list[float]]) -> dict[str, float]:
    """A step's statistics from its updates' values (policy_loss's per micro-batch): the mean, the largest for *_max."""
    return {k: max(v) if k.endswith("_max") else sum(v) / len(v) for k, v in stats.items()}


class Trajectory:
    """run_dir/trajectory.jsonl: Pass@k along training, one row every `every` RL steps (0: no file)."""

    def __init__(self, run_dir: Path, every: int):
        self.every = every
        self.file = open(Path(run_dir) / "trajectory.jsonl", "w", buffering=1) if every else None

    def due(self, steps_done: int) -> bool:
        return bool(self.every) and steps_done % self.every == 0

    def write(self, steps_done: int, result: dict) -> None:
        self.file.write(json.dumps({"step": steps_done, **result}) + "\n")


def default_ks(n: int) -> list[int]:
    """The k of a Pass@k curve from n samples: 1, 2, 4, ... up to n, and n itself."""
    return sorted({2 ** i for i in range(n.bit_length()) if 2 ** i <= n} | {n})


def autocast(device: str, dtype: str) -> torch.autocast:
    """--dtype: bfloat16 runs the forwards under bf16 autocast (the weights stay fp32, the optimizer's master
    copy); float32 is a disabled context, so the default path is untouched. CPU autocast works the same way."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


@contextmanager
def training(model, gradient_checkpointing: bool):
    """The update passes. With gradient checkpointing, HF models recompute each decoder layer in the backward
    pass; they do so only in training mode, where they also drop the KV cache, so sampling (outside this
    context) runs in eval mode without it. Without the flag, nothing changes."""
    if not gradient_checkpointing:
        yield
        return
    was_training = model.training
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    try:
        yield
    finally:
        model.gradient_checkpointing_disable()
        model.train(was_training)


def math_splits(data: str, eval_data: str = "") -> dict[str, list[dict]]:
    """Training and held-out math problems (reco_data.load_problems), as held_out_splits makes them."""
    from reco_data import load_problems

    return held_out_splits(data, eval_data, load_problems)


def held_out_splits(data: str, eval_data: str, load: Callable[[str], list]) -> dict[str, list]:
    """Training and held-out problems, each source read by `load`: `eval_data` if given, else a fixed fifth of
    `data` (the same problems whatever the run's seed). Bad rows are one-line errors naming the file, line and
    field."""
    from reco_data import DataError

    try:
        train = load(data)
        test = load(eval_data) if eval_data else None
    except DataError as e:
        fail(str(e))
    if test is None:
        if len(train) < 2:
            fail(f"{data}: a held-out split needs at least 2 problems (or pass --eval-data)")
        order = list(range(len(train)))
        random.Random(1234).shuffle(order)
        held = set(order[: max(1, len(train) // 5)])
        train, test = [p for i, p in enumerate(train) if i not in held], [p for i, p in enumerate(train) if i in held]
    return {"train": train, "test": test}


def save_atomic(state: dict, path: Path) -> None:
    """torch.save to a temporary file, then rename: a crash never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


def write_results(results: dict, out: Path) -> None:
    """reco_mini's end: results.json, the Pass@k table on stdout and the Pass@k plot."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(format_table(results["methods"]))
    plot_pass_at_k({m: {"held-out": res} for m, res in results["methods"].items()}, out / "pass_at_k.png")
    print(f"wrote {out / 'results.json'} and {out / 'pass_at_k.png'} in {results['wall_time_s']} s")


def format_table(columns: dict[str, dict], title: str = "") -> str:
    """Pass@k rows (and mean accuracy, distinct correct, solved-any) by columns (methods, or benchmarks)."""
    width = max(10, *(len(c) + 2 for c in columns))
    lines = ([title] if title else []) + [f"{'pass@k':<10}" + "".join(f"{c:>{width}}" for c in columns)]
    for k in next(iter(columns.values()))["pass_at_k"]:
        lines.append(f"{k:<10}" + "".join(f"{s['pass_at_k'][k]:>{width}.4f}" for s in columns.values()))
    for key, label in (("mean_accuracy", "mean acc"), ("distinct_correct", "distinct"), ("solved_any", "solved")):
        lines.append(f"{label:<10}" + "".join(f"{s[key]:>{width}.4f}" for s in columns.values()))
    if all("n_problems" in s for s in columns.values()):
        lines.append(f"{'problems':<10}" + "".join(f"{s['n_problems']:>{width}d}" for s in columns.values()))
    return "\n".join(lines)


def plot_pass_at_k(runs: dict[str, dict[str, dict]], path: str | Path, title: str = "Pass@k") -> Path:
    """Pass@k against k (log2 axis): one panel per benchmark (plus the average), one line per run.

    runs: run name -> panel name -> {"pass_at_k": {k: value}, optional "n_problems"}.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(b for summary in runs.values() for b in summary))  # first-seen order
    panels = [b for b in panels if b != "average"] + (["average"] if len(panels) > 2 else [])
    cols = min(3, len(panels))
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(4.2 * cols, 3.3 * math.ceil(len(panels) / cols)),
                             squeeze=False)
    for ax, bench in zip(axes.flat, panels):
        ks: set[int] = set()
        for name, summary in runs.items():
            if bench in summary:
                curve = summary[bench]["pass_at_k"]
                ks |= {int(k) for k in curve}
                ax.plot([int(k) for k in curve], list(curve.values()), marker="o", ms=3, label=name)
        n_problems = next((s[bench].get("n_problems") for s in runs.values() if bench in s), None)
        ax.set_title("average over benchmarks" if bench == "average"
                     else bench + (f" ({n_problems} problems)" if n_problems else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
        ax.minorticks_off()
        ax.set(xlabel="k (samples)", ylabel="Pass@k", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
