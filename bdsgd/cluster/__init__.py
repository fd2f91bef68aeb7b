"""The virtual cluster: one process standing in for n workers and a server, on a clock fed by a
run-time trace. Every number the project publishes is measured on it.

    compute.py    how a trace's run-times become seconds (one time base)
    network.py    when an iteration ends given when its gradients are done; fabrics
    cutoff.py     what the server sees at a cutoff; throughput and the hindsight optima
    clock.py      late workers: finish or abandon, and the worker-time they spend
    schedules.py  the training modes without a cutoff (async, cyclic): their event schedules
    server.py     the server's loop: decide, run the iteration, observe; replay
    virtual.py    the cluster built once from the config, for every stage that replays
"""
