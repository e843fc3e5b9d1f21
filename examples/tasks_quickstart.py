"""Tasks and objects in a few lines: remote functions, object refs, nested tasks, errors, TPU chips.

    /usr/bin/python3 examples/tasks_quickstart.py      # on this machine's cluster, or a new local one

Replace `import torus` with `import ray as torus` and it runs on Ray too (but for the TPU part's label).
"""

import os

import torus


@torus.remote
def square(x):
    return x * x


@torus.remote
def total(refs):
    # Refs inside arguments stay refs: read them here.
    return sum(torus.get(refs))


@torus.remote
def fails():
    raise ValueError("a remote error keeps its type")


@torus.remote(resources={"TPU": 1})
def chip():
    return torus.get_runtime_context().get_node_id(), os.environ["TPU_VISIBLE_CHIPS"]


def main():
    torus.init()
    refs = [square.remote(i) for i in range(10)]
    print("squares:", torus.get(refs))
    print("sum in a task:", torus.get(total.remote(refs)))
    big = torus.put(list(range(1000)))
    print("put, then used by a task:", torus.get(square.remote(torus.get(big)[-1])))
    try:
        torus.get(fails.remote())
    except ValueError as e:
        print("caught:", e.args[0])
    if torus.cluster_resources().get("TPU", 0) >= 4:
        print("TPU chips:", sorted(torus.get([chip.remote() for _ in range(4)])))
    torus.shutdown()


if __name__ == "__main__":
    main()
