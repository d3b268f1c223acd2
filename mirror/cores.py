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
CLIs, the tests and the benches); a variable the user set is never changed. Inside one process the training slot
(one run at a time) and the search and encode slots (explorer.settings) decide what overlaps; each job uses every
core (measured: two jobs in one process with 1 thread each or 2 each take the same time).
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
    own defaults (what bench/bench_concurrency.py measures as "before")."""
    env = os.environ if env is None else env
    chosen: dict[str, str] = {}
    if env.get("MIRROR_SHARE_CORES", "").strip().lower() in ("0", "false", "no", "off"):
        return chosen
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        chosen["GOMP_SPINCOUNT"] = SPIN_COUNT
    if "KMP_BLOCKTIME" not in env:
        chosen["KMP_BLOCKTIME"] = BLOCK_TIME_MS
    env.update(chosen)
    return chosen
