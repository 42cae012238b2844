"""Exception types shared by the case-making modules.

``SpecError`` is re-exported by :mod:`combine_lab.spec`, ``CaseFileError`` by
:mod:`combine_lab.casefiles`; they live here so that ``spec`` and ``routing``
can both raise ``SpecError`` without importing each other.
"""


class SpecError(ValueError):
    """A case parameter is invalid.

    The message names the field, the value given and what is allowed, e.g.
    ``"topk=9: must be <= moe_expert_num=8 when choices are distinct (routing 'zipf:1.2')"``.
    """


class CaseFileError(ValueError):
    """A reference case directory (combine-facts section 3) is missing a file or
    holds data inconsistent with its meta.json.

    The message names the file (path), what was found and what was expected.
    """
