# Sourced by the Llama benchmarks (bench/llama_train.sh, bench/llama_sp.sh).
# llama_model_toml FILE writes the [model] table of a Llama-family model (model.arch = "llama"):
# $layers layers of width $dim, $heads heads with $kv K,V heads, a SwiGLU MLP of $inter, $vocab
# tokens, RMSNorm eps 1e-5, an untied LM head, rope_theta 500000. The caller appends its own keys
# of the model (rope_scaling, ...) and the further tables to FILE.
llama_model_toml() {
  cat > "$1" <<TOML
[model]
arch = "llama"
layers = $layers
dim = $dim
heads = $heads
kv_heads = $kv
intermediate = $inter
vocab = $vocab
norm_eps = 1e-5
tie_embeddings = false
rope_theta = 500000.0
TOML
}
