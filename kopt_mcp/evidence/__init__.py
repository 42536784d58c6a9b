"""Typed evidence the rules decide on, and pure functions over it (layer 1, below the profilers that
fill it and the rules that judge it): kernel traces (trace.py), launch groups (groups.py), harness
units (units.py) and their segmentation from a launch stream (segment.py), kernel names (names.py),
run clocks (clock.py), foreign load (load.py), the keep metric's A/B/A profiles (profiles.py) and the
out-of-process target time (confirm.py). Imports nothing of kopt_mcp but `errors` and itself."""
