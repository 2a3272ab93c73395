"""What a newcomer reads (issue 44): --help by group with each default once and the registries' values, usage lines
that name the command as invoked, progress bars that do not flood a log file, a Pass@k plot with the run's details,
and a README quick start that says how to install on a machine without a GPU and what the console commands are.
"""
from __future__ import annotations

import io
import json
import re
import struct
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import pytest

import reco_mini
from reco import cli, log, report
from reco_scaled import evaluate

ROOT = Path(__file__).resolve().parents[1]


def help_text(parse, capsys, monkeypatch, argv=("--help",), columns: int = 100) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as exc:
        parse(list(argv))
    assert exc.value.code == 0
    return capsys.readouterr().out


def entries(text: str) -> dict[str, str]:
    """--flag -> its help entry (its lines joined)."""
    out, flag = {}, None
    for line in text.splitlines():
        if m := re.match(r"  (--[\w-]+)", line):
            flag = m.group(1)
            out[flag] = line
        elif flag and line.startswith("   "):
            out[flag] += " " + line.strip()
        else:
            flag = None
    return {k: " ".join(v.split()) for k, v in out.items()}


def test_reco_mini_help_is_grouped_run_first_and_loss_after_methods(capsys, monkeypatch):
    """The loss flags used to come before --methods and --seed, in 130 lines."""
    text = help_text(reco_mini.parse_config, capsys, monkeypatch)
    order = [text.index(f"\n{title}:\n") for title in cli.GROUPS]
    assert order == sorted(order) and list(cli.GROUPS)[:3] == ["run", "methods", "loss"]
    assert text.index("--seed") < text.index("--methods") < text.index("--clip-low") < text.index("--model")
    grouped = [name for names in cli.GROUPS.values() for name in names]
    assert sorted(grouped) == sorted([f.name for f in fields(reco_mini.Config)] + ["method"])  # each field, once
    assert len(text.splitlines()) <= 110, len(text.splitlines())  # 134 lines at 100 columns before
    assert text.splitlines()[0] == "usage: reco_mini.py [flags]"


def test_each_default_prints_once_and_never_empty(capsys, monkeypatch):
    """Some defaults used to print empty or twice: '(default: a tiny model built here) (default: )'."""
    found = entries(help_text(reco_mini.parse_config, capsys, monkeypatch))
    assert len(found) == len(fields(reco_mini.Config)) + 1  # and --method
    assert not [f for f, e in found.items() if e.count("(default") > 1 or "(default: )" in e]
    assert "(default: 32)" in found["--prompts-per-step"] and "(default: 0)" in found["--seed"]
    assert "a tiny model built here" in found["--model"] and "default" not in found["--quick"]


def test_fixed_choices_come_from_the_registries_so_a_new_variant_is_listed(capsys, monkeypatch):
    """Flags with a fixed set of values did not list it, and a newly registered variant would not appear."""
    monkeypatch.setitem(reco_mini.TOKEN_RATIOS, "my-new-ratio", reco_mini.importance_ratio)
    monkeypatch.setitem(reco_mini.METHODS, "my-method", ("none", "is", 0.0))
    found = entries(help_text(reco_mini.parse_config, capsys, monkeypatch))
    for flag, registry in (("--methods", reco_mini.METHODS), ("--token-ratio", reco_mini.TOKEN_RATIOS),
                           ("--occurrence", reco_mini.OCCURRENCES), ("--task", reco_mini.TASKS)):
        assert " | ".join(registry) in found[flag], (flag, found[flag])
    assert "my-new-ratio" in found["--token-ratio"] and "my-method" in found["--methods"]
    for flag, values in (("--occurrence-apply", "all | positive"), ("--dtype", "float32 | bfloat16"),
                         ("--device", "auto | cpu | cuda"), ("--aggregation", "token-mean | seq-mean-token-mean")):
        assert values in found[flag], flag


def test_reco_mini_help_lists_no_peer_and_lab_help_lists_them_last(capsys, monkeypatch):
    """Issue 54: the peers' flags are experiments/lab.py's, in a "peers" group after reco_mini's groups; only the
    studies' own settings (lab.STUDIES, issue 59's --weight-pool) come after them."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import lab

    from reco import peers

    peers = ["--" + f.name.replace("_", "-") for f in fields(peers.PeerSettings)]
    assert not set(peers) & set(entries(help_text(reco_mini.parse_config, capsys, monkeypatch)))
    text = help_text(lab.parse_config, capsys, monkeypatch)
    found = entries(text)
    assert text.splitlines()[0] == "usage: experiments/lab.py [flags]" and "\npeers:\n" in text
    studies = ["--" + name.replace("_", "-") for name in lab.STUDIES]
    assert "\nstudies:\n" in text and text.index("\npeers:\n") < text.index("\nstudies:\n")
    assert list(found)[-len(peers) - len(studies):] == peers + studies
    assert len(found) == len(fields(lab.Config)) + 1  # and --method
    for flag, registry in (("--advantage", lab.ADVANTAGES), ("--prompt-gate", lab.PROMPT_GATES),
                           ("--response-weight", lab.RESPONSE_WEIGHTS), ("--token-ratio", reco_mini.TOKEN_RATIOS)):
        assert " | ".join(registry) in found[flag], (flag, found[flag])
    assert "simko" in found["--token-ratio"] and "advantage | ratio" in found["--simko-scale"]


def test_data_lists_every_accepted_form(capsys, monkeypatch):
    found = entries(help_text(reco_mini.parse_config, capsys, monkeypatch))
    assert all(form in found["--data"] for form in (".jsonl", ".parquet", "dataset dir", "hub NAME[:CONFIG][:SPLIT]"))


def test_reco_eval_help_shows_its_defaults(capsys, monkeypatch):
    """reco-eval --help showed no defaults."""
    found = entries(help_text(evaluate.parse_config, capsys, monkeypatch))
    assert "(default: 256)" in found["--n"] and "(default: 0.6)" in found["--temperature"]
    assert "(default: hf)" in found["--engine"] and "hf | vllm" in found["--engine"]
    assert "(default: qwen-boxed)" in found["--template"] and "NAME[:CONFIG][:SPLIT]" in found["--files"]


@pytest.mark.parametrize("argv0, orig, module, documented, expected", [
    ("/venv/bin/reco-mini", ["/venv/bin/python", "/venv/bin/reco-mini"], "reco_mini", "reco_mini.py", "reco-mini"),
    ("reco_mini.py", ["python", "reco_mini.py"], "reco_mini", "reco_mini.py", "reco_mini.py"),
    ("/r/reco_scaled/train.py", ["python", "-m", "reco_scaled.train"], "reco_scaled.train", "python -m reco_scaled.train",
     "python -m reco_scaled.train"),
    ("/venv/bin/reco-train", ["/venv/bin/python", "/venv/bin/reco-train"], "reco_scaled.train",
     "python -m reco_scaled.train", "reco-train"),
    ("/venv/bin/pytest", ["python", "-m", "pytest"], "reco_mini", "reco_mini.py", "reco_mini.py"),
])
def test_usage_names_the_command_as_invoked(argv0, orig, module, documented, expected, monkeypatch):
    """The usage lines said reco_mini.py and python -m reco_scaled.train under reco-mini and reco-train."""
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert cli.command_name(module, documented) == expected


def test_progress_bars_in_a_log_file_write_a_line_a_minute_at_most(monkeypatch):
    """With output redirected to a file, tqdm wrote 29 KB of progress bars into the log: a redraw every 0.1 s."""
    out = io.StringIO()  # not a terminal
    for _ in log.tqdm(range(200), desc="short", file=out):
        time.sleep(0.002)
    assert out.getvalue() == ""  # a bar shorter than a minute writes nothing
    monkeypatch.setattr(log, "LOG_INTERVAL_S", 0.2)  # a "minute" of 0.2 s
    start = time.monotonic()
    with log.tqdm(total=300, desc="long", file=out) as bar:
        for _ in range(300):
            time.sleep(0.005)
            bar.update()
    elapsed = time.monotonic() - start
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and out.getvalue().endswith("\n") and lines
    assert len(lines) <= elapsed / 0.2 + 1, (elapsed, lines)  # one a "minute", and the bar's last state
    assert all(line.startswith("long:") for line in lines) and "300/300" in lines[-1]


def png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_pass_at_k_plot_is_wide_with_one_title_and_the_runs_details(tmp_path, monkeypatch):
    """The plot was 504 x 396 px, had two titles and no run details."""
    import matplotlib.pyplot as plt

    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig) or close(fig))
    cfg = asdict(reco_mini.parse_config([]))
    curve = {"pass_at_k": {"1": 0.2, "2": 0.3, "4": 0.4}, "mean_accuracy": 0.2, "distinct_correct": 1.0,
             "solved_any": 0.5, "counts": [1, 2, 0]}
    report.write_results({"config": cfg, "methods": {"base": curve, "grpo": curve}, "wall_time_s": 1.0}, tmp_path)
    width, height = png_size(tmp_path / "pass_at_k.png")
    assert width >= 900 and height > 0
    fig = figures[-1]
    titles = [t for t in [fig._suptitle and fig._suptitle.get_text()] + [ax.get_title() for ax in fig.axes] if t]
    assert titles == ["Pass@k, held-out"]
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "seed 0" in caption and "3 held-out problems" in caption and f"n = {cfg['n_eval']}" in caption
    assert json.loads((tmp_path / "results.json").read_text())["config"] == cfg



def test_quick_says_under_its_table_that_it_is_a_smoke_test(tmp_path, capsys):
    """--quick's table read as "ReCo hurts", with nothing saying it was 4 steps on 16 problems (issue 54)."""
    curve = {"pass_at_k": {"1": 0.2, "2": 0.3}, "mean_accuracy": 0.2, "distinct_correct": 1.0, "solved_any": 0.5,
             "counts": [1, 2, 0]}
    runs = {"base": curve, "reco": curve}
    quick = asdict(reco_mini.parse_config(["--quick"]))
    report.write_results({"config": quick, "methods": runs, "wall_time_s": 1.0}, tmp_path / "quick")
    lines = capsys.readouterr().out.splitlines()
    note = lines[lines.index(next(x for x in lines if x.startswith("solved"))) + 1]  # the line under the table
    assert lines[0].startswith("pass@k") and "reco" in lines[0]
    assert f"smoke test on 3 problems x {quick['steps']} RL steps" in note and "noise" in note
    full = asdict(reco_mini.parse_config([]))
    report.write_results({"config": full, "methods": runs, "wall_time_s": 1.0}, tmp_path / "full")
    assert "smoke test" not in capsys.readouterr().out


README = (ROOT / "README.md").read_text()


def quick_start() -> str:
    return README.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_readme_says_how_to_install_without_a_gpu():
    """requirements.txt said the pin avoids a multi-GB CUDA build; on Linux it is the CUDA build, and nothing said
    how a laptop gets the CPU wheel."""
    text = quick_start()
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "CUDA build" in text and "Linux" in text
    assert "torch==2.13.0" in (ROOT / "requirements.txt").read_text()


def test_readme_shows_the_console_commands_and_the_default_runs_time():
    text = quick_start()
    assert "pip install ." in text
    for command in ("reco-mini", "reco-train --config tiny-cpu", "reco-eval"):
        assert command in text, command
    assert re.search(r"`python reco_mini\.py`.{0,40}\s+took \d+ min \d+ s", text, re.S) and "idle 2-core" in text
