"""tools/soak: a long run of a busy node that keeps its memory honest (issue 36; see
__main__ for the command, docs/OPERATIONS.md "Memory" for what it measures).

    soak_plan.py        SoakPlan: the load's knobs, its topics and the node's settings
    load_mix.py         LoadMix: producers, deletes, watchers, workers, routers, churn
    process_sampler.py  each node process's anonymous memory, PSS, descriptors, threads
    growth_verdict.py   the steady window, growth by robust trends, bytes per record
    soak_run.py         SoakRun: the node, the idle figures, the samples, the verdict
"""
