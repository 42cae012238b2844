"""The files of the lab, named, written and read in one place: the reference's case files
(:mod:`.casefiles`), its perf CSVs and their summary (:mod:`.perf_csv`), and the lab's own
sidecars and the twin's counters (:mod:`.sidecars`); docs/formats.md describes each byte.
run/, model/ and results/ read and write them only through here."""
