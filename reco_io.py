"""reco_io.py: the plumbing of reco_mini.py, kept out of the file that teaches the method.

The command line (a flag and its help for every config field; one-line errors, exit code 2), the math task's
files and model (loaded with one-line errors), the KV-cache sampler, the precision and gradient-checkpointing
switches of reco_mini's forwards, atomic checkpoint writes, and the Pass@k table and plot, which reco_scaled's
evaluation uses too. Nothing here imports reco_mini: it is handed what it needs.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

import torch
import torch.nn.functional as F
from torch import Tensor

PROG = "reco_mini.py"


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


def parse_config(cls: type, argv: list[str] | None, quick: dict, description: str):
    """`cls` (a dataclass whose fields carry a "help" metadata entry) from command-line flags.

    --quick replaces the defaults of the fields named in `quick`; flags given explicitly still win. The
    dataclass validates itself and raises ValueError naming the flag, which becomes a one-line error.
    """
    parser = _OneLineParser(prog=PROG, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    types = {"int": int, "float": float, "str": str, "float | None": float}
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=types[f.type], default=f.default, help=f.metadata["help"])
    parser.add_argument("--method", help="a single method (the same as --methods M)")
    args = vars(parser.parse_args(argv))
    args["methods"] = args.pop("method") or args["methods"]
    if args["quick"]:
        args |= {k: v for k, v in quick.items() if args[k] == next(f.default for f in fields(cls) if f.name == k)}
    try:
        return cls(**args)
    except ValueError as e:
        fail(str(e))


def describe_settings(cfg) -> str:
    """The start-up lines: what runs where, then each setting that differs from its default, one per line.

    `cfg` is a dataclass whose default instance is `type(cfg)()`; the full config goes to results.json.
    """
    default = type(cfg)()
    changed = [(f.name, getattr(cfg, f.name), getattr(default, f.name)) for f in fields(cfg)
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
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    return tokenizer, model


@torch.no_grad()
def sample(model, prompt_ids: Tensor, prompt_mask: Tensor, max_new_tokens: int, temperature: float,
           eos_id: int, pad_id: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Sample from softmax(logits/tau) token by token, reusing the KV cache. prompt_ids, prompt_mask: [B, L]
    left-padded -> responses [B, T], mask [B, T] (1 up to and including <eos>; later positions hold pad_id)."""
    from transformers import DynamicCache

    cache, attn = DynamicCache(), prompt_mask
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L]
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, past_key_values=cache,
                   logits_to_keep=1).logits[:, -1]  # the last position's logits only, not [B, L, V]
    done, tokens, alive = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=prompt_ids.device), [], []
    for _ in range(max_new_tokens):
        probs = F.softmax(logits.float() / temperature, dim=-1)  # [B, V]
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [B]
        alive.append(~done)
        tokens.append(torch.where(done, pad_id, nxt))
        done = done | (nxt == eos_id)
        if done.all():
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        pos = pos[:, -1:] + 1
        logits = model(input_ids=tokens[-1][:, None], attention_mask=attn, position_ids=pos,
                       past_key_values=cache).logits[:, -1]
    return torch.stack(tokens, 1), torch.stack(alive, 1).long()


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
    """Training and held-out math problems: `eval_data` if given, else a fixed fifth of `data` (the same
    problems whatever the run's seed). Bad rows are one-line errors naming the file, line and field."""
    from reco_data import DataError, load_problems

    try:
        train = load_problems(data)
        test = load_problems(eval_data) if eval_data else None
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
