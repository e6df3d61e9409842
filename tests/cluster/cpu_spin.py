#!/usr/bin/env python3
"""Spins for SECONDS of wall time and prints one JSON line: the MPI rank, the CPU seconds this
process used meanwhile, the wall seconds, its cpu cgroup and $WALLFACER_WAIT_POLL_US
(tests/cluster/test_cluster_cpu.sh)."""
import json
import os
import sys
import time

secs = float(sys.argv[1])
t0, c0 = time.time(), time.process_time()
while time.time() - t0 < secs:
    pass
cpu, wall = time.process_time() - c0, time.time() - t0
group = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
             if "cpu" in line.split(":")[1].split(","))
line = json.dumps({"rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1")), "cpu_s": cpu,
                   "wall_s": wall, "cgroup": group,
                   "wait_poll_us": os.environ.get("WALLFACER_WAIT_POLL_US", "")}) + "\n"
os.write(1, line.encode())  # one write: the launcher forwards it whole
