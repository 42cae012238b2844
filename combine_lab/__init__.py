"""combine_lab: make MoE combine cases, plan MTE/SDMA planes, run the kernel, check and plot.

The rules this package implements are fixed by ``shared/docs/combine-facts.md``
(layout: sections 1-3, decision rule: section 4, perf CSV: section 8).
"""

__version__ = "0.1.0"
