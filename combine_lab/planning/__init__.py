"""The plan: which plane carries each segment, and what a run needs before it starts.

- :mod:`.planner`: the decision rule (docs/decision-rule.md#1-the-rule): :func:`plan`, :class:`Plan`;
- :mod:`.capacity`: window geometry (section 5) and the /dev/shm, memory and disk a run needs;
- :mod:`.explain`: tables that follow a case through layout, window, rule and core programs.
"""
