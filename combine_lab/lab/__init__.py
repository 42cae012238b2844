"""The lab around the notebooks: interactive tuning, figures, sweeps, exercises, headless runs.

- :mod:`.app`: :class:`TuningApp`, ipywidgets for a case, its plan and runs;
- :mod:`.plots`: figures (segment maps, plane bytes, comparisons, sweeps);
- :mod:`.svg`: the app's live figures as SVG;
- :mod:`.sweep`: grids of cases run for both variants;
- :mod:`.exercises`: checks for the walkthrough's exercises;
- :mod:`.records`: typed notebook parameters, output folder and records of headless notebook runs;
- :mod:`.notebooks`: run the notebooks headless with papermill; the lab's Jupyter kernel;
- :mod:`.server`: JupyterLab on the notebooks (``combine-lab lab``).
"""
