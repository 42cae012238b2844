"""Results: one row per run of a variant, and the tables made of rows.

- :mod:`.rows`: :class:`ResultRow` and :func:`result_row` (a run, a refusal or a baseline), the
  speed-up and the verdict;
- :mod:`.tables`: the sweep's tidy table and CSV, its per-case summary, losses, readable view;
- :mod:`.analysis`: ``-a plot`` / ``-a md``: a run's perf CSVs as figures (PNG) and Markdown tables.
"""
