"""reco/cli.py: reco_mini's command line and the checks of its settings, kept out of the file that teaches the method.

RunSettings (the plumbing's flags), a flag and its help for every config field, by group (GROUPS), with the registries'
values; the allowed values of every setting (LOSS_NUMBERS, RUN_NUMBERS, CHOICES), checked before any work (ConfigError
names the flag); one-line errors with exit code 2 (fail, run_entry_point); the parser every command shares
(ArgumentParser); --quick's budget (QUICK); the run directory's reuse (refuse_reuse); the registry decorator
(register); the checks of occurrence_weights' settings (check_occurrence) and --ks's default (default_ks).
Nothing here imports reco_mini: it is handed what it needs.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import NoReturn

import torch
from torch import Tensor

from reco.data.math import missing_file
from reco.log import check_sinks

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
# The numeric settings of reco_mini.LossConfig and of the rest of reco_mini.Config (with reco.tasks.TaskSettings' and
# RunSettings'): each has its rule, so a new one fails tests/test_validation.py until it gets one (the peers' settings:
# reco.peers.PEER_NUMBERS).
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
    # reco.tasks.TaskSettings' (the problems and the tiny base)
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
    "lora_rank": Allowed(0),  # 0 = off: the full model trains
    "lora_alpha": POSITIVE,
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
    lora_rank: int = opt(0, "train LoRA adapters of this rank on the frozen model (0 = full fine-tune)")
    lora_alpha: float = opt(32.0, "LoRA's alpha: the adapters add (alpha / rank) B A to each target's weight")
    lora_targets: str = opt("all-linear", "modules that get adapters: all-linear (every attention and MLP projection) "
                            "or comma-separated module names (q_proj,v_proj)")
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
        ("log", not check_sinks(cfg.log), check_sinks(cfg.log)),
        ("lora_rank", cfg.lora_rank == 0 or bool(cfg.model),
         f"needs --model (a Hugging Face model); the tiny model of --task {cfg.task} trains in full"),
        ("lora_targets", bool(LORA_TARGETS.fullmatch(cfg.lora_targets)),
         f"must be all-linear or comma-separated module names, got {cfg.lora_targets!r}"),
    ]


LORA_TARGETS = re.compile(r"all-linear|\w+(,\w+)*")  # --lora-targets; the names are checked on the model (reco.hf)


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
            "gradient_checkpointing", "lora_rank", "lora_alpha", "lora_targets"),
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


# --occurrence's rarely used values (docs/design.md §3.2), each m_i with reco_mini.OCCURRENCES' signature: reco_mini
# files them there, in the order of the flag's help. They stay out of reco_mini.py to keep it within its 500 lines.
def copies_token_mean(lp: Tensor, lengths: Tensor | None, responses, keys) -> Tensor:
    """m_i with p_i = exp(mean_t log pi_old(y_it)), the geometric-mean token probability; lengths [P, G] (from the
    responses where not given)."""
    P, G = lp.shape
    if lengths is None:
        lengths = torch.tensor([[len(y) for y in row] for row in group_rows(responses, P, G, "token-mean")],
                               device=lp.device)
    return 1.0 + (G - 1) * (lp / lengths.double().clamp(min=1)).exp()


def copies_count(lp: Tensor, lengths, responses: list | None, keys=None, mode: str = "count") -> Tensor:
    """m_i = c_i, the copies of y_i in its group: identical token ids (the sequences of p_i)."""
    rows = group_rows(responses, *lp.shape, mode)
    counts = [[row.count(y) for y in row] for row in rows]
    return torch.tensor(counts, dtype=torch.float64, device=lp.device)


def copies_canonical(lp: Tensor, lengths, responses, keys: list | None) -> Tensor:
    """m_i = the responses of y_i's group with its canonical key (the task's canonical_keys)."""
    return copies_count(lp, lengths, None if keys is None else [(k,) for k in keys], mode="canonical")


def check_occurrence(seq_logprobs: Tensor, modes: list[str], mode: str, apply: str, norm: str,
                     advantages: Tensor | None) -> None:
    """reco_mini.occurrence_weights' settings: ValueError naming the one that is wrong or missing."""
    if mode not in modes or apply not in CHOICES["occurrence_apply"] or norm not in CHOICES["occurrence_norm"]:
        raise ValueError(f"unknown occurrence mode {mode!r}, apply {apply!r} or norm {norm!r}")
    if apply == "positive" and advantages is None:
        raise ValueError("apply='positive' needs advantages")


def group_rows(responses: list | None, P: int, G: int, mode: str) -> list[list[tuple]]:
    """The responses (P*G, problem-major, or P lists of G) as P rows of G tuples; ValueError if missing or wrong."""
    if responses is None:
        raise ValueError(f"occurrence mode {mode!r} needs responses (or lengths for token-mean, keys for canonical)")
    groups = responses if len(responses) == P != P * G else [responses]  # P lists of G, or one list
    flat = [tuple(r) for group in groups for r in group]
    if len(flat) != P * G:
        raise ValueError(f"responses has {len(flat)} entries, expected P*G = {P * G}")
    return [flat[i: i + G] for i in range(0, P * G, G)]


def default_ks(n: int) -> list[int]:
    """--ks's default, the k of a Pass@k curve from n samples: 1, 2, 4, ... up to n, and n itself."""
    return sorted({2 ** i for i in range(n.bit_length()) if 2 ** i <= n} | {n})
