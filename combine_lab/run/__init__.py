"""Running a case on a target (the CPU twin or an Ascend NPU) and checking what came back.

- :mod:`.toolchain`: CANN, SHMEM, SoC and NPUs as found from the environment;
- :mod:`.build`: CMake builds of the host driver and kernel, reused until a source changes;
- :mod:`.capabilities`: one table of what can run here (targets, variants, baselines);
- :mod:`.launch`: one process per PE, timeouts, cleanup;
- :mod:`.runner`: :func:`run_case`, :class:`RunResult` (the files it reads and writes: :mod:`combine_lab.formats`);
- :mod:`.baseline`, :mod:`.baseline_worker`: torch.distributed all_to_all + weighted sum;
- :mod:`.selftest`: the protocol checker and fault suite in short, with broken kernels.
"""
