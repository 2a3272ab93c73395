"""reco: the library under reco_mini.py, one folder or file per concern.

- tasks/: the Task interface and registry (TASKS), Countdown, code-tiny, the code tasks and math;
- rewards/: the math grader, the code reward and its sandbox;
- data/: math and code problems by name, directory or file;
- cli.py (flags and checks), hf.py (models, sampling, the --head-chunk fast path), log.py (the run log),
  report.py (results, the Pass@k table and plot), peers.py (the published peers' methods the studies run).

Nothing here imports reco_mini, reco_scaled or experiments (tests/test_boundary.py).
"""
