"""The case: what one combine is asked to do (docs/protocol.md#1-the-combine-problem, docs/protocol.md#2-dispatch-layout and docs/formats.md#1-case-files).

- :mod:`.spec`: :class:`CaseSpec`, the validated parameters of one case;
- :mod:`.routing`: routing models, drawing expert_ids, expert_scales and x;
- :mod:`.traces`: per-expert loads measured on real MoE models;
- :mod:`.case`: :class:`Case`: receive counts, per-rank dispatch layout and golden x_out;
- :mod:`.casefiles`: reference case files: write, read and validate, check an x_out.
"""
