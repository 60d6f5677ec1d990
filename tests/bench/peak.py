"""`python -S tests/bench/peak.py OUT CMD…`: run CMD, write its wall seconds and peak RSS to OUT.

A child's peak RSS (ru_maxrss) counts the memory of the process it was spawned from: the
kernel records the spawning process's high-water mark when the child execs. The benchmark
holds thousands of pods' worth of objects, so it spawns this small launcher (stdlib only,
run without site) and the launcher spawns CMD: what is reported is CMD's own peak.
"""

import json
import os
import sys
import time


def main(out: str, argv: list[str]) -> None:
    """Spawn `argv` with stdin, stdout and stderr on /dev/null; report when it ends."""
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    began = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=null)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - began
    report = {
        "seconds": seconds,
        "status": os.waitstatus_to_exitcode(status),
        "peak_kib": usage.ru_maxrss,
    }
    with open(out, "w") as file:
        json.dump(report, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
