"""Running a case on a target (the CPU twin or an Ascend NPU) and checking what came back.

- :mod:`.toolchain`: CANN, SHMEM, SoC and NPUs as found from the environment;
- :mod:`.build`: CMake builds of the host driver and kernel, reused until a source changes;
- :mod:`.capabilities`: one table of what can run here (targets, variants, baselines);
- :mod:`.launch`: one process per PE, timeouts, cleanup;
- :mod:`.outputs`: the files a run leaves, named in one place: perf CSVs and their summary
  (section 8), the lab's sidecar per case (twin counters, plan, verdicts), figure and report names;
- :mod:`.runner`: :func:`run_case`, :func:`compare`, :class:`RunResult`;
- :mod:`.baseline`, :mod:`.baseline_worker`: torch.distributed all_to_all + weighted sum;
- :mod:`.selftest`: the protocol checker and fault suite in short, with broken kernels.
"""
