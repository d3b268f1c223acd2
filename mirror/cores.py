"""How this process shares the machine's cores with other work: the one home of the thread and wait policy.

PyTorch's CPU wheels on Linux (GNU OpenMP), numba's parallel loops (umap-learn's layouts: the system's GNU OpenMP, a
second runtime in the same process) and FAISS keep worker threads that, by default, spin for ~300,000 iterations
each time they wait for the next parallel region. Two such thread teams on the same cores, in two processes (a CLI
job beside the app, the suite's workers and the servers they start, torchrun ranks on a CPU, a Space's replica) or
two runtimes in one process, burn each other's time: on 2 cores two training runs at once took 4.6x their time alone
each, not 2x. A short spin keeps a job alone as fast and shares the cores: the same two runs took 1.7x each, with
less CPU in all than the two alone (bench/RESULTS.md "Shared cores"); no spin at all (OMP_WAIT_POLICY=PASSIVE)
shares as well but costs a job alone ~13%.

`share_cores()` sets that policy in the environment, where the OpenMP runtimes read it once, as they load: so before
torch, numba or faiss is imported. `import mirror` calls it (every entry point imports mirror first: the app, the
CLIs, the tests and the benches); a variable the user set is never changed.

Inside one process (the app's server) long background work and short interactive work take turns: explorer.resources.turns
(the engine only offers the places to wait: mirror.hooks). A
run of any kind (a training's steps, index builds and checks; a blend's or an upload's encoding and checks: its
thread, explorer.runs.execute) is background; a map's layout, an export, an evaluation are
interactive, asked for by someone waiting at the page. While interactive work runs, background work pauses at its
next step or encode batch (`mirror.hooks.pause()`, a few seconds at most away), so the interactive job has the cores to
itself and the run goes on after it: measured on 2 cores, a run and a 20k-string map at once took 3.2x and 2.4x their
times alone when they overlapped (torch's, numba's and FAISS's thread teams on two cores wait on each other at every
parallel region), against 1.0x for the map and ~1.6x for the run taking turns (bench/RESULTS.md "Shared cores").
Searches are neither: short, bounded by their own slots, they overlap with anything (their p50 during a run: ~1x
idle). Each job uses every core; dividing the threads between jobs was slower (a training and a layout at 1 thread
each: 1.15x the time of 2 threads each).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# GNU OpenMP (torch on Linux, numba's omp layer, faiss): spin this many iterations (a few microseconds), then sleep
SPIN_COUNT = "1000"
# Intel's and LLVM's OpenMP (MKL's own runtime, torch on macOS): sleep after 1 ms instead of 200 ms
BLOCK_TIME_MS = "1"


def share_cores(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the wait policy in `env` (os.environ) where the user has not set one; returns what it set. Only takes
    effect in runtimes loaded afterwards (and in every child process). MIRROR_SHARE_CORES=0 leaves the runtimes'
    own defaults, and turns off (what bench/bench_concurrency.py measures as "before")."""
    env = os.environ if env is None else env
    chosen: dict[str, str] = {}
    if sharing_off(env):
        return chosen
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        chosen["GOMP_SPINCOUNT"] = SPIN_COUNT
    if "KMP_BLOCKTIME" not in env:
        chosen["KMP_BLOCKTIME"] = BLOCK_TIME_MS
    env.update(chosen)
    return chosen


def sharing_off(env: MutableMapping[str, str] | None = None) -> bool:
    """MIRROR_SHARE_CORES=0: the runtimes' own wait policies, and no turns (jobs in one process overlap)."""
    return (os.environ if env is None else env).get("MIRROR_SHARE_CORES", "").strip().lower() in (
        "0",
        "false",
        "no",
        "off",
    )


