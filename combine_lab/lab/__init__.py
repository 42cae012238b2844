"""The lab around the notebooks: interactive tuning, figures, sweeps, exercises, headless runs.

- :mod:`.tuning`: :class:`TuningState`, the tuning app's state (values, plan, modelled time, runs,
  history, figures) without widgets;
- :mod:`.app`: :class:`TuningApp`, the ipywidgets view of that state;
- :mod:`.plots`: figures (segment maps, plane bytes, comparisons, sweeps);
- :mod:`.svg`: the plan and modelled views drawn as SVG (the app's, the notebooks' and the PNGs');
- :mod:`.sweep`: grids of cases run for both variants;
- :mod:`.exercises`: checks for the walkthrough's exercises;
- :mod:`.records`: typed notebook parameters, output folder and records of headless notebook runs;
- :mod:`.notebooks`: run the notebooks headless with papermill; the lab's Jupyter kernel;
- :mod:`.server`: JupyterLab on the notebooks (``combine-lab lab``).
"""
