"""The lab around the notebooks: interactive tuning, figures, sweeps, exercises, headless runs.

- :mod:`.app`: :class:`TuningApp`, ipywidgets for a case, its plan and runs;
- :mod:`.plots`: figures (segment maps, plane bytes, comparisons, sweeps);
- :mod:`.sweep`: grids of cases run for both variants;
- :mod:`.exercises`: checks for the walkthrough's exercises;
- :mod:`.records`: output folder and records of headless notebook runs;
- :mod:`.notebooks`: run the notebooks headless with papermill.
"""
