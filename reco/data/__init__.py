"""The problems: math (math.py) and code (code.py), from files, dataset directories or hub names."""
