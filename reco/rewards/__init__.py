"""The rewards: math answers (math_grader.py) and programs (code.py, run in sandbox.py's processes)."""
