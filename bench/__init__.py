"""Benchmarks (``make bench``, ``bench/run_all.sh``): each module prints its figures next to an anchor measured in the
same run, as a ratio, and writes JSON under ``bench/results/``. Run one from the repository root as a module, e.g.
``.venv/bin/python -m bench.failover --runs 10``; docs/performance.md explains the figures."""
