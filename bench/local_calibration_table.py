#!/usr/bin/env python3
"""What `tune --calibrate` wrote into a cluster file, as a markdown table:
local_calibration_table.py FILE (configs/clusters/local.toml).

The rates each rank computes at (the slowest rank's, as written), the attention kernels' rates by
head dim and the link that the ping-pong's fit gave. The calibration's
own printout (every ping-pong size, the all-gather check) is not kept: `mpirun -np 2 wallfacer tune
--calibrate` prints it on the machine at hand."""
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    c = tomllib.load(f)
d = c["device"]
print("| what | rate per rank |")
print("|---|---:|")
print(f"| sgemm (`gemm_flops`) | {d['gemm_flops'] / 1e9:.2f} GFLOP/s |")
dims = d["attention_head_dims"]
fwd, bwd = d["attention_fwd_flops_by_head_dim"], d["attention_bwd_flops_by_head_dim"]
for hd, fw, bw in zip(dims, fwd, bwd):
    print(f"| flash attention, head dim {hd}: forward / backward | "
          f"{fw / 1e9:.2f} / {bw / 1e9:.2f} GFLOP/s |")
print(f"| flash attention forward + backward (`attention_flops`) | "
      f"{d['attention_flops'] / 1e9:.2f} GFLOP/s |")
print(f"| kernel tile (query x key rows) | {d['attention_tile_q']} x {d['attention_tile_k']} |")
link = c["links"]["intra"]
print(f"| link between ranks (ping-pong fit): latency, bandwidth | "
      f"{link['latency'] * 1e6:.2f} us, {link['bandwidth'] / 1e9:.2f} GB/s |")
print(f"\n{c.get('description', '')}. From head dim {dims[0]} to {dims[-1]} the forward rises from "
      f"{fwd[0] / 1e9:.0f} to {fwd[-1] / 1e9:.0f} GFLOP/s, the backward from {bwd[0] / 1e9:.0f} to "
      f"{bwd[-1] / 1e9:.0f}.")
