#!/usr/bin/env python3
"""Reference fixtures for the Llama-family models, computed by Hugging Face transformers itself.

Builds tiny random-weight models with transformers (fixed seeds, fp32, eager attention) and writes
one folder per configuration under --out (tests/golden/hf/README.md says what each file holds):
  config.json, generation_config.json, model.safetensors   as save_pretrained writes them
  tokens.npy              int64 (batch, seq + 1): inputs [:, :-1], targets [:, 1:]
  logits.npy              float32 (batch, seq, vocab)
  loss.json               mean next-token cross-entropy over the batch * seq targets
  grads.safetensors       the gradient of that loss for every parameter, under the HF names
  loss_after_adamw.json   the loss after one torch.optim.AdamW step, with its settings
  adamw_weights.safetensors  a few parameters after that step
  greedy.json             (llama3, qwen2, mistral) transformers' greedy generate: GREEDY_NEW new
                          ids after the first GREEDY_PROMPT ids of tokens.npy's first row

Generating is no part of the build or the tests: it needs torch and transformers from PyPI in a virtual
environment, which this script can make (CPU only; see make_venv):
  python3 tests/golden/gen_hf_fixtures.py --make-venv /work/.venv-hf
  /work/.venv-hf/bin/python tests/golden/gen_hf_fixtures.py --out tests/golden/hf
Verify mode, standard library only (the test golden_hf_fixture_files): every committed file whole
and consistent with its config.json:
  python3 tests/golden/gen_hf_fixtures.py --verify tests/golden/hf
Greedy mode: write greedy.json into existing fixture folders (the other files untouched):
  /work/.venv-hf/bin/python tests/golden/gen_hf_fixtures.py --greedy tests/golden/hf/llama3 ...
Check mode: compare the logits of a Hugging Face folder (e.g. one that `wallfacer export-hf`
wrote) with given ones; exit 1 when the largest difference exceeds --tol of the largest logit:
  /work/.venv-hf/bin/python tests/golden/gen_hf_fixtures.py --check HF_DIR \\
      --tokens tests/golden/hf/llama3/tokens.npy --logits tests/golden/hf/llama3/logits.npy
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The versions the committed fixtures were made with (transformers 4.x writes config.json with
# `rope_theta` and `rope_scaling`, as the published Llama 3 / Qwen2 / Mistral checkpoints have it).
PINS = {"torch": "2.15.0", "transformers": "4.57.6", "safetensors": "0.8.0", "numpy": "2.4.6"}
# torch's own pure-Python requirements (its wheel is installed without its CUDA requirements).
TORCH_PURE_DEPS = ["filelock", "typing-extensions>=4.13.0", "setuptools>=77.0.3", "sympy>=1.13.3",
                   "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5"]

BATCH, SEQ = 2, 32
ADAMW = {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
DECAY_RULE = ("weight_decay applies to the parameters with 2 or more dimensions (embedding, LM head, "
              "projections); 0 for the 1-D ones (RMSNorm weights, q/k/v biases)")
LOSS_REDUCTION = ("mean over all batch * seq targets of the cross-entropy of the fp32 logits: "
                  "torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), "
                  "tokens[:, 1:].reshape(-1), reduction='mean')")

COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
              hidden_act="silu", bos_token_id=1, eos_token_id=2)

# name: (class name, config overrides, seed)
FIXTURES = {
    "llama3": ("LlamaForCausalLM", dict(
        max_position_embeddings=512, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}), 101),
    "qwen2": ("Qwen2ForCausalLM", dict(
        max_position_embeddings=128, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False), 102),
    "mistral": ("MistralForCausalLM", dict(
        max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=False,
        sliding_window=8), 103),
    "llama-linear": ("LlamaForCausalLM", dict(
        max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "linear", "factor": 2.0}), 104),
    # Qwen2 with a sliding window on some layers: layer_types [full, sliding].
    "qwen2-window": ("Qwen2ForCausalLM", dict(
        max_position_embeddings=128, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=True, sliding_window=8, max_window_layers=1), 105),
}
# llama-docs: the llama3 configuration on packed documents (lengths over the SEQ input positions).
DOCS = [[13, 19], [5, 16, 11]]
DOCS_RULE = ("packed documents: each attends only to itself, and the reference runs each alone "
             "through the model (rotary positions from 0 in each document); eos_token_id is the "
             "last input token of every document but a row's last, and its target (the next "
             "document's first token) stays in the loss")
# Parameters whose values after the AdamW step are written to adamw_weights.safetensors.
ADAMW_SAVED = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.input_layernorm.weight",
               "model.layers.0.self_attn.k_proj.bias"]


# ------------------------------------------------------------------------------------------------
# The virtual environment: torch's Linux wheel from PyPI is a CUDA build that requires some GB of
# nvidia-* / cuda-* packages. It is installed here without them; the CUDA libraries it links are
# replaced by stand-ins (every function returns an error code, so torch sees no device), built
# with the system's gcc and binutils into torch/lib, where torch's RPATH ($ORIGIN) finds them.
# ------------------------------------------------------------------------------------------------
def _run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def _lines(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()


def build_cuda_stand_ins(torch_lib):
    marker = os.path.join(torch_lib, "cuda-stand-ins.txt")  # those of an earlier run
    earlier = open(marker).read().split() if os.path.exists(marker) else []
    libs = sorted(f for f in os.listdir(torch_lib) if ".so" in f and f not in earlier)
    libs += [os.path.join("..", f) for f in os.listdir(os.path.join(torch_lib, ".."))
             if f.startswith("_C") and f.endswith(".so")]
    system = set(l.split()[0] for l in _lines(["ldconfig", "-p"])[1:] if l.strip())
    needed, version_file, undefined, defined = set(), {}, set(), set()
    for lib in libs:
        path = os.path.join(torch_lib, lib)
        for l in _lines(["readelf", "-d", "-W", path]):
            m = re.search(r"\(NEEDED\).*\[(.+)\]", l)
            if m:
                needed.add(m.group(1))
        current = None
        for l in _lines(["readelf", "-V", "-W", path]):
            m = re.search(r"File: (\S+)", l)
            if m:
                current = m.group(1)
            m = re.search(r"Name: (\S+)\s+Flags", l)
            if m and current:
                version_file[m.group(1)] = current
        for l in _lines(["nm", "-D", "--undefined-only", "--with-symbol-versions", path]):
            undefined.add(l.split()[-1])
        for l in _lines(["nm", "-D", "--defined-only", path]):
            defined.add(l.split()[-1].split("@")[0])
    present = set(libs)
    # Every CUDA library gets a stand-in, also where a CUDA toolkit is installed (its version may
    # not be the one torch was built with); any other library must be on the system.
    cuda_lib = re.compile(r"^lib(cu|nccl|nvrtc|nvshmem|nvJitLink|nvToolsExt)")
    missing = sorted(n for n in needed if n not in present and cuda_lib.match(n))
    absent = sorted(n for n in needed if n not in present and n not in system and n not in missing)
    if absent:
        sys.exit(f"torch needs {', '.join(absent)}, which this system does not have")
    cuda_name = re.compile(r"^(cu|nccl|nvrtc|nvshmem|__cuda)")
    per_lib, symbols = {m: {} for m in missing}, set()
    for u in undefined:
        name, _, version = u.partition("@")
        if name in defined:
            continue
        if version and version_file.get(version) in per_lib:
            per_lib[version_file[version]].setdefault(version, set()).add(name)
            symbols.add(name)
        elif not version and cuda_name.match(name):
            symbols.add(name)
    print(f"CUDA stand-ins for {', '.join(missing)}: {len(symbols)} functions", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "stub.c")
        with open(src, "w") as f:
            f.write('static const char msg[] = "CUDA is not available (stand-in library)";\n')
            for s in sorted(symbols):
                if re.search(r"Error(String|Name)|StatusString|GetStatusName", s):
                    f.write(f"const char* {s}(void) {{ return msg; }}\n")
                else:  # 100 is cudaErrorNoDevice
                    f.write(f"long {s}(void) {{ return 100; }}\n")
        obj = os.path.join(tmp, "stub.o")
        _run(["gcc", "-O1", "-fPIC", "-c", src, "-o", obj])
        for soname in missing:
            script = os.path.join(tmp, soname + ".map")
            with open(script, "w") as f:
                for version, names in sorted(per_lib[soname].items()):
                    f.write(version + " {\n  global:\n" + "".join(f"    {n};\n" for n in sorted(names))
                            + "};\n")
                if not per_lib[soname]:
                    f.write("{ global: *; };\n")
            subprocess.run(["gcc", "-shared", "-o", os.path.join(torch_lib, soname), obj,
                            "-Wl,-soname," + soname, "-Wl,--version-script," + script], check=True)
    with open(marker, "w") as f:
        f.write("\n".join(missing) + "\n")


def make_venv(path):
    import venv
    if not os.path.exists(os.path.join(path, "bin", "python")):
        venv.create(path, with_pip=True)
    py = os.path.join(path, "bin", "python")
    pip = [py, "-m", "pip", "install", "--quiet"]
    _run(pip + ["--no-deps", "torch==" + PINS["torch"]])
    _run(pip + TORCH_PURE_DEPS + [f"{p}=={v}" for p, v in PINS.items() if p != "torch"])
    torch_lib = _lines([py, "-c", "import importlib.util, os; "
                        "print(os.path.join(os.path.dirname(importlib.util.find_spec('torch').origin), 'lib'))"])[-1]
    build_cuda_stand_ins(torch_lib)
    _run([py, "-c", "import torch, transformers; x = torch.randn(4, 4, requires_grad=True); "
          "(x @ x).sum().backward(); print('torch', torch.__version__, 'transformers', "
          "transformers.__version__, 'cuda available:', torch.cuda.is_available())"])
    print(f"ready: {py} {os.path.relpath(__file__)} --out tests/golden/hf")


# ------------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------------
def _setup_torch():
    import torch
    torch.set_num_threads(1)  # one reduction order: the same bytes every run
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    return torch


def build_model(class_name, overrides, seed, layers=None):
    torch = _setup_torch()
    import transformers
    cls = getattr(transformers, class_name)
    cfg = dict(COMMON, **overrides)
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    config = cls.config_class(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    # Every parameter random and O(1) in effect (transformers' own init leaves the norms at 1 and the
    # biases at 0, where a missing norm weight or bias would go unnoticed).
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    return model


def next_token_loss(torch, model, tokens, docs=None):
    """docs: per batch row, the lengths of its documents over the seq input positions; each runs
    through the model alone (positions from 0), its logits in place."""
    if docs is None:
        logits = model(input_ids=tokens[:, :-1]).logits
    else:
        rows = []
        for b, lengths in enumerate(docs):
            starts = [sum(lengths[:d]) for d in range(len(lengths))]
            rows.append(torch.cat([model(input_ids=tokens[b:b + 1, a:a + n]).logits
                                   for a, n in zip(starts, lengths)], dim=1))
        logits = torch.cat(rows, dim=0)
    vocab = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1),
                                             reduction="mean")
    return logits, loss


def _rel(a, b):
    return float((a.detach() - b.detach()).abs().max() / b.detach().abs().max())


def write_fixture(out_dir, name, class_name, overrides, seed, docs=None):
    torch = _setup_torch()
    import numpy as np
    import safetensors.torch
    model = build_model(class_name, overrides, seed)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed + 1000)
    tokens = torch.randint(0, vocab, (BATCH, SEQ + 1), generator=g, dtype=torch.int64)
    eos = model.config.eos_token_id
    if docs is not None:  # eos ends every document but the last of a row, and nowhere else
        tokens[tokens == eos] = eos + 1
        for b, lengths in enumerate(docs):
            assert sum(lengths) == SEQ
            for d in range(len(lengths) - 1):
                tokens[b, sum(lengths[:d + 1]) - 1] = eos

    folder = os.path.join(out_dir, name)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder, safe_serialization=True)
    np.save(os.path.join(folder, "tokens.npy"), tokens.numpy())

    logits, loss = next_token_loss(torch, model, tokens, docs)
    loss.backward()
    np.save(os.path.join(folder, "logits.npy"), logits.detach().numpy().astype(np.float32))
    grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()}
    safetensors.torch.save_file(grads, os.path.join(folder, "grads.safetensors"))

    # The same model in float64: how far fp32 transformers is from exact, for the tolerances.
    m64 = build_model(class_name, overrides, seed).to(torch.float64)
    logits64, loss64 = next_token_loss(torch, m64, tokens, docs)
    loss64.backward()
    grad_err = max(_rel(grads[n].double(), p.grad) for n, p in m64.named_parameters())
    extra = {}
    if docs is not None:
        extra = {"doc_lengths": docs, "eos_token_id": eos, "documents": DOCS_RULE}
    with open(os.path.join(folder, "loss.json"), "w") as f:
        json.dump({**extra, "loss": loss.item(), "reduction": LOSS_REDUCTION, "batch": BATCH, "seq": SEQ,
                   "targets": BATCH * SEQ, "loss_fp64": loss64.item(),
                   "fp32_vs_fp64": {"logits_max_abs_rel_to_largest": _rel(logits.double(), logits64),
                                    "grads_max_abs_rel_to_largest": grad_err}}, f, indent=1)
        f.write("\n")

    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"],
                            foreach=False, fused=False)
    opt.step()  # the gradients above
    with torch.no_grad():
        _, loss_after = next_token_loss(torch, model, tokens, docs)
    params = dict(model.named_parameters())
    saved = {n: params[n].detach().clone().contiguous() for n in ADAMW_SAVED if n in params}
    safetensors.torch.save_file(saved, os.path.join(folder, "adamw_weights.safetensors"))
    with open(os.path.join(folder, "loss_after_adamw.json"), "w") as f:
        json.dump({"loss_before": loss.item(), "loss_after": loss_after.item(),
                   "optimizer": "torch.optim.AdamW, one step, foreach=False, fused=False, "
                                "amsgrad=False, maximize=False",
                   **ADAMW, "decay_rule": DECAY_RULE,
                   "weights_after": sorted(saved)}, f, indent=1)
        f.write("\n")
    print(f"{name}: loss {loss.item():.6f} -> {loss_after.item():.6f} after AdamW, "
          f"{sum(p.numel() for p in model.parameters())} parameters, "
          f"fp32 vs fp64 logits {_rel(logits.double(), logits64):.2e}, grads {grad_err:.2e}")


def rope_inv_freq(cfg):
    """inv_freq by the formulas tests/golden/hf/README.md states (float64)."""
    d = cfg["head_dim"]
    inv = [1.0 / cfg["rope_theta"] ** (2 * i / d) for i in range(d // 2)]
    sc = cfg.get("rope_scaling") or {"rope_type": "default"}
    kind = sc.get("rope_type", sc.get("type"))
    if kind == "linear":
        inv = [f / sc["factor"] for f in inv]
    elif kind == "llama3":
        old, lo, hi, fac = (sc["original_max_position_embeddings"], sc["low_freq_factor"],
                            sc["high_freq_factor"], sc["factor"])
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < old / hi:
                out.append(f)
            elif wl > old / lo:
                out.append(f / fac)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / fac + s * f)
        inv = out
    return inv


def independent_logits(folder, docs=None):
    """The model of folder, written out from the README's facts, in float64, with the rotary pairs
    interleaved ((2i, 2i + 1)) after permuting the q/k rows within each head, documents masked in
    one pass at global positions. Returns the largest difference from logits.npy over its largest."""
    torch = _setup_torch()
    import numpy as np
    import safetensors.torch
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = {k: v.double() for k, v in safetensors.torch.load_file(os.path.join(folder, "model.safetensors")).items()}
    tokens = torch.from_numpy(np.load(os.path.join(folder, "tokens.npy")))[:, :-1]
    ref = torch.from_numpy(np.load(os.path.join(folder, "logits.npy"))).double()
    B, S = tokens.shape
    H, HKV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    perm = [h * D + (i // 2 if i % 2 == 0 else D // 2 + i // 2) for h in range(H) for i in range(D)]
    perm_kv = perm[:HKV * D]  # row h*D + i of the interleaved layout is row perm[...] of HF's
    inv = torch.tensor(rope_inv_freq(cfg), dtype=torch.float64)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]  # (S, D/2)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]

    def rope(x):  # x (B, S, h, D), pairs (2i, 2i + 1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).reshape(x.shape)

    def rms(x, g):
        return g * x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg["rms_norm_eps"])

    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    doc = torch.zeros(B, S, dtype=torch.int64)
    if docs is not None:
        for b, lengths in enumerate(docs):
            doc[b] = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    same_doc = doc[:, :, None] == doc[:, None, :]  # (B, S, S)
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        types = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
        window = cfg.get("sliding_window")
        if cfg["model_type"] == "qwen2" and types[l] != "sliding_attention":
            window = None
        keep = (j <= i) & ((j > i - window) if window else True)
        keep = keep[None] & same_doc
        h = rms(x, w[p + "input_layernorm.weight"])

        def proj(name, rows):
            y = h @ w[p + f"self_attn.{name}_proj.weight"][rows].T
            b = w.get(p + f"self_attn.{name}_proj.bias")
            return y if b is None else y + b[rows]
        q = rope(proj("q", perm).reshape(B, S, H, D))
        k = rope(proj("k", perm_kv).reshape(B, S, HKV, D))
        v = proj("v", list(range(HKV * D))).reshape(B, S, HKV, D)
        k, v = k.repeat_interleave(H // HKV, 2), v.repeat_interleave(H // HKV, 2)
        # The rows of q were permuted, not its heads: o_proj's input layout is v's, unchanged.
        att = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D)
        att = att.masked_fill(~keep[:, None], float("-inf")).softmax(-1)
        o = torch.einsum("bhij,bjhd->bihd", att, v).reshape(B, S, H * D)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    logits = x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    return float((logits - ref).abs().max() / ref.abs().max())


def adamw_formula_error(folder):
    """The README's AdamW update from model.safetensors and grads.safetensors, in float64, against
    adamw_weights.safetensors: the largest difference."""
    import safetensors.torch
    w0 = safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))
    g = safetensors.torch.load_file(os.path.join(folder, "grads.safetensors"))
    w1 = safetensors.torch.load_file(os.path.join(folder, "adamw_weights.safetensors"))
    lr, (b1, b2), eps = ADAMW["lr"], ADAMW["betas"], ADAMW["eps"]
    err = 0.0
    for n, after in w1.items():
        p, gr = w0[n].double(), g[n].double()
        wd = ADAMW["weight_decay"] if p.dim() >= 2 else 0.0
        m, v = (1 - b1) * gr, (1 - b2) * gr * gr  # step 1 from zero state
        new = p * (1 - lr * wd) - lr / (1 - b1) * m / (v.sqrt() / math.sqrt(1 - b2) + eps)
        err = max(err, float((new - after.double()).abs().max()))
    return err


def window_rule(overrides, seed):
    """The keys a query sees in transformers' sliding window, measured: a one-layer Mistral, one
    token changed at position p; the outputs that change are those of the queries that see p."""
    torch = _setup_torch()
    model = build_model("MistralForCausalLM", overrides, seed, layers=1)
    window = model.config.sliding_window
    g = torch.Generator().manual_seed(7)
    a = torch.randint(0, model.config.vocab_size, (1, SEQ), generator=g)
    b = a.clone()
    p = 5
    b[0, p] = (a[0, p] + 1) % model.config.vocab_size
    with torch.no_grad():
        diff = (model(input_ids=a).logits - model(input_ids=b).logits).abs().amax(-1)[0]
    seen_by = [i for i in range(SEQ) if diff[i] > 0]
    expected = [i for i in range(SEQ) if i - window < p <= i]
    assert seen_by == expected, (seen_by, expected)
    return window, seen_by, p


GREEDY_FIXTURES = ("llama3", "qwen2", "mistral")
GREEDY_PROMPT, GREEDY_NEW = 24, 8


def write_greedy(folder):
    """greedy.json: transformers' greedy generate (no end-of-text stop) of GREEDY_NEW ids after
    the first GREEDY_PROMPT ids of tokens.npy's first row, and each step's gap between the largest
    and the second largest logit (how far the choice is from a tie)."""
    torch = _setup_torch()
    import numpy as np
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = torch.from_numpy(np.load(os.path.join(folder, "tokens.npy")))[:1, :GREEDY_PROMPT]
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW, pad_token_id=0)
        logits = model(input_ids=out[:, :-1]).logits[0, GREEDY_PROMPT - 1:]
    top = torch.topk(logits, 2, dim=-1).values
    record = {"prompt": prompt[0].tolist(), "new_tokens": out[0, GREEDY_PROMPT:].tolist(),
              "logit_gaps": [float(g) for g in (top[:, 0] - top[:, 1])],
              "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
    with open(os.path.join(folder, "greedy.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"{folder}: greedy {record['new_tokens']}, smallest logit gap "
          f"{min(record['logit_gaps']):.3g}")


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, (class_name, overrides, seed) in FIXTURES.items():
        write_fixture(out_dir, name, class_name, overrides, seed)
    class_name, overrides, _ = FIXTURES["llama3"]
    write_fixture(out_dir, "llama-docs", class_name, overrides, 106, docs=DOCS)
    for name in list(FIXTURES) + ["llama-docs"]:
        err = independent_logits(os.path.join(out_dir, name), DOCS if name == "llama-docs" else None)
        print(f"{name}: the README's formulas (float64, interleaved rotary pairs after permuting "
              f"q/k rows) against logits.npy: {err:.2e} of the largest logit")
        assert err < 1e-5, name
        err = adamw_formula_error(os.path.join(out_dir, name))
        print(f"{name}: the README's AdamW update against torch's: {err:.1e} at most")
        assert err < 1e-6, name
    for name in GREEDY_FIXTURES:
        write_greedy(os.path.join(out_dir, name))
    window, seen_by, p = window_rule(FIXTURES["mistral"][1], FIXTURES["mistral"][2])
    print(f"sliding window {window}: key {p} is seen by queries {seen_by} "
          f"(query i keeps keys j with i - {window} < j <= i)")


# ------------------------------------------------------------------------------------------------
# Verify mode (standard library only; a test runs it): the committed files are whole and agree with
# each other and with config.json.
# ------------------------------------------------------------------------------------------------
def expected_tensors(cfg):
    """name -> shape of every parameter of a Llama / Qwen2 / Mistral config, as transformers names them."""
    h, v, i = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    out = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [v, h]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                    p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                    p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                    p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                    p + "mlp.down_proj.weight": [h, i]})
        if bias:
            out.update({p + "self_attn.q_proj.bias": [q], p + "self_attn.k_proj.bias": [kv],
                        p + "self_attn.v_proj.bias": [kv]})
    return out


def read_safetensors_header(path):
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32" and a == end and b - a == 4 * math.prod(t["shape"]), (path, name)
        end = b
    assert 8 + n + end == len(data), path
    return {name: t["shape"] for name, t in header.items()}


def read_npy_header(path):
    import ast
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    n = int.from_bytes(data[8:10], "little")
    h = ast.literal_eval(data[10:10 + n].decode())
    size = {"<i8": 8, "<f4": 4}[h["descr"]]
    assert not h["fortran_order"] and len(data) == 10 + n + size * math.prod(h["shape"]), path
    return h["descr"], list(h["shape"]), data[10 + n:]


def verify(root):
    import struct
    folders = sorted(f for f in os.listdir(root) if os.path.exists(os.path.join(root, f, "config.json")))
    for name in folders:
        folder = os.path.join(root, name)
        cfg = json.load(open(os.path.join(folder, "config.json")))
        want = expected_tensors(cfg)
        assert read_safetensors_header(os.path.join(folder, "model.safetensors")) == want, name
        assert read_safetensors_header(os.path.join(folder, "grads.safetensors")) == want, name
        after = read_safetensors_header(os.path.join(folder, "adamw_weights.safetensors"))
        assert all(want[n] == s for n, s in after.items()), name
        descr, shape, raw = read_npy_header(os.path.join(folder, "tokens.npy"))
        assert descr == "<i8" and len(shape) == 2, name
        tokens = struct.unpack(f"<{math.prod(shape)}q", raw)
        assert all(0 <= t < cfg["vocab_size"] for t in tokens), name
        b, s = shape[0], shape[1] - 1
        assert read_npy_header(os.path.join(folder, "logits.npy"))[:2] == ("<f4", [b, s, cfg["vocab_size"]])
        loss = json.load(open(os.path.join(folder, "loss.json")))
        adamw = json.load(open(os.path.join(folder, "loss_after_adamw.json")))
        assert loss["targets"] == b * s and math.isfinite(loss["loss"]), name
        assert adamw["loss_before"] == loss["loss"] and math.isfinite(adamw["loss_after"]), name
        assert sorted(after) == adamw["weights_after"], name
        if "doc_lengths" in loss:  # eos ends every document but a row's last, and only those
            for row, lengths in enumerate(loss["doc_lengths"]):
                ends = [sum(lengths[:d + 1]) - 1 for d in range(len(lengths) - 1)]
                inputs = tokens[row * (s + 1):row * (s + 1) + s]
                assert [p for p in range(s) if inputs[p] == loss["eos_token_id"]] == ends, name
        print(f"{name}: {cfg['architectures'][0]}, {len(want)} tensors, tokens {shape}, "
              f"loss {loss['loss']:.6f} -> {adamw['loss_after']:.6f}")
    if not folders:
        sys.exit(f"no fixture folders under {root}")
    print(f"{len(folders)} fixture folders consistent")


# ------------------------------------------------------------------------------------------------
# Check mode
# ------------------------------------------------------------------------------------------------
def check(hf_dir, tokens_path, logits_path, tol):
    torch = _setup_torch()
    import numpy as np
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    tokens = torch.from_numpy(np.load(tokens_path).astype(np.int64))
    if tokens.dim() == 1:
        tokens = tokens[None]
    with torch.no_grad():
        logits, loss = next_token_loss(torch, model, tokens)
    print(f"{hf_dir}: {type(model).__name__}, tokens {tuple(tokens.shape)}, "
          f"loss {loss.item():.7f}")
    if logits_path is None:
        return 0
    ref = torch.from_numpy(np.load(logits_path)).float()
    if ref.shape != logits.shape:
        print(f"logits shape {tuple(logits.shape)}, given {tuple(ref.shape)}")
        return 1
    abs_err = float((logits - ref).abs().max())
    largest = float(ref.abs().max())
    rel = abs_err / largest if largest > 0 else abs_err
    ok = rel <= tol
    print(f"max abs error {abs_err:.3e}, largest |logit| {largest:.4f}, relative {rel:.3e} "
          f"({'within' if ok else 'beyond'} {tol:g})")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the fixtures under this folder")
    ap.add_argument("--make-venv", metavar="DIR", help="make a CPU-only venv with the pinned versions")
    ap.add_argument("--check", metavar="HF_DIR", help="load HF_DIR and compare its logits")
    ap.add_argument("--verify", metavar="DIR", help="check the fixture files under DIR (no torch)")
    ap.add_argument("--greedy", metavar="DIR", nargs="+",
                    help="write greedy.json into these fixture folders")
    ap.add_argument("--tokens", help="check mode: token ids (batch, seq + 1) or (seq + 1)")
    ap.add_argument("--logits", help="check mode: expected logits (batch, seq, vocab)")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="check mode: largest allowed max|diff| / max|expected| (default 1e-5)")
    a = ap.parse_args()
    if a.make_venv:
        make_venv(os.path.abspath(a.make_venv))
    elif a.greedy:
        for folder in a.greedy:
            write_greedy(folder)
    elif a.verify:
        verify(a.verify)
    elif a.check:
        if not a.tokens:
            ap.error("--check needs --tokens")
        sys.exit(check(a.check, a.tokens, a.logits, a.tol))
    elif a.out:
        generate(a.out)
    else:
        ap.error("one of --out, --check, --verify, --make-venv")


if __name__ == "__main__":
    main()
