# Sourced by bench/generate.sh and bench/generate_chunks.sh ($out set).
# prompt LENGTH: the seeded random prompt of LENGTH ids as a 1-D int32 .npy (its path).
prompt() {
  local f=$out/prompt-$1.npy
  [[ -f $f ]] || python3 - "$f" "$1" <<'PY'
import random, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(n)
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%di" % n, *(rng.randrange(257) for _ in range(n))))
PY
  echo "$f"
}
