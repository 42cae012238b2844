"""The sub-commands of ``combine-lab``, in the order ``--help`` lists them, and the one-line help of
each: apart from their modules so that ``combine-lab --help`` and a sub-command's run import only
what they use (:func:`combine_lab.cli.build_parser`)."""

#: Sub-command name -> its one-line help (each module registers its parser with it).
HELP = {
    "run": "run one variant on a case or a sweep, check x_out, profile",
    "compare": "run classic and doubleplane (and each --kernel-source) on the same case(s); --perf "
               "files in <output-dir>/classic, <output-dir>/doubleplane, <output-dir>/<kernel label>",
    "diff": "compare two --perf runs case by case: which differences are beyond noise",
    "suggest": "modelled time at every SDMA floor where the plan changes, and the best floor",
    "calibrate": "fit a timing model's assumed parameters to measured perf CSVs",
    "probe": "microbenchmarks of the timing model's unknowns: one probe CSV for calibrate",
    "build": "build the driver, with your own kernel (--kernel-source), or your kernel folder's own "
             "main.cpp (--main; the twin, or --target npu), e.g. for the reference's run.sh",
    "selftest": "short protocol-checker and fault suite on the twin, one-screen report",
    "doctor": "versions, CANN, SHMEM, SDMA, NPUs, SoC: which targets and variants run here",
    "notebooks": "run the lab notebooks headless (papermill); keep executed copies and figures",
    "docs": "execute the walkthrough and render it with the docs pages as HTML",
    "lab": "JupyterLab on the lab notebooks with the lab's kernel (Ctrl-C stops it)",
    "app": "the tuning app alone in the browser (voila; Ctrl-C stops it)",
}
