"""Planted-effect kernel (CPU, NumPy): y = a*x + b over WORK elements. The decision-quality
benchmark edits only WORK, so a candidate differs from BEST by exactly that much extra or removed work."""

WORK = 2**22
