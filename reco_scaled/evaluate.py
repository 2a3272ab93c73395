"""Pass@k evaluation on math and code benchmarks: sample n responses per problem, grade them, report Pass@k curves.

    python -m reco_scaled.evaluate --model runs/reco/final --benchmarks math500,aime24,amc23,minerva,olympiadbench \\
        --n 256 --temperature 0.6 --top-p 0.95 --engine vllm --out runs/eval/reco
    python -m reco_scaled.evaluate --model Qwen/Qwen2.5-Coder-1.5B --benchmarks humaneval,mbpp --template plain \\
        --n 64 --temperature 0.8 --max-new-tokens 512 --out runs/eval/coder
    python -m reco_scaled.evaluate --compare base=runs/eval/base/counts.jsonl grpo=runs/eval/grpo/counts.jsonl \\
        reco=runs/eval/reco/counts.jsonl --out runs/eval/compare

Per problem it writes one line {benchmark, id, n, c, distinct_correct} to ``<out>/counts.jsonl`` as soon as the problem
is graded, so Pass@k for any k <= n can be recomputed later (``--from-counts``, ``summarize``) and an interrupted run
resumes where it stopped: problems already in counts.jsonl are not sampled again. Grading runs in threads
(``reco.rewards.math_grader.grade_group``, which grades a problem's responses at once on the grader's time-bounded
worker processes) while the engine samples the next problems. The Pass@k estimator is ``reco_mini.pass_at_k``.

Code benchmarks (humaneval, mbpp: reco_scaled.data) are prompted and graded by reco_mini's code tasks (reco.tasks):
``--template plain`` gives a base model HumanEval's completion prompt and cuts the program at the stop sequences,
``--template chat`` asks an instruct model for a fenced ```python block; each problem's programs run at once in
the code reward's sandbox, and distinct_correct counts the correct programs that differ beyond formatting.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from reco.cli import Allowed, ArgumentParser, command_name, flag_help
from reco.hf import model_problem
from reco.log import tqdm
from reco.report import format_table, plot_pass_at_k
from reco.rewards.math_grader import grade_group
from reco.tasks import TASKS
from reco.tasks.code import program_key
from reco_mini import default_ks, pass_at_k
from reco_scaled.data import BENCHMARKS, TEMPLATES, DataError, build_prompt, load_benchmark, load_problems, parse_source
from reco_scaled.rollout.base import RolloutEngine
from reco_scaled.rollout.factory import ENGINES, make_engine

# (problems, n, seed) -> n response texts per problem
Sampler = Callable[[list[dict], int, int], list[list[str]]]
COUNT_FIELDS = ("benchmark", "id", "n", "c", "distinct_correct")
# Settings that change what is sampled: a resumed run must match them.
SAMPLING_KEYS = ("model", "n", "temperature", "top_p", "max_new_tokens", "template", "seed")


@dataclass
class EvalConfig:
    model: str | None = None  # HF model name or local path; omit to only report existing counts
    benchmarks: str = ""  # comma-separated registry names: math500,aime24,amc23,minerva,olympiadbench,humaneval,mbpp
    files: list[str] = field(default_factory=list)  # extra benchmarks as name=source (file, dataset dir, hub name)
    data_dir: str = "data"
    n: int = 256
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 3072
    template: str = "qwen-boxed"  # code benchmarks: plain (completion) or chat (a fenced block)
    engine: str = "hf"
    out: str | None = None  # default runs/eval/<model dir name>
    seed: int = 0
    limit: int = 0  # first N problems of each benchmark (0 = all)
    prompts_per_call: int = 8  # problems per engine.generate call (n samples each)
    hf_batch_size: int = 64  # HF engine: sequences decoded together
    workers: int = 4  # problems graded at once, in threads (0 = in the loop)
    ks: str = ""  # comma-separated k for the tables; default 1, 2, 4, ..., n
    from_counts: list[str] = field(default_factory=list)  # [name=]counts.jsonl to report
    compare: list[str] = field(default_factory=list)  # name=counts.jsonl runs to overlay on the plot
    max_model_len: int = 0  # vLLM: prompt + response tokens (0 = max_new_tokens + 1024)
    gpu_memory_utilization: float = 0.85  # vLLM
    tensor_parallel_size: int = 1  # vLLM


# -- grading and counts -----------------------------------------------------------------------------

def read_counts(path: str | Path) -> list[dict]:
    """The rows of a counts.jsonl; a truncated last line (an interrupted write) is ignored."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such counts file")
    rows = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):  # no newline after it: the write was cut short
                continue
            raise DataError(f"{path}:{lineno}: not valid JSON") from None
        missing = [k for k in COUNT_FIELDS if k not in row]
        if missing:
            raise DataError(f"{path}:{lineno}: missing field '{missing[0]}'")
        if not 0 <= row["c"] <= row["n"] or row["n"] < 1:
            raise DataError(f"{path}:{lineno}: need 0 <= c <= n and n >= 1, got n={row['n']} c={row['c']}")
        rows.append(row)
    return rows


def code_task(template: str):
    """reco.tasks' code task for a template: completion prompts (plain) or an instruct model's fenced block (chat)."""
    return TASKS["code-chat" if template == "chat" else "code"]


def grade_problem(problem: dict, responses: list[str], template: str = "qwen-boxed") -> tuple[int, int]:
    """(correct responses, distinct correct responses) for one problem: a math problem's boxed answers
    (reco.rewards.math_grader.grade_group), or a code problem's programs, run at once in reco.rewards.code's sandbox
    (distinct: their programs up to formatting)."""
    if "answer" in problem:  # reco.data.math's problems have an answer; reco.data.code's have tests instead
        return grade_group(responses, problem["answer"])
    task = code_task(template)
    verdicts = task.rewards([problem] * len(responses), responses)
    correct = {program_key(task.program(problem, r)) for r, ok in zip(responses, verdicts) if ok}
    return int(sum(verdicts)), len(correct)


def _stats(rows: list[dict], ks: list[int]) -> dict:
    m = len(rows)
    return {
        "n_problems": m,
        "n": min(r["n"] for r in rows),
        "pass_at_k": {str(k): sum(pass_at_k(r["n"], r["c"], k) for r in rows) / m for k in ks},
        "mean_accuracy": sum(r["c"] / r["n"] for r in rows) / m,
        "distinct_correct": sum(r["distinct_correct"] for r in rows) / m,
        "solved_any": sum(r["c"] > 0 for r in rows) / m,
    }


def summarize(rows: Iterable[dict], ks: list[int] | None = None) -> dict[str, dict]:
    """Pass@k (unbiased, averaged over problems) and the other §3.5 statistics per benchmark, plus their
    unweighted average over benchmarks under "average". `ks` defaults to 1, 2, 4, ..., n; every k must be
    <= the smallest n. A problem listed twice counts once (its last row)."""
    by_bench: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_bench.setdefault(r["benchmark"], {})[str(r["id"])] = r
    if not by_bench:
        raise DataError("no counts to summarize")
    n_min = min(r["n"] for probs in by_bench.values() for r in probs.values())
    ks = ks or default_ks(n_min)
    if max(ks) > n_min or min(ks) < 1:
        raise DataError(f"k must be in 1..{n_min} (the smallest n in these counts), got {ks}")
    out = {b: _stats(list(probs.values()), ks) for b, probs in by_bench.items()}
    if len(out) > 1:
        benches = list(out.values())
        avg = lambda key: sum(s[key] for s in benches) / len(benches)
        out["average"] = {
            "n_problems": sum(s["n_problems"] for s in benches),
            "n": n_min,
            "pass_at_k": {str(k): sum(s["pass_at_k"][str(k)] for s in benches) / len(benches) for k in ks},
            **{key: avg(key) for key in ("mean_accuracy", "distinct_correct", "solved_any")},
        }
    return out


# -- sampling ---------------------------------------------------------------------------------------

class EngineSampler:
    """Adapts a RolloutEngine and its tokenizer to the text-level Sampler the evaluation loop uses."""

    def __init__(self, engine: RolloutEngine, tokenizer, cfg: EvalConfig) -> None:
        self.engine, self.tokenizer, self.cfg = engine, tokenizer, cfg

    def prompt(self, problem: dict) -> str:
        """A math problem's prompt in the template, or a code problem's (its code task's)."""
        if "answer" in problem:
            return build_prompt(self.tokenizer, problem["problem"], self.cfg.template)
        return code_task(self.cfg.template).prompt(problem, self.tokenizer)

    def __call__(self, problems: list[dict], n: int, seed: int) -> list[list[str]]:
        cfg = self.cfg
        # A chat template writes its own special tokens (BOS included); the others get the tokenizer's.
        special = cfg.template != "chat"
        prompts = [self.tokenizer(self.prompt(p), add_special_tokens=special)["input_ids"] for p in problems]
        rollout = self.engine.generate(prompts, n, temperature=cfg.temperature, top_p=cfg.top_p,
                                       max_new_tokens=cfg.max_new_tokens, seed=seed)
        texts = self.tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
        return [texts[i * n:(i + 1) * n] for i in range(len(problems))]


def make_sampler(cfg: EvalConfig) -> EngineSampler:
    """Load the tokenizer and, through the one engine factory, the engine named by ``cfg.engine``."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    if tokenizer.pad_token is None:  # e.g. Llama 3; padding is masked out anyway
        tokenizer.pad_token = tokenizer.eos_token
    cuda = torch.cuda.is_available()
    engine = make_engine(cfg.engine, cfg.model, tokenizer, template=cfg.template,
                         device=torch.device("cuda" if cuda else "cpu"), dtype=torch.bfloat16 if cuda else torch.float32,
                         seed=cfg.seed, hf_batch_size=cfg.hf_batch_size,
                         max_model_len=cfg.max_model_len or cfg.max_new_tokens + 1024,
                         gpu_memory_utilization=cfg.gpu_memory_utilization, tensor_parallel_size=cfg.tensor_parallel_size)
    return EngineSampler(engine, tokenizer, cfg)


# -- the evaluation loop ----------------------------------------------------------------------------

class _InlineExecutor(Executor):
    """Runs each task at submit time (``--workers 0``)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _grading_pool(workers: int) -> Executor:
    if workers <= 0:
        return _InlineExecutor()
    # threads: each problem's grade_group waits on the math grader's own worker processes (clean, time-bounded)
    return ThreadPoolExecutor(max_workers=workers)


def _chunks(todo: list[tuple[int, dict]], size: int) -> Iterable[list[tuple[int, dict]]]:
    """Runs of at most `size` problems with consecutive positions, so that seeds depend only on position."""
    chunk: list[tuple[int, dict]] = []
    for pos, problem in todo:
        if chunk and (len(chunk) == size or pos != chunk[-1][0] + 1):
            yield chunk
            chunk = []
        chunk.append((pos, problem))
    if chunk:
        yield chunk


def run_eval(sampler: Sampler, benchmarks: dict[str, list[dict]], counts_path: str | Path, *, n: int, seed: int = 0,
             prompts_per_call: int = 8, workers: int = 4, template: str = "qwen-boxed") -> list[dict]:
    """Sample and grade (grade_problem; `template` says how a code problem was prompted) every problem not yet in
    `counts_path`, appending one row per problem as it is graded; returns all rows of the file. Problem i of a
    benchmark is sampled with seed ``seed + i*n``;
    both engines seed sample g of a call's prompt j with ``seed + j*n + g``, so a problem draws the same
    samples whether or not the run was resumed."""
    counts_path = Path(counts_path)
    counts_path.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if counts_path.exists():
        _repair_tail(counts_path)
        done = {(r["benchmark"], str(r["id"])) for r in read_counts(counts_path)}
    pending: dict[Future, tuple[str, str]] = {}

    def write_finished(out, block: bool) -> None:
        for future in [f for f in pending if block or f.done()]:
            bench, pid = pending.pop(future)
            c, distinct = future.result()
            out.write(json.dumps({"benchmark": bench, "id": pid, "n": n, "c": c, "distinct_correct": distinct}) + "\n")
            out.flush()

    with _grading_pool(workers) as pool, counts_path.open("a", encoding="utf-8") as out:
        try:
            for bench, problems in benchmarks.items():
                todo = [(pos, p) for pos, p in enumerate(problems) if (bench, p["id"]) not in done]
                with tqdm(total=len(problems), initial=len(problems) - len(todo), desc=f"sample {bench}",
                          unit="problem") as bar:
                    for chunk in _chunks(todo, prompts_per_call):
                        responses = sampler([p for _, p in chunk], n, seed + chunk[0][0] * n)
                        for (_, p), texts in zip(chunk, responses, strict=True):
                            if len(texts) != n:
                                raise RuntimeError(f"sampler gave {len(texts)} responses for {bench}/{p['id']}, expected {n}")
                            pending[pool.submit(grade_problem, p, texts, template)] = (bench, p["id"])
                        write_finished(out, block=False)
                        bar.update(len(chunk))
        finally:  # keep every problem already sampled, even when sampling fails or is interrupted
            write_finished(out, block=True)
    return read_counts(counts_path)


def _repair_tail(path: Path) -> None:
    """End the file with a newline: complete a last line that lacks one, or cut it if a write was cut short."""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
        path.write_bytes(data + b"\n")
    except json.JSONDecodeError:
        path.write_bytes(data[:cut])


# -- CLI --------------------------------------------------------------------------------------------

def _named_paths(specs: list[str]) -> dict[str, Path]:
    """``name=path`` (or a bare path, named after its directory) -> {name: path}."""
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = Path(spec).parent.name or Path(spec).stem, spec
        out[name] = Path(path)
    return out


def _named_sources(specs: list[str]) -> dict[str, str]:
    """``name=source`` (or a bare source: a file is named after its stem, a dataset after the last part of its
    name, ``openai/gsm8k:main:test`` -> gsm8k) -> {name: source}; two sources of one name are an error."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, source = spec.partition("=")
        if not sep:
            source = spec
            name = Path(spec).stem if Path(spec).is_file() else Path(parse_source(spec)[0].rstrip("/")).name
        if name in out:
            raise DataError(f"--files: two benchmarks named {name!r} ({out[name]} and {source}); write NAME=SOURCE")
        out[name] = source
    return out


def load_benchmarks(cfg: EvalConfig) -> dict[str, list[dict]]:
    benches = {name: load_benchmark(name, cfg.data_dir) for name in cfg.benchmarks.split(",") if name}
    benches |= {name: load_problems(source) for name, source in _named_sources(cfg.files).items()}
    return {name: probs[:cfg.limit] if cfg.limit else probs for name, probs in benches.items()}


def _check_resume(out: Path, cfg: EvalConfig) -> dict:
    """Refuse to mix samples drawn under different settings into one counts file; the settings to record once the
    model has loaded (_record_settings), so that a model that fails to load leaves no file behind."""
    meta_path = out / "eval_config.json"
    meta = {k: getattr(cfg, k) for k in SAMPLING_KEYS}
    if meta_path.exists() and (out / "counts.jsonl").exists():
        old = json.loads(meta_path.read_text())
        diff = {k: (old.get(k), v) for k, v in meta.items() if old.get(k) != v}
        if diff:
            raise DataError(f"{out}: resuming with different settings {diff} (old, new); use another --out")
    return meta


def _record_settings(out: Path, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_config.json").write_text(json.dumps(meta, indent=2) + "\n")


# Every numeric setting's values: a new one fails tests/test_validation.py until it gets its rule here.
NUMBERS = {
    "n": Allowed(1),
    "temperature": Allowed(0),  # 0 = greedy
    "top_p": Allowed(0, 1, open_low=True),
    "max_new_tokens": Allowed(1),
    "seed": Allowed(0),
    "limit": Allowed(0),  # 0 = every problem
    "prompts_per_call": Allowed(1),
    "hf_batch_size": Allowed(1),
    "workers": Allowed(0),  # 0 = in the loop
    "max_model_len": Allowed(0),  # 0 = max_new_tokens + 1024
    "gpu_memory_utilization": Allowed(0, 1, open_low=True),
    "tensor_parallel_size": Allowed(1),
}


def parse_config(argv: list[str] | None = None) -> EvalConfig:
    """The settings from the command line, every value checked (one line and exit code 2 when one is bad) before
    anything is read or loaded."""
    d = EvalConfig()
    p = ArgumentParser(prog=command_name("reco_scaled.evaluate", "python -m reco_scaled.evaluate"),
                       description=__doc__.split("\n\n")[0])

    def add(flag: str, help: str = "", choices=None, **kwargs) -> None:
        default = kwargs.setdefault("default", getattr(d, flag[2:].replace("-", "_")))
        p.add_argument(flag, help=flag_help(help, default if default != [] else None, choices), **kwargs)

    add("--model", "HF model name or local directory (from_pretrained); omit to only report counts", metavar="NAME_OR_DIR")
    add("--benchmarks", "comma-separated registry names", BENCHMARKS, metavar="NAMES")
    add("--files", "extra benchmarks, each a JSONL/parquet file, a dataset directory or a hub name "
        "NAME[:CONFIG][:SPLIT], as NAME=SOURCE", nargs="+", metavar="NAME=SOURCE")
    add("--data-dir", "where <benchmark>.jsonl files live; a benchmark without one is read from the hub", metavar="DIR")
    add("--n", "samples per problem", type=int, metavar="N")
    add("--temperature", "sampling temperature (0 = greedy)", type=float, metavar="X")
    add("--top-p", "nucleus sampling's mass", type=float, metavar="X")
    add("--max-new-tokens", "response length limit", type=int, metavar="N")
    add("--template", "the prompt (code benchmarks: plain, completion for a base model, or chat, a fenced block)",
        TEMPLATES, metavar="NAME")
    add("--engine", "rollout engine", ENGINES, metavar="NAME")
    add("--out", "output directory (default runs/eval/<model name>)", metavar="DIR")
    add("--seed", "seed of problem i's samples: seed + i*n", type=int, metavar="N")
    add("--limit", "only the first N problems of each benchmark (0 = all)", type=int, metavar="N")
    add("--prompts-per-call", "problems per engine call", type=int, metavar="N")
    add("--hf-batch-size", "hf engine: sequences decoded at once", type=int, metavar="N")
    add("--workers", "problems graded at once, in threads over the math grader's worker processes (0 = in the loop)",
        type=int, metavar="N")
    add("--ks", "comma-separated k (default 1,2,4,...,n)", metavar="K,K,...")
    add("--from-counts", "report these counts files", nargs="+", metavar="[NAME=]PATH")
    add("--compare", "overlay these runs on the plot", nargs="+", metavar="NAME=PATH")
    add("--max-model-len", "vllm: prompt + response tokens (0 = --max-new-tokens + 1024)", type=int, metavar="N")
    add("--gpu-memory-utilization", "vllm: its share of the GPU's memory", type=float, metavar="X")
    add("--tensor-parallel-size", "vllm: GPUs per model", type=int, metavar="N")
    cfg = EvalConfig(**vars(p.parse_args(argv)))
    for name, rule in NUMBERS.items():
        if not (check := rule.check(name, getattr(cfg, name)))[1]:
            p.error(f"--{name.replace('_', '-')} {check[2]}")
    for name, value, choices in (("template", cfg.template, TEMPLATES), ("engine", cfg.engine, ENGINES)):
        if value not in choices:
            p.error(f"--{name} must be one of {list(choices)}, got {value!r}")
    if unknown := [b for b in cfg.benchmarks.split(",") if b and b not in BENCHMARKS]:
        p.error(f"--benchmarks must be a comma-separated subset of {list(BENCHMARKS)}, got {unknown[0]!r} "
                "(--files NAME=SOURCE reads others)")
    if not cfg.model and not (cfg.from_counts or cfg.compare):
        p.error("give --model to evaluate, or --from-counts/--compare to report existing counts")
    if cfg.model and not (cfg.benchmarks or cfg.files):
        p.error("give --benchmarks and/or --files")
    if cfg.ks and not all(k.strip().isdigit() and int(k) >= 1 for k in cfg.ks.split(",")):
        p.error(f"--ks must be comma-separated integers >= 1, got {cfg.ks!r}")
    code = [b for b in cfg.benchmarks.split(",") if b in BENCHMARKS and BENCHMARKS[b].code]
    if code and cfg.template not in ("plain", "chat"):
        p.error(f"code benchmarks ({', '.join(code)}) need --template plain (completion prompts, for a base model) "
                "or chat (a fenced ```python block, for an instruct model)")
    return cfg


def main(argv: list[str] | None = None) -> dict[str, dict]:
    """Evaluate (with --model) and/or report; returns {run name: summary}."""
    cfg = parse_config(argv)
    print("EvalConfig:", json.dumps(asdict(cfg), indent=1))
    ks = [int(k) for k in cfg.ks.split(",")] if cfg.ks else None
    runs = _named_paths(cfg.from_counts) | _named_paths(cfg.compare)
    try:
        if cfg.model:
            name = Path(cfg.model.rstrip("/")).name
            out = Path(cfg.out or f"runs/eval/{name}")
            benchmarks = load_benchmarks(cfg)  # the data before the model: a bad file fails in a second
            if problem := model_problem(cfg.model):
                raise DataError(f"--model {problem}")
            settings = _check_resume(out, cfg)
            try:
                sampler = make_sampler(cfg)
            except OSError as e:  # a model that cannot be loaded is bad input, like a bad data file
                raise DataError(f"--model {cfg.model}: cannot load it ({(str(e).strip().splitlines() or ['?'])[0]})") from e
            _record_settings(out, settings)
            run_eval(sampler, benchmarks, out / "counts.jsonl", n=cfg.n, seed=cfg.seed,
                     prompts_per_call=cfg.prompts_per_call, workers=cfg.workers, template=cfg.template)
            runs = {name: out / "counts.jsonl"} | runs
        else:
            out = Path(cfg.out) if cfg.out else next(iter(runs.values())).parent
        summaries = {run: summarize(read_counts(path), ks) for run, path in runs.items()}
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for run, summary in summaries.items():
        print("\n" + format_table(summary, f"== {run} ({runs[run]})"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    n = min(s["n"] for summary in summaries.values() for s in summary.values())
    sampling = f", temperature {cfg.temperature:g}, top-p {cfg.top_p:g}, seed {cfg.seed}" if cfg.model else ""
    plot = plot_pass_at_k(summaries, out / "pass_at_k.png", title="Pass@k: " + " vs ".join(summaries),
                          caption=f"n = {n} samples per problem{sampling}")
    print(f"\nwrote {out / 'summary.json'} and {plot}")
    return summaries


if __name__ == "__main__":
    main()
