"""reco_scaled's trainer against TRL's GRPOTrainer with ReCo (reco_scaled.integrations.trl): one RL step each, on CPU.

    python benchmarks/trl_vs_reco_scaled.py                 # 5 measured RL steps each, after one warm-up step
    python benchmarks/trl_vs_reco_scaled.py --steps 2       # quicker
    python benchmarks/trl_vs_reco_scaled.py --smoke         # the whole path at toy sizes, for CI: no measurement

Both train method reco on the same random tiny Qwen2 (reco.tasks.countdown's character tokenizer, hidden 64, 2 layers
as in reco_scaled/configs/tiny-cpu.yaml), on the same Countdown prompts and reward, with the same batch (16 prompts x
G = 8), response length (at most 12 tokens, sampled at temperature 1 with transformers), and update: two passes over
the rollout batch in two mini-batches of 64 rows (4 AdamW steps, lr 2e-4, clip 1), each mini-batch in one
forward/backward. In TRL's terms: per_device_train_batch_size 64, steps_per_generation 2, num_iterations 2.

Each trainer runs in its own subprocess, with one CPU thread (reco_scaled's default on CPU). Time per RL step is
the mean over the measured steps (an RL step of TRL is 4 of its optimizer steps), as wall time and as the process's
CPU time, which a loaded machine disturbs far less. The phase columns are CPU seconds per RL step, exclusive:
rollout (generation and its decoding), reward, old statistics (no-grad forwards for log pi_old, V_old and the
response weights), update (forward/backward and optimizer steps), and the rest (advantages, batching and weight sync
for reco_scaled; gradient clipping, data loading and Trainer bookkeeping for TRL). Peak memory is the process's peak
resident set (VmHWM) during the measured steps, and its growth above the resident set before the first of them
(reset through /proc/self/clear_refs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# prompts per RL step, G, most new tokens, rows per mini-batch (two mini-batches a pass)
SIZES = {"full": dict(prompts=16, G=8, max_new=12, mini=64), "smoke": dict(prompts=2, G=4, max_new=4, mini=4)}
LR = 2e-4
PHASES = ["rollout", "reward", "old stats", "update"]


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> int:
    """Reset VmHWM to the current resident set; return that resident set in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _kib("VmRSS")


def build_model(path: Path, hidden: int, layers: int) -> None:
    import torch

    from reco.tasks.countdown import char_tokenizer, tiny_model

    torch.manual_seed(0)
    tok = char_tokenizer()
    tiny_model(tok, hidden, layers).save_pretrained(path)
    tok.save_pretrained(path)


def run_reco_scaled(model_dir: str, steps: int, out: str, size: dict) -> dict:
    from reco_scaled import distributed
    from reco_scaled.config import load_config
    from reco_scaled.trainer import Trainer

    cfg = load_config("tiny-cpu", [
        f"model.path={model_dir}", "algo.method=reco", f"train.steps={steps + 1}",
        f"train.prompts_per_step={size['prompts']}", f"rollout.group_size={size['G']}",
        f"rollout.max_new_tokens={size['max_new']}", "train.epochs=2", "train.minibatches=2",
        f"train.micro_batch_size={size['mini']}", f"train.lr={LR}", "train.grad_clip=1.0", f"out={out}",
        "checkpoint.every=0", "checkpoint.resume=never"])
    trainer = Trainer(cfg, distributed.init())
    clock = PhaseClock(PHASES)
    for obj, method, phase in ((trainer.engine, "generate", "rollout"), (trainer.task, "rewards", "reward"),
                               (trainer, "_forward_no_grad", "old stats"), (trainer, "_update", "update")):
        setattr(obj, method, clock.timed(getattr(obj, method), phase))
    trainer.train_step()  # warm-up
    clock.reset()
    base, wall, cpu, rows = _reset_peak(), time.perf_counter(), time.process_time(), []
    for _ in range(steps):
        rows.append(trainer.train_step())
    return clock.result(steps, time.perf_counter() - wall, time.process_time() - cpu, base,
                        statistics.mean(r["response_length"] for r in rows))


def run_trl(model_dir: str, steps: int, out: str, size: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from reco.tasks import TASKS
    from reco.tasks.countdown import make_splits
    from reco_scaled.config import load_config
    from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer
    from reco_scaled.model import mini_config

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    problems = make_splits(mini_config(load_config("tiny-cpu")))["train"]
    countdown = TASKS["countdown"]
    data = Dataset.from_list([{"prompt": countdown.prompt(p, tok), "index": i} for i, p in enumerate(problems)])

    def countdown_reward(completions, index, **kwargs):
        return [countdown.reward(problems[i], c) for c, i in zip(completions, index)]

    per_rl_step = 4  # optimizer steps: num_iterations x steps_per_generation
    args = ReCoGRPOConfig(
        output_dir=out, method="reco", num_generations=size["G"], per_device_train_batch_size=size["mini"],
        steps_per_generation=2, num_iterations=2, max_completion_length=size["max_new"], learning_rate=LR,
        lr_scheduler_type="constant",
        max_grad_norm=1.0, max_steps=per_rl_step * (steps + 1), bf16=False, use_cpu=True, gradient_checkpointing=False,
        report_to="none", save_strategy="no", logging_steps=per_rl_step, disable_tqdm=True, seed=0)
    trainer = ReCoGRPOTrainer(model=model_dir, reward_funcs=countdown_reward, args=args, train_dataset=data,
                              processing_class=tok)
    methods = {"_generate_and_score_completions": "rollout", "_generate": "rollout", "_calculate_rewards": "reward",
               "_reco_inputs": "old stats", "_get_per_token_logps_and_entropies": "old stats", "training_step": "update"}
    clock = PhaseClock(PHASES)
    for method, phase in methods.items():  # training_step calls _prepare_inputs, which generates: exclusive times
        setattr(trainer, method, clock.timed(getattr(trainer, method), phase))
    marks: dict[str, float] = {}

    class Marks(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == per_rl_step:  # after the warm-up RL step
                clock.reset()
                marks.update(base=_reset_peak(), wall=time.perf_counter(), cpu=time.process_time())

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            marks["opt"] = time.process_time()

        def on_optimizer_step(self, args, state, control, **kwargs):
            clock.spent["update"] += time.process_time() - marks["opt"]

    trainer.add_callback(Marks())
    trainer.train()
    lengths = [r["completions/mean_length"] for r in trainer.state.log_history[1:] if "completions/mean_length" in r]
    return clock.result(steps, time.perf_counter() - marks["wall"], time.process_time() - marks["cpu"], marks["base"],
                        statistics.mean(lengths))


class PhaseClock:
    """CPU seconds per phase, exclusive: a timed call inside another pauses the outer one."""

    def __init__(self, names: list[str]) -> None:
        self.spent = dict.fromkeys(names, 0.0)
        self.stack: list[list] = []  # [phase, start of its running interval]

    def reset(self) -> None:
        self.spent = dict.fromkeys(self.spent, 0.0)

    def timed(self, fn, name: str):
        def wrapper(*args, **kwargs):
            now = time.process_time()
            if self.stack:
                self.spent[self.stack[-1][0]] += now - self.stack[-1][1]
            self.stack.append([name, now])
            try:
                return fn(*args, **kwargs)
            finally:
                now = time.process_time()
                self.spent[name] += now - self.stack.pop()[1]
                if self.stack:
                    self.stack[-1][1] = now
        return wrapper

    def result(self, steps: int, wall: float, cpu: float, rss_base_kib: int, response_length: float) -> dict:
        phases = {k: v / steps for k, v in self.spent.items()}
        return {"wall_s": wall / steps, "cpu_s": cpu / steps, "phases": phases | {"rest": cpu / steps - sum(phases.values())},
                "rss_base_kib": rss_base_kib, "rss_peak_kib": _kib("VmHWM"), "response_length": response_length}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5, help="measured RL steps per trainer (after one warm-up step)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="the whole path at toy sizes (1 step, 2 prompts x G 4, 4 "
                   "new tokens, hidden 16, 1 layer): checks that it runs, measures nothing")
    p.add_argument("--run", choices=["reco_scaled", "trl"], help=argparse.SUPPRESS)  # a child process
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.hidden, args.layers = 1, 16, 1
    size = SIZES["smoke" if args.smoke else "full"]
    if args.run:
        with tempfile.TemporaryDirectory() as out:
            result = (run_reco_scaled if args.run == "reco_scaled" else run_trl)(args.model_dir, args.steps, out, size)
        print("RESULT " + json.dumps(result))
        return

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_model(model_dir, args.hidden, args.layers)
        results = {}
        for name in ("reco_scaled", "trl"):
            cmd = [sys.executable, __file__, "--run", name, "--model-dir", str(model_dir), "--steps", str(args.steps),
                   *(["--smoke"] if args.smoke else [])]
            env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                sys.exit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            results[name] = json.loads(line[0][len("RESULT "):])
    print(table(results, args, size))


def table(results: dict, args: argparse.Namespace, size: dict) -> str:
    mib = 1 / 1024
    rows = ["| trainer | wall s per RL step | CPU s per RL step | rollout | reward | old stats | update | rest "
            "| peak RSS (MiB) | RSS growth (MiB) | mean response length |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        phases = " | ".join(f"{r['phases'][k]:.2f}" for k in ("rollout", "reward", "old stats", "update", "rest"))
        growth = (r["rss_peak_kib"] - r["rss_base_kib"]) * mib
        rows.append(f"| {'reco_scaled' if name == 'reco_scaled' else 'TRL + ReCo'} | {r['wall_s']:.2f} "
                    f"| {r['cpu_s']:.2f} | {phases} | {r['rss_peak_kib'] * mib:.0f} | {growth:.0f} | "
                    f"{r['response_length']:.1f} |")
    a, b = results["reco_scaled"], results["trl"]
    ratios = {"wall time per RL step": a["wall_s"] / b["wall_s"],
              "CPU time per RL step": a["cpu_s"] / b["cpu_s"], "peak RSS": a["rss_peak_kib"] / b["rss_peak_kib"],
              "RSS growth": (a["rss_peak_kib"] - a["rss_base_kib"]) / max(b["rss_peak_kib"] - b["rss_base_kib"], 1)}
    return "\n".join(rows + ["", "reco_scaled / TRL+ReCo: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()),
                             f"({args.steps} measured RL steps, hidden {args.hidden}, {args.layers} layers, "
                             f"{size['prompts']} prompts x G {size['G']}, <= {size['max_new']} new tokens"
                             + (", --smoke: not a measurement)" if args.smoke else ")")])


if __name__ == "__main__":
    main()
