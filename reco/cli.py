"""reco_io.py: the plumbing of reco_mini.py, kept out of the file that teaches the method.

The command line (RunSettings, the plumbing's flags; a flag and its help for every config field, by group; the allowed
values of every setting, checked before any work; one-line errors, exit code 2; the parser every command shares;
--quick's budget), the run directory's reuse, the registry decorator, the math task's files and model (loaded with
one-line errors, a missing one found before anything loads), the tokens that end a response, reco_mini's sampler
(sample, with the KV cache), the checks of occurrence_weights' arguments, the memory-saving token_stats (reco_mini's
--head-chunk path, tested against its readable one), the precision and gradient-checkpointing switches, the step's
log row and the trajectory file, the non-finite stop, atomic checkpoint writes, progress bars that do not flood a log
file, and the Pass@k table and plot, which reco_scaled's evaluation uses too.
Nothing here imports reco_mini: it is handed what it needs.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import random
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import NoReturn

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint
from tqdm.auto import tqdm as _tqdm_auto

CONSOLE_COMMANDS = ("reco-mini", "reco-train", "reco-eval")  # pyproject.toml's [project.scripts]


def command_name(module: str, documented: str) -> str:
    """The program's name as the user invoked it, for usage lines and errors: the console command `pip install .`
    installed (reco-mini), `python -m MODULE` when run so, else the name it is documented under (reco_mini.py; also
    when run from code: a test, a study)."""
    invoked, orig = Path(sys.argv[0]).name if sys.argv else "", getattr(sys, "orig_argv", [])
    if invoked in CONSOLE_COMMANDS:
        return invoked
    if module in orig[2:] and orig[orig.index(module, 2) - 1] == "-m":
        return f"python -m {module}"
    return documented


PROG = command_name("reco_mini", "reco_mini.py")


def opt(default, help: str):
    """A config field with its --help text beside it."""
    return field(default=default, metadata={"help": help})


class ConfigError(ValueError):  # a bad setting; the message names the flag
    def __init__(self, name: str, message: str):
        super().__init__(f"--{name.replace('_', '-')} {message}")
        self.name, self.message = name, message


@dataclass(frozen=True)
class Allowed:
    """The values a numeric setting takes: finite numbers from `low` to `high` (`open_low`/`open_high`: that end
    excluded) that are multiples of `multiple_of`, and the values in `special` (a sentinel such as -1, or None)."""
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False
    special: tuple = ()
    multiple_of: int = 1

    def __contains__(self, value) -> bool:
        if value in self.special:
            return True
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below and (self.multiple_of == 1 or value % self.multiple_of == 0)

    def __str__(self) -> str:
        if self.high == math.inf:
            span = f"{'>' if self.open_low else '>='} {self.low:g}"
        else:
            span = f"in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"
        span = f"a multiple of {self.multiple_of} {span}" if self.multiple_of > 1 else span
        return " or ".join([*(f"{v:g}" for v in self.special if v is not None), span])

    def check(self, name: str, value) -> tuple[str, bool, str]:
        """(field, ok, message) for a config's checks."""
        finite = "a finite number " if isinstance(value, float) and not math.isfinite(value) else ""
        return name, value in self, f"must be {finite}{self}, got {value!r}"


POSITIVE = Allowed(0, open_low=True)
# The numeric settings of reco_mini.LossConfig and of the rest of reco_mini.Config (with reco_task.TaskSettings' and
# RunSettings'): each has its rule, so a new one fails tests/test_validation.py until it gets one (the peers' settings:
# reco_variants.PEER_NUMBERS).
LOSS_NUMBERS = {
    "focal_gamma": Allowed(0, special=(None,)),
    "variance_cap": POSITIVE,
    "clip_low": Allowed(0, 1, open_low=True, open_high=True),
    "clip_high": POSITIVE,
    "dual_clip": Allowed(1, open_low=True, special=(0,)),  # 0 = off
    "kl_coef": Allowed(0),
}
RUN_NUMBERS = {
    "seed": Allowed(0),
    "eval_seed": Allowed(0, special=(-1,)),  # -1 = seed + 1
    # reco_task.TaskSettings' (the problems and the tiny base)
    "n_train": Allowed(1),
    "n_test": Allowed(1),
    "hidden": Allowed(8, multiple_of=8),  # 4 attention heads, each of an even width (rotary embeddings)
    "layers": Allowed(1),
    "sft_steps": Allowed(1),
    "sft_batch": Allowed(1),
    "sft_lr": POSITIVE,
    # reco_mini.Config's own (the RL run and its evaluation)
    "steps": Allowed(1),
    "prompts_per_step": Allowed(1),
    "group_size": Allowed(2),  # group-relative advantages need two responses
    "epochs": Allowed(1),
    "minibatches": Allowed(1),
    "lr": POSITIVE,
    "grad_clip": Allowed(0),  # 0 = off
    "temperature": POSITIVE,  # sampling divides the logits by it
    "max_new_tokens": Allowed(0),  # 0 = the task's
    "n_eval": Allowed(1),
    "eval_every": Allowed(0),  # 0 = at the end only
    # RunSettings' (below: memory and precision)
    "eval_batch": Allowed(0),  # 0 = the task's
    "micro_batch": Allowed(0),  # 0 = the whole mini-batch
    "head_chunk": Allowed(0, special=(-1,)),  # 0 = full logits, -1 = the task's
}
# The settings with a fixed set of values that no registry holds (the registries' values: REGISTRIES).
CHOICES = {
    "occurrence_apply": ("all", "positive"),
    "occurrence_norm": ("group", "batch", "none"),
    "variance_norm": ("batch", "none"),
    "aggregation": ("token-mean", "seq-mean-token-mean"),
    "device": ("auto", "cpu", "cuda", "cuda:N"),
    "dtype": ("float32", "bfloat16"),
    "log": ("tensorboard", "wandb"),
}


def choice(cfg, name: str, choices, empty_ok: bool = False) -> tuple[str, bool, str]:
    """(field, ok, message): the setting is one of `choices` (or '', the method's, where `empty_ok`)."""
    value = getattr(cfg, name)
    return name, value in choices or (empty_ok and value == ""), f"must be one of {list(choices)}, got {value!r}"


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
    """reco_mini.Config's plumbing flags: where it runs and writes, memory and precision, logging. Their values are
    listed by --help (CHOICES) and checked with the run's (RUN_NUMBERS, run_checks)."""
    device: str = opt("auto", "where to train (auto: cuda when there is one)")
    out: str = opt("", "output directory (default runs/default, --quick: runs/quick; other tasks: runs/TASK[-quick])")
    quick: bool = opt(False, "a tiny budget: a smoke test of the whole pipeline (QUICK)")
    eval_batch: int = opt(0, "most responses sampled at once to evaluate (0: 4096, math 64)")
    micro_batch: int = opt(0, "rows per forward; gradients add up over the mini-batch (0 = all)")
    head_chunk: int = opt(-1, "row-tokens per lm-head slice (0 = full logits; -1: math 256)")
    dtype: str = opt("float32", "precision of the forwards (bfloat16: autocast over fp32 weights)")
    gradient_checkpointing: bool = opt(False, "recompute each decoder layer in the backward pass")
    log: str = opt("", "also log each RL step to (log.jsonl is always written)")
    overwrite: bool = opt(False, "replace the results of a different config in --out")


# --quick: the defaults it replaces (a flag given explicitly still wins)
QUICK = dict(n_train=64, n_test=16, hidden=64, layers=2, sft_steps=300, steps=4, prompts_per_step=8, n_eval=32)


def loss_checks(cfg, occurrences: list[str], token_ratios: list[str]) -> list[tuple[str, bool, str]]:
    """reco_mini.LossConfig's checks of the policy-loss settings: (field, ok, message)."""
    return [rule.check(name, getattr(cfg, name)) for name, rule in LOSS_NUMBERS.items()] + [
        choice(cfg, "occurrence", occurrences, empty_ok=True),
        choice(cfg, "token_ratio", token_ratios, empty_ok=True),
        *(choice(cfg, name, CHOICES[name]) for name in ("occurrence_apply", "occurrence_norm", "variance_norm",
                                                        "aggregation")),
    ]


def device_problem(device: str) -> str:
    """Why `device` cannot run here ('' if it can): an unknown name, or CUDA that this torch does not have."""
    if device in ("auto", "cpu"):
        return ""
    if not re.fullmatch(r"cuda(:\d+)?", device):
        return f"must be one of {list(CHOICES['device'])}, got {device!r}"
    if torch.version.cuda is None:
        return (f"{device}: this torch ({torch.__version__}) is a CPU build, without CUDA; use --device cpu, or "
                "install a CUDA build of torch (README, Quick start)")
    if not torch.cuda.is_available():
        return f"{device}: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU here; use --device cpu"
    if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        return f"{device}: this machine has {torch.cuda.device_count()} GPU(s), numbered from 0"
    return ""


def run_checks(cfg, methods: list[str], tasks: list[str]) -> list[tuple[str, bool, str]]:
    """reco_mini.Config's checks of the run's own settings (sizes, task, files, flags): (field, ok, message).
    The numbers come first, so that a combination (--minibatches must divide ...) is checked on valid parts."""
    import reco_log
    from reco_data import missing_file

    n = cfg.prompts_per_step * cfg.group_size
    return [rule.check(name, getattr(cfg, name)) for name, rule in RUN_NUMBERS.items()] + [
        ("methods", all(m in methods for m in cfg.method_list),  # none: the base alone (the studies' evaluation)
         f"must be a comma-separated subset of {list(methods)}, got {cfg.methods!r}"),
        choice(cfg, "task", tasks),
        ("task", cfg.task not in ("math", "code", "code-chat") or bool(cfg.model and cfg.data),
         f"{cfg.task} needs --model and --data"),
        ("data", not missing_file(cfg.data), f"{cfg.data}: no such file"),  # a dataset name is checked when loaded
        ("eval_data", not missing_file(cfg.eval_data), f"{cfg.eval_data}: no such file"),
        ("device", not device_problem(cfg.device), device_problem(cfg.device)),
        ("minibatches", cfg.minibatches < 1 or n % cfg.minibatches == 0,  # < 1: the rule above says so
         f"must divide prompts-per-step x group-size ({n}), got {cfg.minibatches}"),
        ("n_train", cfg.task in ("math", "code", "code-chat") or cfg.n_train >= cfg.prompts_per_step,
         f"must be >= --prompts-per-step ({cfg.prompts_per_step}), got {cfg.n_train}"),
        ("ks", all(k.strip().isdigit() and 1 <= int(k) <= cfg.n_eval for k in cfg.ks.split(",") if cfg.ks),
         f"must be integers in [1, --n-eval], got {cfg.ks!r}"),
        choice(cfg, "dtype", CHOICES["dtype"]),
        ("log", not reco_log.check_sinks(cfg.log), reco_log.check_sinks(cfg.log)),
    ]


def resolve_defaults(cfg, task, methods: list[str], tasks: list[str]) -> None:
    """reco_mini.Config's settings that default to the task's (0, or -1 for --head-chunk), the task's own defaults
    (task.config_defaults, for fields left at Config's default: as with --quick, a flag set to Config's default takes
    the task's), the output directory (runs/default, or runs/quick with --quick; runs/TASK and runs/TASK-quick for
    a task other than countdown, so that one task's run never meets another's results) and the device ("auto": cuda when
    there is one)."""
    own = {f.name: f.default for f in fields(cfg)}
    changed = {name: value for name, value in task.config_defaults.items() if getattr(cfg, name) == own[name]}
    for name, value in changed.items():
        setattr(cfg, name, value)
    if changed:  # the checks again, on the task's values
        check(cfg.checks() + run_checks(cfg, methods, tasks))
    cfg.max_new_tokens = cfg.max_new_tokens or task.max_new_tokens
    if not cfg.out:
        name = "quick" if cfg.quick else "default"
        cfg.out = f"runs/{name}" if cfg.task == "countdown" else f"runs/{cfg.task}" + ("-quick" if cfg.quick else "")
    cfg.eval_batch = cfg.eval_batch or task.eval_batch
    cfg.head_chunk = task.head_chunk if cfg.head_chunk < 0 else cfg.head_chunk
    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"


def fail(message: str, prog: str = PROG) -> NoReturn:
    """A one-line error on stderr and exit code 2: bad input never ends in a traceback."""
    print(f"{prog}: error: {message}", file=sys.stderr)
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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class ArgumentParser(argparse.ArgumentParser):
    """argparse for this project's commands: an error is one line (`prog: error: ...`) and exit code 2, an unknown
    flag is named with the closest known one (before any 'required' complaint), a negative number is a flag's value
    (`--lr -1e-4`, which argparse takes for a flag), and flags are never abbreviated."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        out, i = [], 0
        while i < len(args):
            token = args[i]
            if token == "--":
                out += args[i:]
                break
            name = token.split("=", 1)[0]
            action = self._option_string_actions.get(name)
            if token.startswith("--") and action is None and not _is_number(token):
                close = difflib.get_close_matches(name, [s for s in self._option_string_actions if s.startswith("--")], 1)
                self.error(f"unrecognized arguments: {name}" + (f" (did you mean {close[0]}?)" if close else ""))
            takes_one = action is not None and action.nargs is None and action.option_strings and "=" not in token
            if takes_one and i + 1 < len(args) and args[i + 1].startswith("-") and _is_number(args[i + 1]):
                out.append(f"{token}={args[i + 1]}")  # argparse would read "-1e-4" as a flag
                i += 2
                continue
            out.append(token)
            i += 1
        return super().parse_known_args(out, namespace)


class HelpFormatter(argparse.HelpFormatter):
    """One line per flag where the terminal allows: the help column starts after the longest flag, and a line never
    breaks inside a hyphenated value."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=28)

    def _split_lines(self, text: str, width: int) -> list[str]:  # never break a value such as countdown-long
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def flag_help(text: str, default=None, choices=None) -> str:
    """A flag's help: its text, its values when they are a fixed set (from the registry itself, so that a new variant
    is listed without an edit) and its default, once: not where the text already says it, nor when it is empty."""
    if choices:
        text = f"{text}: {' | '.join(choices)}"
    if default is not None and default is not False and default != "" and "default" not in text:
        text += f" (default: {default})"
    return text.replace("%", "%%")


# reco_mini's --help, by group and in this order. Every Config field is in one (tests/test_newcomer.py).
GROUPS = {
    "run": ("seed", "device", "quick", "steps", "prompts_per_step", "group_size", "epochs", "minibatches", "lr",
            "grad_clip", "temperature", "max_new_tokens", "micro_batch", "head_chunk", "dtype",
            "gradient_checkpointing"),
    "methods": ("methods", "method", "occurrence", "token_ratio", "focal_gamma"),
    "loss": ("occurrence_apply", "occurrence_norm", "variance_cap", "variance_norm", "clip_low", "clip_high", "dual_clip",
             "kl_coef", "no_std", "aggregation"),
    "model and data": ("task", "model", "data", "eval_data", "n_train", "n_test", "hidden", "layers", "sft_steps",
                       "sft_batch", "sft_lr"),
    "evaluation and output": ("n_eval", "eval_batch", "eval_every", "eval_seed", "ks", "out", "overwrite", "log"),
}
METAVARS = {"int": "N", "float": "X", "float | None": "X", "str": "TEXT", "methods": "NAMES", "log": "NAMES",
            "ks": "K,K,...", "model": "NAME_OR_DIR", "data": "SOURCE", "eval_data": "SOURCE", "out": "DIR"}
# Field -> the registry whose keys are its values, by its name in the module that defines the config or one of its bases
# (reco_mini, or __main__ when reco_mini.py runs as a script), read when --help runs: a newly registered variant is
# listed unedited.
REGISTRIES = {"methods": "METHODS", "task": "TASKS", "occurrence": "OCCURRENCES", "token_ratio": "TOKEN_RATIOS"}


def flag_order(cls: type) -> list:
    """The fields of dataclass `cls` by the class that defines them: its own first, then each base's in the method
    resolution order (reco_mini.Config: its own, the loss's, the peers', the task's, then RunSettings'). The start-up
    lines list changed settings in this order; --help groups the flags by GROUPS."""
    own = [name for c in cls.__mro__ for name in vars(c).get("__annotations__", {})]
    by_name = {f.name: f for f in fields(cls)}
    return [by_name[name] for name in dict.fromkeys(own) if name in by_name]


def parse_config(cls: type, argv: list[str] | None, description: str, groups: dict = GROUPS,
                 choices: dict | None = None, prog: str = PROG):
    """`cls` (a dataclass whose fields carry a "help" metadata entry) from command-line flags.

    --help lists the flags in the order of `groups` (GROUPS: reco_mini's), each with its default once and, for a
    setting with a fixed set of values, that set (CHOICES, the registries of REGISTRIES, and `choices`). --quick
    replaces the defaults of the fields named in QUICK; flags given explicitly still win. --method M is --methods M
    (both is an error). The dataclass validates itself and raises ValueError naming the flag, which becomes a one-line
    error, `prog: error: ...`.
    """
    modules = [vars(sys.modules[c.__module__]) for c in reversed(cls.__mro__) if c.__module__ in sys.modules]
    found = {name: list(m[registry]) for m in modules for name, registry in REGISTRIES.items() if registry in m}
    choices = CHOICES | found | (choices or {})
    parser = ArgumentParser(prog=prog, description=description, usage="%(prog)s [flags]")
    types = {"int": int, "float": float, "str": str, "float | None": float}
    by_name = {f.name: f for f in fields(cls)} | {"method": None}
    for title, names in groups.items():
        group = parser.add_argument_group(title)
        for f in (by_name[name] for name in names):
            if f is None:  # --method, which only parsing knows
                group.add_argument("--method", metavar="NAME", help="one method: the same as --methods NAME")
                continue
            flag, text = "--" + f.name.replace("_", "-"), flag_help(f.metadata["help"], f.default, choices.get(f.name))
            if f.type == "bool":
                group.add_argument(flag, action="store_true", help=text)
            else:
                metavar = METAVARS.get(f.name, "NAME" if f.name in choices else METAVARS[f.type])
                group.add_argument(flag, type=types[f.type], default=f.default, metavar=metavar, help=text)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = vars(parser.parse_args(argv))
    if args["method"] and any(a.split("=", 1)[0] == "--methods" for a in argv):
        parser.error(f"--method {args['method']} and --methods {args['methods']}: give one of them")
    args["methods"] = args.pop("method") or args["methods"]
    if args["quick"]:
        args |= {k: v for k, v in QUICK.items() if args[k] == next(f.default for f in fields(cls) if f.name == k)}
    try:
        return cls(**args)
    except ValueError as e:
        fail(str(e), prog)


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

    if problem := model_problem(name_or_path):
        fail(f"--model {problem}")
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


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # a hub repository: NAME or OWNER/NAME


def model_problem(name: str) -> str:
    """Why the model `name` cannot be loaded here, as the rest of a one-line error ('' when it may load): a local path
    that does not exist, or a hub name that is not in the local cache while the hub is offline (HF_HUB_OFFLINE=1) or
    cannot be reached. Every entry point asks before it loads a model, so that a typo fails in a second, not after
    transformers' retries or its message about repo ids."""
    path = Path(name).expanduser()
    if path.is_dir():
        return ""
    if path.exists():
        return f"{name}: a file, not a model directory"
    if not HUB_ID.fullmatch(name) or ".." in name or "--" in name or name.count("/") > 1:
        return f"{name}: no such directory"
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return ""  # in the local cache: it loads offline
    if constants.HF_HUB_OFFLINE:
        return (f"{name}: no such directory; as a hub name it is not in the local cache, and the hub is offline "
                "(HF_HUB_OFFLINE=1)")
    if host := unreachable_hub(constants.ENDPOINT):
        return f"{name}: no such directory; as a hub name it is not in the local cache, and {host} cannot be reached"
    return ""


def unreachable_hub(endpoint: str, timeout_s: float = 5.0) -> str:
    """The hub's host when a connection to it fails within `timeout_s` (name lookup included), else ''. Behind a
    proxy (HTTPS_PROXY and the like) it is not probed: the proxy decides."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return ""
    url = urlparse(endpoint)
    host, port, reached = url.hostname or "", url.port or (443 if url.scheme == "https" else 80), []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            reached.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout_s)
    return "" if reached else host


def refuse_reuse(cfg) -> None:
    """Before any work: reco_mini's --out is not reused by surprise. A directory that holds the results of a different
    config (results.json), or the files of a run that did not finish, is a one-line error unless --overwrite."""
    out = Path(cfg.out)
    if cfg.overwrite or not out.is_dir():
        return
    advice = "pass --overwrite to replace them, or choose another --out"
    if (out / "results.json").is_file():
        try:
            old = json.loads((out / "results.json").read_text())["config"]
        except (ValueError, KeyError, TypeError):
            fail(f"--out {out} holds a results.json that cannot be read; {advice}")
        default = asdict(type(cfg)())
        differ = ["--" + k.replace("_", "-") for k, v in asdict(cfg).items() if k != "overwrite" and old.get(k, default[k]) != v]
        if differ:
            fail(f"--out {out} holds the results of a different config ({', '.join(differ[:4])}"
                 f"{' and more' if len(differ) > 4 else ''} {'differs' if len(differ) == 1 else 'differ'}); {advice}")
    elif logs := sorted(out.glob("*/log.jsonl")):
        fail(f"--out {out} holds the files of a run that did not finish ({logs[0].relative_to(out)}); {advice}")


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


# reco_mini's sampler (reco_mini.sample). The prompts of a batch differ in length, so the tokenizer pads them on the
# left (_, mask 0). Every prompt then ends in the same column, L - 1, and each step of the sampler appends one token to
# every row at once. Positions count from each row's first real token (A and E are 0):
#     prompt_ids [B, L]        resp [B, T]   (mask 1 up to and including the stop token)
#     _  _  A  B  C  D   ->    x  y  <eos>
#     E  F  G  H  I  J   ->    z  <eos>  _   (a finished row gets padding, mask 0)
@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, max_new_tokens, temperature, stop_ids, pad_id, gen):
    """Responses [B, T] and their mask [B, T] to left-padded prompts [B, L], token by token from softmax(logits / tau),
    a row until its first of `stop_ids`. The KV cache keeps each layer's keys and values, so each step feeds only the
    new token."""
    from transformers import DynamicCache

    stop = torch.tensor(stop_ids, device=prompt_ids.device).view(-1)
    ids, attn, kv = prompt_ids, prompt_mask, DynamicCache()
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, L]
    done = torch.zeros(prompt_ids.shape[0], dtype=torch.bool, device=prompt_ids.device)
    tokens, alive = [], []
    for _ in range(max_new_tokens):  # the last position's logits only, not [B, L, V]
        out = model(ids, attention_mask=attn, position_ids=pos, past_key_values=kv, logits_to_keep=1)
        probs = F.softmax(out.logits[:, -1].float() / temperature, dim=-1)  # [B, V]
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)  # [B]
        alive.append(~done)
        tokens.append(torch.where(done, pad_id, nxt))
        done = done | torch.isin(nxt, stop)
        if done.all():
            break
        ids, pos = tokens[-1][:, None], pos[:, -1:] + 1  # only the new token: the rest is in kv
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
    return torch.stack(tokens, 1), torch.stack(alive, 1).long()


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


def occurrence_inputs(seq_logprobs: Tensor, modes: list[str], apply: str, norm: str, *, mode: str,
                      responses: list | None, lengths: Tensor | None, advantages: Tensor | None, keys: list | None):
    """reco_mini.occurrence_weights' arguments, checked (ValueError naming the one that is wrong or missing):
    the responses as P*G tuples (given as P*G lists, problem-major, or as P lists of G) or None, and the lengths
    [P, G] in float64 (from the responses when not given) or None."""
    P, G = seq_logprobs.shape
    if mode not in modes or apply not in CHOICES["occurrence_apply"] or norm not in CHOICES["occurrence_norm"]:
        raise ValueError(f"unknown occurrence mode {mode!r}, apply {apply!r} or norm {norm!r}")
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
    --head-chunk > 0 a model whose logits are its lm head on the last hidden state."""
    if loss_cfg.kl_coef > 0 and not base_on_device:
        raise ValueError("--kl-coef > 0 needs the base model on the model's device")
    if cfg.head_chunk > 0:
        check_lm_head(model)


def step_row(step: int, rewards: Tensor, A: Tensor, w: Tensor, v_old_mean: Tensor, entropy: Tensor,
             kl_base: Tensor | None, mask: Tensor) -> dict:
    """The first fields of a reco_mini log row (docs/design.md section 2): the rewards [P, G] and the share of groups
    with a success, mean |A|, the weights' range, V_old's batch mean, the mean token entropy and, when the base was at
    hand, k3 to it [B, T], both over the response tokens (mask), and the mean response length."""
    tokens = mask.sum()
    row = {"step": step, "reward_mean": rewards.mean().item(),
           "pass_rate": (rewards.max(1).values > 0).float().mean().item(), "adv_abs_mean": A.abs().mean().item(),
           "w_min": w.min().item(), "w_mean": w.mean().item(), "w_max": w.max().item(),
           **update_shares(update_sizes(rewards, A, w)), "v_old_mean": float(v_old_mean),
           "entropy": ((entropy * mask).sum() / tokens).item()}
    if kl_base is not None:
        row["kl_base"] = ((kl_base * mask).sum() / tokens).item()
    return row | {"response_length": mask.sum(-1).mean().item()}


def update_sizes(rewards: Tensor, A: Tensor, w: Tensor) -> Tensor:
    """Where a step's update goes (issue 52): sum_i |w_i A_i| (the final advantages [P*G] times every response weight
    [P*G]) over the groups with c <= G/4 correct responses (hard), G/4 < c < 3G/4 (mid) and c >= 3G/4 (easy); rewards
    [P, G], correct: R > 0. -> [3] float64 on A's device (reco_scaled sums it over ranks)."""
    P, G = rewards.shape
    c = (rewards > 0).sum(1).to(A.device)  # [P]
    size = (w.detach().double() * A.detach().double()).abs().view(P, G).sum(1)  # [P]
    bands = (c <= G / 4, (c > G / 4) & (c < 3 * G / 4), c >= 3 * G / 4)
    return torch.stack([size[band].sum() for band in bands])


def update_shares(sizes: Tensor) -> dict[str, float | None]:
    """update_share_{hard,mid,easy}: each band's part of update_sizes' total; None when the step updates nothing."""
    total = sizes.sum().item()
    return {f"update_share_{k}": x / total if total > 0 else None for k, x in zip(("hard", "mid", "easy"), sizes.tolist())}


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
    """reco_mini's end: results.json, the Pass@k table on stdout and the Pass@k plot, with the run's details."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(format_table(results["methods"]))
    cfg, problems = results["config"], len(next(iter(results["methods"].values()))["counts"])
    eval_seed = cfg["seed"] + 1 if cfg["eval_seed"] < 0 else cfg["eval_seed"]
    caption = (f"task {cfg['task']}, model {cfg['model'] or 'the tiny one built here'}: {problems} held-out problems, "
               f"n = {cfg['n_eval']} samples each at temperature {cfg['temperature']:g}; seed {cfg['seed']} "
               f"(evaluation samples: seed {eval_seed})")
    plot_pass_at_k({m: {"held-out": res} for m, res in results["methods"].items()}, out / "pass_at_k.png",
                   caption=caption)
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


def plot_pass_at_k(runs: dict[str, dict[str, dict]], path: str | Path, title: str = "Pass@k", caption: str = "") -> Path:
    """Pass@k against k (log2 axis): one panel per benchmark (plus the average), one line per run; at least 900 px
    wide, one title (a single panel's name joins it), and `caption` (the run's details: seed, problems, n) below.

    runs: run name -> panel name -> {"pass_at_k": {k: value}, optional "n_problems"}.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(b for summary in runs.values() for b in summary))  # first-seen order
    panels = [b for b in panels if b != "average"] + (["average"] if len(panels) > 2 else [])
    cols, rows = min(3, len(panels)), math.ceil(len(panels) / 3)
    below = 0.5 if caption else 0.0  # inches for the caption
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.5, 4.2 * cols), 3.6 * rows + below), squeeze=False)
    for ax, bench in zip(axes.flat, panels):
        ks: set[int] = set()
        for name, summary in runs.items():
            if bench in summary:
                curve = summary[bench]["pass_at_k"]
                ks |= {int(k) for k in curve}
                ax.plot([int(k) for k in curve], list(curve.values()), marker="o", ms=3, label=name)
        n_problems = next((s[bench].get("n_problems") for s in runs.values() if bench in s), None)
        name = ("average over benchmarks" if bench == "average"
                else bench + (f" ({n_problems} problems)" if n_problems else ""))
        ax.set_title(f"{title}, {name}" if len(panels) == 1 else name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
        ax.minorticks_off()
        ax.set(xlabel="k (samples)", ylabel="Pass@k", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if len(panels) > 1:
        fig.suptitle(title)
    if caption:
        fig.text(0.5, 0.02, caption, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, below / fig.get_figheight(), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class tqdm(_tqdm_auto):  # noqa: N801 (tqdm.auto.tqdm's drop-in)
    """tqdm.auto's progress bar; where stderr is not a terminal (a log file, a pipe) a bar writes nothing for its
    first minute and then a line at most once a minute (LOG_INTERVAL_S), each a line of its own, where tqdm redraws
    every 0.1 s with carriage returns (29 KB of bars in the log of a short run)."""

    def __init__(self, *args, **kwargs):
        stream = kwargs.get("file") or sys.stderr
        if not getattr(stream, "isatty", lambda: False)():
            kwargs |= {"file": _Lines(stream), "mininterval": LOG_INTERVAL_S, "maxinterval": LOG_INTERVAL_S,
                       "delay": LOG_INTERVAL_S}
        super().__init__(*args, **kwargs)


LOG_INTERVAL_S = 60.0


class _Lines:
    """A text stream for tqdm that writes each redraw of a bar as a line of its own and drops the blank redraws
    that clear one (and the cursor moves of nested bars)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").replace("\x1b[A", "").rstrip()
        if line.strip():
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
