"""wallfacer.plan against `wallfacer plan --json`: the same list of configurations (every key and
value) from file paths and from dicts of the same files, and the CLI's messages for bad input.

    python3 tests/python/test_plan.py WALLFACER_CLI REPO_ROOT
"""

import json
import os
import subprocess
import sys
import tomllib

import wallfacer
from checks import cli_message, error_of, expect, failures

cli, root = sys.argv[1], sys.argv[2]
checked = 0


runs = [
    ("configs/clusters/a100-40gb-8x4-eth100.toml", "configs/models/gpt-7b.toml", "131072", 8),
    ("configs/clusters/h100-80gb-8x8-ib.toml", "configs/models/dit-1b.toml", "64K", 16),
    ("configs/clusters/local.toml", "tests/plan/tiny.toml", "4096", None),
]
for cluster, model, seq, gpus in runs:
    c, m = os.path.join(root, cluster), os.path.join(root, model)
    args = ["--cluster", c, "--model", m, "--seq", seq, "--json"]
    if gpus:
        args += ["--gpus", str(gpus)]
    out = subprocess.run([cli, "plan", *args], capture_output=True, text=True)
    expect(out.returncode == 0, f"plan {args}: exit {out.returncode}: {out.stderr}")
    want = json.loads(out.stdout)["configs"]
    seq_arg = int(seq) if seq.isdigit() else seq
    got = wallfacer.plan(c, m, seq_arg, gpus=gpus)
    expect(got == want, f"plan {cluster} {model} {seq}: differs from plan --json")
    with open(c, "rb") as f:
        cd = tomllib.load(f)
    with open(m, "rb") as f:
        md = tomllib.load(f)
    got_dict = wallfacer.plan(cd, md, seq_arg, gpus=gpus)
    expect(got_dict == want, f"plan of dicts {cluster} {model} {seq}: differs from plan --json")
    expect(len(want) > 0 and all("tokens_per_s" in p or "feasible" in p for p in want),
           f"plan {cluster}: no configurations")
    checked += 1
    print(f"plan {os.path.basename(cluster)} {os.path.basename(model)} seq {seq}: "
          f"{len(want)} configurations equal to plan --json (paths and dicts)")


c = os.path.join(root, "configs/clusters/local.toml")
m = os.path.join(root, "tests/plan/tiny.toml")
bad = [
    (["--cluster", c + ".missing", "--model", m, "--seq", "4096"],
     lambda: wallfacer.plan(c + ".missing", m, 4096)),
    (["--cluster", c, "--model", m, "--seq", "4Q"], lambda: wallfacer.plan(c, m, "4Q")),
    (["--cluster", c, "--model", m, "--seq", "4096", "--gpus", "1000"],
     lambda: wallfacer.plan(c, m, 4096, gpus=1000)),
]
for args, f in bad:
    rc, want = cli_message(cli, "plan", *args)
    got = error_of(f)
    expect(rc == 2 and got == want, f"plan {args}: Python says {got!r}, the CLI {want!r} (exit {rc})")
    checked += 1
# A dict with a bad key: the same check as the file's, naming the dict.
with open(c, "rb") as f:
    cd = tomllib.load(f)
cd["nodes"]["count"] = 0
msg = error_of(lambda: wallfacer.plan(cd, m, 4096))
expect(msg is not None and "cluster (dict)" in msg, f"bad dict: {msg!r}")
for f in (lambda: wallfacer.plan(42, m, 4096), lambda: wallfacer.plan(c, m, 4096.5)):
    expect(error_of(f, TypeError) is not None, "TypeError")

for f in failures:
    print("FAIL:", f)
print(f"plan: {checked} checks, {len(failures)} failures" if failures else
      f"plan: all {checked} checks ok")
sys.exit(1 if failures else 0)
