"""reco_scaled.evaluate: grading counts, Pass@k from counts, resume, the CLI end to end on a tiny model."""
import json
import random
from pathlib import Path

import pytest
import torch

import reco_mini
from reco.tasks import countdown
from reco_scaled.data import DataError, load_problems
from reco_scaled.evaluate import (
    EvalConfig,
    _check_resume,
    _chunks,
    _record_settings,
    default_ks,
    format_table,
    grade_group,
    main,
    make_sampler,
    parse_config,
    read_counts,
    run_eval,
    summarize,
)

FIXTURE = Path(__file__).parent / "fixtures" / "math_small.jsonl"
PROBLEMS = load_problems(FIXTURE)
GOLD = {p["problem"]: p["answer"] for p in PROBLEMS}
N = 6


def known_responses(problem: str, n: int) -> list[str]:
    """k correct responses and n-k wrong ones, where k is the problem's position in the fixture mod 4;
    the first two correct ones are the same text (see expected_counts)."""
    k = next(i for i, p in enumerate(PROBLEMS) if p["problem"] == problem) % 4
    gold = GOLD[problem]
    correct = [f"So the answer is $\\boxed{{{gold}}}$."] * min(k, 2)
    correct += [f"Thus \\boxed{{{gold}}} (way {i})." for i in range(k - 2)]
    wrong = ["\\boxed{1234567}", "no box here", "\\boxed{"] * n
    return correct + wrong[:n - k]


def expected_counts(k: int) -> tuple[int, int]:
    """(correct, distinct correct) for known_responses with k correct: k = 0, 1, 2, 3 -> 0, 1, 1, 2 distinct."""
    return k, [0, 1, 1, 2][k]


class CountingSampler:
    """Returns known_responses and records every problem it was asked to sample; can crash after a few calls."""

    def __init__(self, crash_after: int | None = None) -> None:
        self.sampled: list[str] = []
        self.calls = 0
        self.crash_after = crash_after

    def __call__(self, problems: list[dict], n: int, seed: int) -> list[list[str]]:
        if self.crash_after is not None and self.calls == self.crash_after:
            raise KeyboardInterrupt("simulated crash")
        self.calls += 1
        self.sampled += [p["problem"] for p in problems]
        return [known_responses(p["problem"], n) for p in problems]


def test_grade_group_counts_correct_and_distinct():
    responses = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{2}", "1/2", " \\boxed{0.5}"]
    assert grade_group(responses, "\\frac{1}{2}") == (4, 2)  # " \boxed{0.5}" equals "\boxed{0.5}" once stripped
    assert grade_group(["\\boxed{3}"] * 5, "4") == (0, 0)


def test_stub_engine_exact_counts_through_the_process_pool(tmp_path):
    counts = tmp_path / "counts.jsonl"
    rows = run_eval(CountingSampler(), {"fx": PROBLEMS}, counts, n=N, prompts_per_call=5, workers=2)
    got = {r["id"]: (r["c"], r["distinct_correct"]) for r in rows}
    assert got == {p["id"]: expected_counts(i % 4) for i, p in enumerate(PROBLEMS)}
    assert all(r["n"] == N and r["benchmark"] == "fx" for r in rows)


def test_pass_at_k_from_counts_matches_direct_computation():
    rng = random.Random(0)
    rows = [{"benchmark": b, "id": str(i), "n": 16, "c": rng.randint(0, 16), "distinct_correct": 0}
            for b in ("a", "b") for i in range(25)]
    summary = summarize(rows)
    assert list(summary["a"]["pass_at_k"]) == ["1", "2", "4", "8", "16"] and default_ks(12) == [1, 2, 4, 8, 12]
    for b in ("a", "b"):
        cs = [r["c"] for r in rows if r["benchmark"] == b]
        for k in (1, 2, 4, 8, 16):
            assert summary[b]["pass_at_k"][str(k)] == pytest.approx(sum(reco_mini.pass_at_k(16, c, k) for c in cs) / 25)
        assert summary[b]["mean_accuracy"] == pytest.approx(sum(cs) / (16 * 25))
        assert summary[b]["solved_any"] == pytest.approx(sum(c > 0 for c in cs) / 25)
    assert summary["average"]["pass_at_k"]["4"] == pytest.approx(
        (summary["a"]["pass_at_k"]["4"] + summary["b"]["pass_at_k"]["4"]) / 2)
    # any k <= n, without resampling
    odd = summarize(rows, ks=[3, 5, 11])
    assert odd["b"]["pass_at_k"]["11"] == pytest.approx(
        sum(reco_mini.pass_at_k(16, r["c"], 11) for r in rows if r["benchmark"] == "b") / 25)
    with pytest.raises(DataError, match="k must be in 1..16"):
        summarize(rows, ks=[32])
    table = format_table(summary, "run")
    assert table.splitlines()[1].split() == ["pass@k", "a", "b", "average"] and "solved" in table


def test_read_counts_validates_rows_and_skips_a_cut_off_last_line(tmp_path):
    path = tmp_path / "counts.jsonl"
    path.write_text('{"benchmark": "a", "id": "1", "n": 4, "c": 2, "distinct_correct": 1}\n{"benchmark": "a", "id": "2", "n"')
    assert [r["id"] for r in read_counts(path)] == ["1"]
    path.write_text('{"benchmark": "a", "id": "1", "n": 4, "c": 2}\n')
    with pytest.raises(DataError, match="counts.jsonl:1: missing field 'distinct_correct'"):
        read_counts(path)
    path.write_text('{"benchmark": "a", "id": "1", "n": 4, "c": 5, "distinct_correct": 1}\n')
    with pytest.raises(DataError, match=":1: need 0 <= c <= n"):
        read_counts(path)


def test_resume_after_a_crash_samples_only_unfinished_problems(tmp_path):
    counts = tmp_path / "counts.jsonl"
    benches = {"fx": PROBLEMS, "fy": PROBLEMS[:4]}
    crashing = CountingSampler(crash_after=2)
    with pytest.raises(KeyboardInterrupt):
        run_eval(crashing, benches, counts, n=N, prompts_per_call=3, workers=0)
    first = read_counts(counts)
    assert len(first) == 6 and len(crashing.sampled) == 6  # everything sampled before the crash was kept
    with counts.open("a") as f:  # and a write that the crash cut short
        f.write('{"benchmark": "fx", "id": "pt-1", "n"')

    resumed = CountingSampler()
    rows = run_eval(resumed, benches, counts, n=N, prompts_per_call=3, workers=0)
    assert sorted(resumed.sampled) == sorted([p["problem"] for p in PROBLEMS[6:]] + [p["problem"] for p in PROBLEMS[:4]])
    assert sorted((r["benchmark"], r["id"]) for r in rows) == sorted(
        [("fx", p["id"]) for p in PROBLEMS] + [("fy", p["id"]) for p in PROBLEMS[:4]])
    assert {(r["id"], r["c"], r["distinct_correct"]) for r in rows if r["benchmark"] == "fx"} == {
        (p["id"], *expected_counts(i % 4)) for i, p in enumerate(PROBLEMS)}

    again = CountingSampler()  # a finished run samples nothing
    run_eval(again, benches, counts, n=N, workers=0)
    assert again.sampled == []


def test_chunks_are_consecutive_runs():
    todo = [(i, {}) for i in (0, 1, 2, 3, 5, 6, 9)]
    assert [[pos for pos, _ in c] for c in _chunks(todo, 3)] == [[0, 1, 2], [3], [5, 6], [9]]


def test_resume_refuses_different_sampling_settings(tmp_path):
    cfg = EvalConfig(model="m", n=8)
    assert not (tmp_path / "eval_config.json").exists()  # written only once the model has loaded
    _record_settings(tmp_path, _check_resume(tmp_path, cfg))
    (tmp_path / "counts.jsonl").write_text("")
    _check_resume(tmp_path, cfg)  # same settings: fine
    with pytest.raises(DataError, match="resuming with different settings"):
        _check_resume(tmp_path, EvalConfig(model="m", n=16))


def test_cli_rejects_incomplete_arguments():
    for argv in ([], ["--model", "m"], ["--model", "m", "--files", "a=b", "--top-p", "0"]):
        with pytest.raises(SystemExit) as exit_:
            parse_config(argv)
        assert exit_.value.code == 2


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random 2-layer Qwen2 with the character tokenizer, saved with save_pretrained."""
    torch.manual_seed(0)
    tok = countdown.char_tokenizer()
    model = countdown.tiny_model(tok, hidden=32, layers=2)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_hf_sampler_passes_temperature_top_p_and_stop_tokens(tiny_model_dir):
    cfg = EvalConfig(model=str(tiny_model_dir), template="plain", temperature=1.0, top_p=1e-6, max_new_tokens=6)
    sampler = make_sampler(cfg)
    assert sampler.tokenizer.eos_token_id in sampler.engine.eos.tolist()
    problems = [{"problem": "1+2", "answer": "3"}, {"problem": "3*4", "answer": "12"}]
    nucleus = sampler(problems, 3, 5)  # top_p -> 0 keeps only the likeliest token: greedy
    cfg.temperature = 0.0
    greedy = sampler(problems, 3, 5)
    assert nucleus == greedy and len(greedy) == 2 and all(len(texts) == 3 for texts in greedy)
    cfg.temperature, cfg.top_p = 1.0, 1.0
    both = sampler(problems, 3, 5)
    assert both == sampler(problems, 3, 5)  # seeded
    # sample g of prompt i uses seed + i*n + g, so a problem's samples do not depend on its batch (resume)
    assert sampler(problems[1:], 3, 5 + 3) == both[1:]


def test_end_to_end_on_a_tiny_model_with_resume_and_compare(tiny_model_dir, tmp_path):
    out = tmp_path / "eval" / "tiny"
    args = ["--model", str(tiny_model_dir), "--files", f"fx={FIXTURE}", "--n", "4", "--max-new-tokens", "8",
            "--temperature", "1.0", "--top-p", "0.95", "--template", "plain", "--workers", "0", "--out", str(out)]
    summaries = main([*args, "--limit", "3"])
    name = tiny_model_dir.name  # the run is named after the model directory
    rows = read_counts(out / "counts.jsonl")
    assert [r["id"] for r in rows] == [p["id"] for p in PROBLEMS[:3]]
    assert all(r["n"] == 4 and 0 <= r["c"] <= 4 for r in rows)
    assert list(summaries[name]["fx"]["pass_at_k"]) == ["1", "2", "4"]
    assert (out / "pass_at_k.png").stat().st_size > 0 and json.loads((out / "summary.json").read_text())

    main([*args, "--limit", "5"])  # resumes: only problems 4 and 5 are new
    assert [r["id"] for r in read_counts(out / "counts.jsonl")] == [p["id"] for p in PROBLEMS[:5]]

    # report mode: recompute from counts and overlay two runs in one plot
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"benchmark": "fx", "id": p["id"], "n": 4, "c": i % 5, "distinct_correct": 1}) + "\n"
                             for i, p in enumerate(PROBLEMS)))
    report = tmp_path / "compare"
    summaries = main(["--compare", f"base={out / 'counts.jsonl'}", f"reco={other}", "--out", str(report), "--ks", "1,3"])
    assert set(summaries) == {"base", "reco"} and list(summaries["reco"]["fx"]["pass_at_k"]) == ["1", "3"]
    assert (report / "pass_at_k.png").stat().st_size > 0
