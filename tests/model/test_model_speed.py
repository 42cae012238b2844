"""What keeps the README's suggest within 2 s (docs/timing-model.md#1-what-the-model-is): a modelled
case never imports ml_dtypes (0.5 s of CPU), which the first look-up of bfloat16 still does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRICE = """
import sys

import pytest
import combine_lab.cli
from combine_lab import CaseSpec, make_case
from combine_lab.model.stream import case_rows
rows = case_rows(make_case(CaseSpec(4, 16, 64, 2, 2, dtype="bfloat16_t", routing="deepseek")), "Ascend910_93")
print(rows.itemsize, "ml_dtypes" in sys.modules)
from combine_lab.case.spec import DTYPES
print(DTYPES["bfloat16_t"].__name__, "ml_dtypes" in sys.modules)
"""


@pytest.mark.slow  # a Python process started to watch its imports
def test_a_modelled_bfloat16_case_never_imports_ml_dtypes():
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", PRICE], check=True, capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.stdout.split("\n")[:2] == ["2 False", "bfloat16 True"]
