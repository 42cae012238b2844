"""Lists read alike wherever a user types them: command-line flags, papermill -p strings, notebook cells."""

from __future__ import annotations

import pytest

from combine_lab.errors import ParameterError
from combine_lab.values import as_list


@pytest.mark.parametrize("value, kind, want", [
    ([8, 16], int, [8, 16]), ("[8,16]", int, [8, 16]), ("8,16", int, [8, 16]), ("8 16", int, [8, 16]),
    (8, int, [8]), ("[\"uniform\", \"zipf:1.2\"]", str, ["uniform", "zipf:1.2"]), ("uniform,zipf:1.2", str,
                                                                              ["uniform", "zipf:1.2"]),
    ("['uniform', 'hot-rank:0.5']", str, ["uniform", "hot-rank:0.5"]), ("int32_t", str, ["int32_t"]),
    ((4,), int, [4]),
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


# ---- issue 9 item 2: notebook parameters arrive as text and are converted by their declared type ----

import numpy as np  # noqa: E402

from combine_lab.lab.records import check_parameters  # noqa: E402
from combine_lab.values import convert, describe_type  # noqa: E402


@pytest.mark.parametrize("value, declared, want", [
    ("2", "int", 2), (" 4096 ", "int", 4096), ("-3", "int", -3), (16, "int", 16), (np.int64(3), "int", 3),
    ("1.5", "float", 1.5), (2, "float", 2.0), ("1e-3", "float", 0.001),
    ("False", "bool", False), ("false", "bool", False), ("True", "bool", True), ("no", "bool", False),
    ("YES", "bool", True), ("0", "bool", False), (1, "bool", True), (False, "bool", False),
    ("int32_t", "str", "int32_t"), (2024, "str", "2024"),  # papermill -p turns "2024" into 2024
    ("[64,128]", "list[int]", [64, 128]), ("64,128", "list[int]", [64, 128]), (64, "list[int]", [64]),
    (["64", "128"], "list[int]", [64, 128]), ("uniform,hot-expert:0.5", "list[str]", ["uniform", "hot-expert:0.5"]),
    ('["uniform", "zipf:1.2"]', "list[str]", ["uniform", "zipf:1.2"]), ("0.5, 1", "list[float]", [0.5, 1.0]),
    (None, "Optional[str]", None), ("None", "Optional[str]", None), ("", "Optional[str]", None),
    ("out/lab", "Optional[str]", "out/lab"), ("7", "int | None", 7), ("null", "typing.Optional[int]", None),
])
def test_text_is_converted_by_the_declared_type(value, declared, want):
    got = convert(value, declared, "p")
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("name, value, declared, message", [
    ("h", "40x", "int", "parameter h='40x': expected int"),
    ("h", "4096.5", "int", "parameter h='4096.5': expected int ('4096.5' is not an integer)"),
    ("h", True, "int", "parameter h=True: expected int"),
    ("pes", None, "int", "parameter pes=None: expected int"),
    ("skew", "high", "float", "parameter skew='high': expected float"),
    ("reveal_answers", "maybe", "bool", "parameter reveal_answers='maybe': expected bool (True/False)"),
    ("reveal_answers", 2, "bool", "parameter reveal_answers=2: expected bool (True/False)"),
    ("dtype", ["int32_t"], "str", "parameter dtype=['int32_t']: expected str"),
    ("bs_list", "[64, x]", "list[int]", "parameter bs_list='[64, x]': expected list of int ('x' is not a valid int)"),
    ("output_dir", ["a"], "Optional[str]", "parameter output_dir=['a']: expected str or None"),
])
def test_a_value_not_of_the_declared_type_is_refused_naming_parameter_value_and_type(name, value, declared, message):
    with pytest.raises(ParameterError) as err:
        convert(value, declared, name)
    assert str(err.value) == message


def test_declared_types_in_words_and_unknown_types_refused():
    assert [describe_type(t) for t in ("int", "list[str]", "Optional[str]", "bool")] == \
        ["int", "list of str", "str or None", "bool (True/False)"]
    with pytest.raises(ParameterError) as err:
        convert(1, "dict[str, int]", "x")
    assert str(err.value) == ("type 'dict[str, int]': must be one of int, float, bool, str, list[int], list[float], "
                              "list[str], Optional[T]")


def test_check_parameters_converts_a_notebook_namespace_in_place():
    """What a notebook's first cell does after papermill injected text (-r, -p strings, YAML)."""
    ns = {"__annotations__": {"pes": int, "h": int, "reveal_answers": bool, "bs_list": list[int],
                              "output_dir": "Optional[str]"},
          "pes": "2", "h": "4096", "reveal_answers": "False", "bs_list": "[16, 64]", "output_dir": None, "other": "1"}
    assert check_parameters(ns) == {"pes": 2, "h": 4096, "reveal_answers": False, "bs_list": [16, 64],
                                    "output_dir": None}
    assert ns["h"] * 2 == 8192 and ns["reveal_answers"] is False and ns["other"] == "1"
    bad = {"__annotations__": {"pes": int, "skew": float, "loops": int}, "pes": "two", "skew": "x", "loops": "3"}
    with pytest.raises(ParameterError) as err:
        check_parameters(bad)
    assert str(err.value) == "parameter pes='two': expected int; parameter skew='x': expected float"
    assert bad["loops"] == "3"  # nothing is half-converted


# ---- issue 34: "1e3" for an int is refused the same way everywhere ----

#: The three ways a user types 1e3 for an int: papermill's -p (a float), a --params file or -r (text),
#: and a cell or JSON (the float 1000.0, or 8.0).
@pytest.mark.parametrize("value, why", [
    (1000.0, "1000.0 is a float, never taken for an int: write 1000"),
    ("1e3", "'1e3' is a float, never taken for an int: write 1000"),
    ("8.0", "'8.0' is a float, never taken for an int: write 8"),
])
def test_a_float_is_never_taken_for_an_int_scalar_or_list(value, why):
    with pytest.raises(ParameterError) as err:
        convert(value, "int", "loops")
    assert str(err.value) == f"parameter loops={value!r}: expected int ({why})"
    with pytest.raises(ParameterError) as err:
        convert(value, "list[int]", "bs_list")
    assert str(err.value) == f"parameter bs_list={value!r}: expected list of int ({why})"
    with pytest.raises(ParameterError) as err:  # --bs-list 1e3 on the command line
        as_list(value, int, "--bs-list")
    assert str(err.value) == f"--bs-list={value!r}: {why}"


def test_papermill_p_loops_1e3_is_refused_by_the_notebooks_first_cell():
    """What papermill's -p loops 1e3 -p bs_list 1e3 injects (floats), refused by check_parameters
    before any other cell runs, both named, and nothing in the namespace changed."""
    ns = {"__annotations__": {"loops": "int", "bs_list": "list[int]", "warmup": "int"},
          "loops": 1000.0, "bs_list": 1000.0, "warmup": "2"}
    with pytest.raises(ParameterError) as err:
        check_parameters(ns)
    assert str(err.value) == ("parameter loops=1000.0: expected int (1000.0 is a float, never taken for an int: "
                              "write 1000); parameter bs_list=1000.0: expected list of int (1000.0 is a float, never "
                              "taken for an int: write 1000)")
    assert ns["loops"] == 1000.0 and ns["warmup"] == "2"
