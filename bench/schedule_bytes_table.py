#!/usr/bin/env python3
"""The table of docs/results.md "Bytes and steps per rank" from bench/schedule_bytes.sh's JSON
lines: schedule_bytes_table.py docs/data/schedule-bytes.jsonl (MiB per rank, the maximum over
ranks; P2P rounds; work imbalance)."""
import json
import sys

print("| P | H_kv | strategy | P2P fwd | coll fwd | P2P bwd | coll bwd | P2P rounds fwd | "
      "P2P rounds bwd | work imbalance |")
print("|---|---|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    j = json.loads(line)["output"]
    name = f"wallfacer-{j['C']}" if j["strategy"] == "wallfacer" else j["strategy"]
    mib = {k: f"{round(v / 2**20):,}" for k, v in j["bytes"].items()}
    print(f"| {j['P']} | {j['kv_heads']} | {name} | {mib['p2p_fwd']} | {mib['coll_fwd']} | "
          f"{mib['p2p_bwd']} | {mib['coll_bwd']} | {j['steps']['p2p_fwd']} | "
          f"{j['steps']['p2p_bwd']} | {j['work_imbalance']:.4f} |")
