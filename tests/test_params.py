"""Lists read alike wherever a user types them: command-line flags, papermill -p strings, notebook cells."""

from __future__ import annotations

import pytest

from combine_lab.errors import ParameterError
from combine_lab.params import as_list


@pytest.mark.parametrize("value, kind, want", [
    ([8, 16], int, [8, 16]), ("[8,16]", int, [8, 16]), ("8,16", int, [8, 16]), ("8 16", int, [8, 16]),
    (8, int, [8]), ("[\"uniform\", \"zipf:1.2\"]", str, ["uniform", "zipf:1.2"]), ("uniform,zipf:1.2", str,
                                                                              ["uniform", "zipf:1.2"]),
    ("['uniform', 'hot-rank:0.5']", str, ["uniform", "hot-rank:0.5"]), ("int32_t", str, ["int32_t"]),
    ((4.0,), int, [4]),
    # what argparse's nargs="+" gives for --bs-list 8,16 / --bs-list 8 16 / --bs-list "8 16" 32
    (["8,16"], int, [8, 16]), (["8", "16"], int, [8, 16]), (["8 16", "32"], int, [8, 16, 32]),
    (["uniform", "zipf:1.2,hot-expert:0.5"], str, ["uniform", "zipf:1.2", "hot-expert:0.5"]),
])
def test_lists_read_alike_from_flags_papermill_and_cells(value, kind, want):
    assert as_list(value, kind, "x") == want


@pytest.mark.parametrize("value, kind, fragment", [("[8, x]", int, "'x' is not a valid int"), ("", int, "at least one"),
                                                   ([2.5], int, "2.5 is not an integer"),
                                                   (["4,x"], int, "'x' is not a valid int")])
def test_a_bad_list_is_refused_naming_the_parameter(value, kind, fragment):
    with pytest.raises(ParameterError, match="bs_list="):
        as_list(value, kind, "bs_list")
    with pytest.raises(ParameterError, match=fragment):
        as_list(value, kind, "bs_list")
