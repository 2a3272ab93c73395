"""Run configuration: one dataclass tree, read from YAML plus `section.key=value` overrides.

Every error names the offending key and is raised as ConfigError, which the entry point turns into
exit code 2. `batch_plan` checks and describes how a step's rollouts split over ranks, mini-batches
and micro-batches; rank 0 prints it at start-up.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reco import cli, log
from reco.cli import POSITIVE, Allowed
from reco.peers import PeerSettings
from reco_mini import METHODS, LossConfig, loss_config
from reco_scaled.rollout.factory import ENGINES


class ConfigError(ValueError):
    """A missing, unknown or invalid config key (the message names it)."""


@dataclass
class ModelConfig:
    path: str = ""  # HF model directory or hub name; "" = reco_mini's tiny countdown model (SFT once, cached)
    precision: str = "bf16"  # bf16 | fp32; bf16: on GPU, bf16 compute over fp32 master weights (CPU always runs fp32)
    gradient_checkpointing: bool = False
    lora_rank: int = 0  # > 0: train LoRA adapters of this rank (peft) on the frozen base; ddp and rollout.engine hf only
    lora_alpha: float = 32.0  # the adapters add (alpha / rank) B A to each target's weight
    lora_targets: str = "all-linear"  # all-linear (every attention and MLP projection) or comma-separated module names


@dataclass
class CountdownConfig:  # task: countdown; the tiny base model is built when model.path is ""
    n_train: int = 256
    n_test: int = 32
    hidden: int = 64
    layers: int = 2
    sft_steps: int = 150
    sft_batch: int = 64
    sft_lr: float = 3e-3


@dataclass
class DataConfig:  # task: math or code
    train: str = ""  # JSONL/parquet file, dataset directory or hub name NAME[:CONFIG][:SPLIT] (reco.data.math, reco.data.code)
    problem_key: str = ""  # math: "" = the known layouts (reco.data.math.PROBLEM_FIELDS)
    answer_key: str = ""  # math: "" = the known layouts (reco.data.math.ANSWER_FIELDS)
    template: str = "qwen-boxed"  # qwen-boxed | chat | plain; code: plain (completion prompts) or chat (a fenced block)
    max_prompt_tokens: int = 1024  # longer prompts are dropped at load time


@dataclass
class AlgoConfig(LossConfig):  # reco_mini's loss settings (their help: python reco_mini.py --help) and the method
    method: str = "reco"


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf | vllm
    group_size: int = 8  # G
    temperature: float = 1.0
    max_new_tokens: int = 12
    engine_batch_size: int = 256  # hf: rows generated at once
    # vllm only
    gpu_memory_utilization: float = 0.5
    tensor_parallel_size: int = 1
    max_model_len: int = 4096
    enable_sleep_mode: bool = True
    sleep_level: int = 2  # 2: drop weights and KV cache while training (weights re-synced after it); 1: keep weights in host RAM


@dataclass
class TrainConfig:
    steps: int = 0
    prompts_per_step: int = 0  # global, over all ranks
    epochs: int = 1  # passes over each rollout batch
    minibatches: int = 1  # optimizer steps per pass
    micro_batch_size: int = 8  # rollouts per rank per forward/backward
    lr: float = 1e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0  # linear warmup (RL steps), then constant
    grad_clip: float = 1.0
    parallel: str = "ddp"  # ddp | fsdp2
    fused_kernel: bool = False  # reco_scaled.kernels.token_stats_linear instead of full logits
    # minutes a collective waits for the other ranks before the job fails (rank 0 alone loads and exports the model)
    dist_timeout_minutes: float = 60.0
    loggers: str = ""  # also log every step to: tensorboard, wandb (comma-separated; log.jsonl is always written)


@dataclass
class CheckpointConfig:
    every: int = 0  # save every N steps; the last step is always saved
    resume: str = "auto"  # auto (latest under out/checkpoints) | never | <checkpoint dir>
    keep: int = 2  # newest checkpoints kept


@dataclass
class RunConfig:
    name: str = ""
    out: str = ""  # default runs/<name>
    seed: int = 0
    task: str = "countdown"  # countdown | math | code
    model: ModelConfig = field(default_factory=ModelConfig)
    countdown: CountdownConfig = field(default_factory=CountdownConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.name}")

    @property
    def loss(self) -> LossConfig:
        """The loss settings of algo.method with the algo keys set on top (reco_mini.loss_config)."""
        return loss_config(self.algo, self.algo.method)


# The peers' settings (experiments/lab.py's; the positive-control study): not keys of reco_scaled, and said so.
PEERS = {f"algo.{f.name}" for f in dataclasses.fields(PeerSettings)}
PEER_NOTE = ": a peer's setting, which only experiments/lab.py's loop applies (the positive-control study)"

# Keys a config file must set: they define the run and have no sensible default.
REQUIRED = ("name", "task", "model.path", "algo.method", "rollout.engine", "rollout.group_size",
            "train.steps", "train.prompts_per_step")

CHOICES = {
    "task": ("countdown", "math", "code"),
    "model.precision": ("bf16", "fp32"),
    "data.template": ("qwen-boxed", "chat", "plain"),
    "algo.method": tuple(METHODS),  # the other algo keys are checked by reco_mini.LossConfig
    "rollout.engine": ENGINES,
    "rollout.sleep_level": (1, 2),
    "train.parallel": ("ddp", "fsdp2"),
}
# Every numeric key but algo's (reco_mini.LossConfig checks those) and rollout.sleep_level (a choice): a new one fails
# tests/test_validation.py until it gets its rule here.
NUMBERS = {
    "seed": Allowed(0),
    "countdown.n_train": Allowed(1),
    "countdown.n_test": Allowed(1),
    "countdown.hidden": cli.RUN_NUMBERS["hidden"],
    "countdown.layers": Allowed(1),
    "countdown.sft_steps": Allowed(1),
    "countdown.sft_batch": Allowed(1),
    "countdown.sft_lr": POSITIVE,
    "data.max_prompt_tokens": Allowed(1),
    "rollout.group_size": Allowed(2),  # group-relative advantages need two responses
    "rollout.temperature": POSITIVE,
    "rollout.max_new_tokens": Allowed(1),
    "rollout.engine_batch_size": Allowed(1),
    "rollout.gpu_memory_utilization": Allowed(0, 1, open_low=True),
    "rollout.tensor_parallel_size": Allowed(1),
    "rollout.max_model_len": Allowed(1),
    "train.steps": Allowed(1),
    "train.prompts_per_step": Allowed(1),
    "train.epochs": Allowed(1),
    "train.minibatches": Allowed(1),
    "train.micro_batch_size": Allowed(1),
    "train.lr": POSITIVE,
    "train.weight_decay": Allowed(0),
    "train.warmup_steps": Allowed(0),
    "train.grad_clip": POSITIVE,  # the norm the gradient is clipped to: 0 would zero every update
    "train.dist_timeout_minutes": POSITIVE,
    "checkpoint.every": Allowed(0),  # 0 = the last step only
    "checkpoint.keep": Allowed(1),
    "model.lora_rank": Allowed(0),  # 0 = off: the full model trains
    "model.lora_alpha": POSITIVE,
}


CONFIGS = Path(__file__).resolve().parent / "configs"  # the shipped configs, installed as package data (pyproject.toml)


def config_path(name: str | Path) -> Path:
    """A config's file: `name` itself when it exists, else the shipped config of that name (tiny-cpu, or its path in
    the repository, reco_scaled/configs/tiny-cpu.yaml, which works outside the checkout too); raises ConfigError."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = CONFIGS / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
    if shipped.is_file() and path.parent in (Path("."), Path("reco_scaled/configs")):
        return shipped
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml")))
    raise ConfigError(f"config file {name} not found; the shipped configs, by name: {names}")


def load_config(path: str | Path, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML config (a file, or a shipped config by name: config_path), apply `dotted.key=value` overrides,
    check it; raises ConfigError."""
    path = config_path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    flat = flatten(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        flat[key.strip()] = _parse_value(value)
    known = _fields(RunConfig)
    sections = {k.split(".")[0] for k in known if "." in k}
    for key in flat:
        if key in sections:
            raise ConfigError(f"config key '{key}' is a section: set its keys, e.g. "
                              f"'{next(k for k in known if k.startswith(key + '.'))}'")
        if key not in known:
            raise ConfigError(f"unknown config key '{key}'" + (PEER_NOTE if key in PEERS else _suggest(key, known)))
    for key in REQUIRED:
        if key not in flat:
            raise ConfigError(f"missing config key '{key}' in {path}")
    cfg = RunConfig()
    for key, value in flat.items():
        *sections, name = key.split(".")
        target = cfg
        for s in sections:
            target = getattr(target, s)
        setattr(target, name, _coerce(key, value, known[key]))
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    """Value checks that do not depend on the world size."""
    for key, choices in CHOICES.items():
        if (value := get(cfg, key)) not in choices:
            raise ConfigError(f"config key '{key}' must be one of {list(choices)}, got {value!r}")
    for key, allowed in NUMBERS.items():
        if not (check := allowed.check(key, get(cfg, key)))[1]:
            raise ConfigError(f"config key '{key}' {check[2]}")
    for name, ok, message in LossConfig.checks(cfg.algo):
        if not ok:
            raise ConfigError(f"config key 'algo.{name}' {message}")
    if cfg.algo.token_ratio == "simko":  # filed in reco_mini's registry only where experiments/lab.py is imported
        raise ConfigError("config key 'algo.token_ratio' simko is not supported by reco_scaled: the peers' methods run "
                          "in experiments/lab.py's loop only (the positive-control study)")
    if cfg.algo.occurrence == "canonical":
        raise ConfigError("config key 'algo.occurrence' canonical is not supported by reco_scaled yet: its "
                          "canonical keys come from reco_mini's tasks only (countdown's response_key); use count")
    if cfg.model.lora_rank:
        lora_checks(cfg)
    if problem := log.check_sinks(cfg.train.loggers):
        raise ConfigError(f"config key 'train.loggers' {problem}")
    if not cfg.name:
        raise ConfigError("config key 'name' must not be empty")
    if cfg.task in ("math", "code") and not (cfg.model.path and cfg.data.train):
        raise ConfigError(f"task: {cfg.task} needs config keys 'model.path' and 'data.train'")
    if cfg.task == "code" and cfg.data.template not in ("plain", "chat"):
        raise ConfigError("task: code needs config key 'data.template' plain (completion prompts, for a base model) or "
                          f"chat (a fenced ```python block, for an instruct model), got {cfg.data.template!r}")
    if cfg.task == "countdown" and cfg.data.train:
        raise ConfigError("config key 'data.train' is for tasks math and code; countdown problems come from reco_mini")


def lora_checks(cfg: RunConfig) -> None:
    """model.lora_rank > 0: the combinations that cannot take adapters yet, each refused in one line."""
    if not cli.LORA_TARGETS.fullmatch(cfg.model.lora_targets):
        raise ConfigError("config key 'model.lora_targets' must be all-linear or comma-separated module names, got "
                          f"{cfg.model.lora_targets!r}")
    if "lm_head" in cfg.model.lora_targets.split(","):
        raise ConfigError("config key 'model.lora_targets' lm_head: the lm head is applied by its weight "
                          "(PolicyModel, reco_scaled.loss.token_stats), which would leave its adapters out")
    if cfg.train.parallel == "fsdp2":
        raise ConfigError("config key 'model.lora_rank' needs train.parallel ddp: under fsdp2 the frozen base and the "
                          "adapters would need separate shards and a checkpoint of the adapters alone, not written yet")
    if cfg.rollout.engine == "vllm":
        raise ConfigError("config key 'model.lora_rank' needs rollout.engine hf: the vLLM engine syncs a full model's "
                          "weights and has no path for adapters (vLLM's LoRA serving) yet")


def get(cfg: RunConfig, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def batch_plan(cfg: RunConfig, world_size: int) -> dict[str, int]:
    """How one RL step's rollouts split over ranks, mini-batches and micro-batches.

    Raises ConfigError, naming the key to change, when something does not divide evenly.
    """
    t, G = cfg.train, cfg.rollout.group_size
    if t.prompts_per_step % world_size:
        raise ConfigError(f"config key 'train.prompts_per_step' ({t.prompts_per_step}) must be divisible by "
                          f"the world size ({world_size})")
    per_rank = t.prompts_per_step // world_size * G
    if per_rank % t.minibatches:
        raise ConfigError(f"config key 'train.minibatches' ({t.minibatches}) must divide the rollouts per rank "
                          f"({per_rank} = {t.prompts_per_step}/{world_size} prompts x G={G})")
    mini_per_rank = per_rank // t.minibatches
    if mini_per_rank % t.micro_batch_size:
        raise ConfigError(f"config key 'train.micro_batch_size' ({t.micro_batch_size}) must divide the rollouts "
                          f"per rank in a mini-batch ({mini_per_rank})")
    return {"world_size": world_size, "prompts": t.prompts_per_step, "group_size": G,
            "rollouts": t.prompts_per_step * G, "prompts_per_rank": t.prompts_per_step // world_size,
            "rollouts_per_rank": per_rank, "minibatch_rollouts": t.prompts_per_step * G // t.minibatches,
            "minibatch_rollouts_per_rank": mini_per_rank, "micro_batches_per_rank": mini_per_rank // t.micro_batch_size,
            "optimizer_steps": t.epochs * t.minibatches}


def describe(cfg: RunConfig, plan: dict[str, int]) -> str:
    """The resolved config (YAML) and the batch arithmetic, as rank 0 prints them."""
    p, t = plan, cfg.train
    max_prompt = cfg.data.max_prompt_tokens if cfg.task in ("math", "code") else "~16"
    lines = [
        yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False).rstrip(),
        "batch arithmetic:",
        f"  {p['prompts']} prompts/step x G={p['group_size']} = {p['rollouts']} rollouts "
        f"({p['prompts_per_rank']} prompts = {p['rollouts_per_rank']} rollouts per rank x {p['world_size']} ranks)",
        f"  {t.epochs} epoch(s) x {t.minibatches} mini-batch(es) of {p['minibatch_rollouts']} rollouts "
        f"= {p['optimizer_steps']} optimizer step(s) per RL step",
        f"  per rank and mini-batch: {p['minibatch_rollouts_per_rank']} rollouts = {p['micro_batches_per_rank']} "
        f"micro-batch(es) of {t.micro_batch_size} (gradient accumulation)",
        f"  tokens per rollout <= {max_prompt} prompt + {cfg.rollout.max_new_tokens} response",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- helpers

def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}"""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _parse_value(text: str) -> Any:
    """An override's value as YAML would read it (3 -> int, true -> bool); text that is not YAML stays text."""
    if not text.strip():
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _fields(cls: type, prefix: str = "") -> dict[str, type]:
    """Dotted key -> type of every leaf field."""
    out = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.update(_fields(tp, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = tp
    return out


def _coerce(key: str, value: Any, tp: type) -> Any:
    if typing.get_origin(tp) is types.UnionType:  # float | None: null is None, anything else the float
        return None if value is None else _coerce(key, value, typing.get_args(tp)[0])
    if tp is float and isinstance(value, str):  # YAML 1.1 reads 1e-6 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and value is None:
        return ""
    ok = isinstance(value, bool) if tp is bool else isinstance(value, tp) and not isinstance(value, bool)
    if not ok:
        raise ConfigError(f"config key '{key}' must be a {tp.__name__}, got {value!r}")
    return value


def _suggest(key: str, known: dict) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
