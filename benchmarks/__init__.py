"""Speed and memory benchmarks: ``make bench`` (or ``python -m benchmarks [name ...]``).

Each benchmark prints medians and a ratio against the baseline its issue names,
and writes JSON under ``benchmarks/results/``. Machines here are noisy: quote
medians and ratios, not single runs.
"""
