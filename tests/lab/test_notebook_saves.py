"""A headless run writes its executed copy less often than papermill's own engine (at most every
``SAVE_EVERY_S`` while it goes), and still always at its end: every cell's output and papermill
metadata are in it, a failed cell's error included."""

from __future__ import annotations

import pytest
from conftest import LAB_EXTRA, require

require("nbformat", "papermill", "ipykernel", reason=LAB_EXTRA)
import nbformat  # noqa: E402

from combine_lab.lab import notebooks  # noqa: E402


def _book(folder, name, *sources):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": notebooks.KERNEL_NAME, "display_name": notebooks.KERNEL_DISPLAY_NAME,
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell('output_dir = None', metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, folder / name)


@pytest.fixture
def saves(monkeypatch):
    """The executed copy's writes: papermill's NotebookExecutionManager.save, counted."""
    from papermill.engines import NotebookExecutionManager
    made = []
    real = NotebookExecutionManager.save
    monkeypatch.setattr(NotebookExecutionManager, "save", lambda self, **kw: (made.append(1), real(self, **kw)))
    return made


@pytest.mark.slow  # a notebook kernel started; the quick suite's is the failed-cell test
def test_cells_all_in_the_copy_with_one_write_at_the_end(tmp_path, saves):
    src, out = tmp_path / "nb", tmp_path / "out"
    src.mkdir()
    _book(src, "01_many.ipynb", *[f"print({i} * 7)" for i in range(20)])
    [run] = notebooks.run_notebooks(out, folder=src)
    assert run.ok and run.error == ""
    book = nbformat.read(out / "01_many.ipynb", as_version=4)
    # a print may reach the copy as two stream outputs ("91", then "\n": the kernel flushed between them)
    printed = ["".join(o["text"] for o in c.outputs if o["output_type"] == "stream") for c in book.cells[-20:]]
    assert printed == [f"{i * 7}\n" for i in range(20)]
    assert all(c.metadata.papermill["status"] == "completed" for c in book.cells)
    # papermill's engine writes at each of the 22 cells' start and end (46 writes with the first and
    # the last); these cells take well under SAVE_EVERY_S, so the closing write is about the only one
    assert 1 <= len(saves) <= 4, len(saves)


def test_a_failed_cell_is_in_the_copy_with_the_cells_before_it(tmp_path, saves):
    src, out = tmp_path / "nb", tmp_path / "out"
    src.mkdir()
    _book(src, "01_fails.ipynb", "print('before')", "1 / 0", "print('never')")
    [run] = notebooks.run_notebooks(out, folder=src)
    # execution count 4: the parameters cell, papermill's injected parameters, print, then 1 / 0
    assert not run.ok and run.error == "cell 4: ZeroDivisionError: division by zero"
    book = nbformat.read(out / "01_fails.ipynb", as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert "".join(o["text"] for o in code[-3].outputs if o["output_type"] == "stream") == "before\n"
    assert code[-2].outputs[0]["ename"] == "ZeroDivisionError" and code[-1].outputs == []
    assert saves  # the closing write happened although the run failed
