# Sourced by the GPT benchmarks (bench/gpt_common.sh, bench/documents_train.sh).
# gpt_toml FILE DATA writes the GPT they time: $layers layers of width $dim, $heads heads (as many
# K,V heads), sequences of $seq tokens, batch 1, the token data in DATA. The [train] table comes
# last: a caller appends its own train keys (and any further tables) to FILE.
gpt_toml() {
  cat > "$1" <<TOML
[model]
layers = $layers
dim = $dim
heads = $heads
kv_heads = $heads
[data]
dir = "$2"
[train]
seq = $seq
batch = 1
TOML
}
