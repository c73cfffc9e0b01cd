#!/usr/bin/env python3
"""Golden reference fixtures for tern (Qwen3.5/3.6-MoE, architecture qwen3_5_moe).

Builds a small random model with Hugging Face transformers' own implementation
(Qwen3_5MoeTextConfig + Qwen3_5MoeForCausalLM, eager attention, float32, CPU), writes it in
the official HF safetensors layout (hf/) and in the MLX 4-bit layout (mlx4/), and saves
teacher-forced logits of both weight sets for three token sequences.

    python3 make_golden.py --out /tmp/golden [--tar $OUT/golden.tar.gz]
    python3 make_golden.py --out /tmp/golden --numpy-only     # no torch: files + numpy oracle logits

See the README.md this script writes into the output directory.
"""

import argparse
import copy
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import np_reference as R  # noqa: E402

SEED_WEIGHTS = 20260101
SEED_TOKENS = 7
LENGTHS = (7, 40, 100)

SUMMARY = []
CHECKS = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    SUMMARY.append(s)


def check(name, ok, detail=""):
    CHECKS.append((name, bool(ok), detail))
    log(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# writing the two layouts
# --------------------------------------------------------------------------------------------

def write_hf(out_dir, W, tf_version):
    d = os.path.join(out_dir, "hf")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(R.wrapper_config(tf_version), f, indent=2)
        f.write("\n")
    names = sorted(W)
    L = R.TEXT_CONFIG["num_hidden_layers"]

    def shard_of(n):
        if n.startswith(R.HF_PREFIX + "layers."):
            return 1 if int(n.split(".")[3]) < L // 2 else 2
        return 1 if n == R.HF_PREFIX + "embed_tokens.weight" else 2

    shards = {1: {}, 2: {}}
    for n in names:
        shards[shard_of(n)][n] = W[n]
    weight_map, total = {}, 0
    for k in (1, 2):
        fn = f"model-0000{k}-of-00002.safetensors"
        total += R.write_safetensors(os.path.join(d, fn), shards[k], {"format": "pt"})
        for n in shards[k]:
            weight_map[n] = fn
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return d


def write_mlx(out_dir, mlx_tensors, quant, tf_version):
    d = os.path.join(out_dir, "mlx4")
    os.makedirs(d, exist_ok=True)
    cfg = R.wrapper_config(tf_version)
    cfg["quantization"] = quant
    cfg["quantization_config"] = copy.deepcopy(quant)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    R.write_safetensors(os.path.join(d, "model.safetensors"), mlx_tensors, {"format": "mlx"})
    return d


def read_hf(d):
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    out = {}
    for fn in sorted(set(idx["weight_map"].values())):
        t, _ = R.read_safetensors(os.path.join(d, fn))
        for n, v in t.items():
            assert idx["weight_map"][n] == fn
            out[n] = v
    assert set(out) == set(idx["weight_map"])
    return out


def bits_equal(a, b):
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


# --------------------------------------------------------------------------------------------
# transformers side
# --------------------------------------------------------------------------------------------

def build_tf_model(torch, transformers):
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig
    d = copy.deepcopy(R.TEXT_CONFIG)
    try:
        cfg = Qwen3_5MoeTextConfig(**d)
        log("Qwen3_5MoeTextConfig(**text_config) accepted the full published-style dict")
    except Exception as e:  # strict config rejecting extras: drop the keys it does not declare
        log("full dict rejected:", repr(e))
        extras = {"model_type", "dtype", "attn_output_gate", "full_attention_interval", "mamba_ssm_dtype",
                  "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "partial_rotary_factor"}
        cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in d.items() if k not in extras})
        log("  built without:", sorted(extras))
    try:
        model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager")
    except Exception as e:
        log("_from_config(attn_implementation=eager) failed:", repr(e))
        cfg._attn_implementation = "eager"
        model = Qwen3_5MoeForCausalLM(cfg)
    model = model.to(torch.float32).eval()
    try:
        impl = getattr(model.config, "_experts_implementation", None)
        log("experts implementation in effect:", impl)
        if impl not in (None, "eager"):
            model.config._experts_implementation = "eager"
            log("  set to eager:", model.config._experts_implementation)
    except Exception as e:
        log("experts implementation not settable:", repr(e))
    log("attn implementation:", model.config._attn_implementation)
    rp = model.config.rope_parameters
    log("config.rope_parameters after construction:", json.dumps(rp, default=str))
    return model


def official_to_model_state(model, Wf, torch, report=False):
    """Map official-layout float32 arrays onto the model's state_dict names/layout."""
    sd = model.state_dict()
    E, I, D = R.TEXT_CONFIG["num_experts"], R.TEXT_CONFIG["moe_intermediate_size"], R.TEXT_CONFIG["hidden_size"]
    new, used, layout = {}, set(), {}
    gate_up_transposed = None
    for k, v in sd.items():
        off = "lm_head.weight" if k == "lm_head.weight" else (R.HF_PREFIX + k[len("model."):])
        if off not in Wf:
            raise KeyError(f"model param {k} (official {off}) has no official tensor")
        a = np.asarray(Wf[off], dtype=np.float32)
        if k.endswith("experts.gate_up_proj"):
            if tuple(v.shape) == (E, 2 * I, D):
                gate_up_transposed = False
            elif tuple(v.shape) == (E, D, 2 * I):
                gate_up_transposed = True
                a = np.ascontiguousarray(np.swapaxes(a, 1, 2))
            else:
                raise ValueError(f"unexpected gate_up_proj shape {tuple(v.shape)}")
            layout["gate_up_proj"] = tuple(v.shape)
        elif k.endswith("experts.down_proj"):
            # [E, D, I] official; D == I here, so follow gate_up_proj's orientation (checked functionally)
            if gate_up_transposed is None:
                raise RuntimeError("down_proj seen before gate_up_proj")
            if gate_up_transposed:
                a = np.ascontiguousarray(np.swapaxes(a, 1, 2))
            layout["down_proj"] = tuple(v.shape)
        if tuple(a.shape) != tuple(v.shape):
            raise ValueError(f"{k}: model {tuple(v.shape)} vs official {a.shape}")
        new[k] = torch.from_numpy(a.copy())
        used.add(off)
    missing = set(Wf) - used
    if missing:
        raise KeyError(f"official tensors unused by the model: {sorted(missing)}")
    model.load_state_dict(new, strict=True)
    if report:
        log("model state_dict: %d tensors; expert params in memory: %s; transposed vs official: %s"
            % (len(sd), layout, gate_up_transposed))
    return gate_up_transposed


def model_to_official(model, transposed):
    out = {}
    for k, v in model.state_dict().items():
        off = "lm_head.weight" if k == "lm_head.weight" else (R.HF_PREFIX + k[len("model."):])
        a = v.detach().cpu().float().numpy()
        if transposed and (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")):
            a = np.ascontiguousarray(np.swapaxes(a, 1, 2))
        out[off] = a
    return out


def experts_functional_check(model, Wf, torch):
    """Call layer 0's experts module and the router on random input; compare with docs/model.md §MoE math
    on the official-layout tensors (catches a wrong in-memory layout interpretation)."""
    mlp = model.model.layers[0].mlp
    P = R.HF_PREFIX + "layers.0.mlp."
    gu = Wf[P + "experts.gate_up_proj"].astype(np.float64)
    dn = Wf[P + "experts.down_proj"].astype(np.float64)
    I = R.TEXT_CONFIG["moe_intermediate_size"]
    rng = np.random.Generator(np.random.PCG64(99))
    x = rng.standard_normal((6, R.TEXT_CONFIG["hidden_size"])).astype(np.float32)
    with torch.no_grad():
        full = mlp(torch.from_numpy(x)[None])
    if isinstance(full, tuple):
        full = full[0]
    full = full.numpy()[0]
    xd = x.astype(np.float64)
    lg = xd @ Wf[P + "gate.weight"].astype(np.float64).T
    p = np.exp(lg - lg.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ref = np.zeros_like(xd)
    k = R.TEXT_CONFIG["num_experts_per_tok"]
    for t in range(x.shape[0]):
        sel = np.argsort(-p[t], kind="stable")[:k]
        wsel = p[t, sel] / p[t, sel].sum()
        for e, we in zip(sel, wsel):
            h = gu[e] @ xd[t]
            ref[t] += we * (dn[e] @ (h[:I] / (1 + np.exp(-h[:I])) * h[I:]))
    sg = Wf[P + "shared_expert.gate_proj.weight"].astype(np.float64)
    su = Wf[P + "shared_expert.up_proj.weight"].astype(np.float64)
    sd_ = Wf[P + "shared_expert.down_proj.weight"].astype(np.float64)
    g1 = xd @ sg.T
    sh = ((g1 / (1 + np.exp(-g1))) * (xd @ su.T)) @ sd_.T
    ref += 1 / (1 + np.exp(-(xd @ Wf[P + "shared_expert_gate.weight"].astype(np.float64).T))) * sh
    err = float(np.abs(full - ref).max())
    check("MoE block (router + experts + shared) of transformers == docs/model.md §MoE on official layout",
          err < 1e-4, f"max|diff| {err:.3g}")


def tf_logits(model, ids, torch):
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long))
    return out.logits[0].float().cpu().numpy().astype(np.float32)


def decode_consistency(model, ids, full, torch, n_prefill=20):
    res = {}
    x = torch.tensor([ids], dtype=torch.long)
    try:
        with torch.no_grad():
            out = model(x[:, :n_prefill], use_cache=True)
            pkv = out.past_key_values
            steps = [out.logits[0].float()]
            for t in range(n_prefill, len(ids)):
                out = model(x[:, t:t + 1], past_key_values=pkv, use_cache=True)
                pkv = out.past_key_values
                steps.append(out.logits[0].float())
        dec = torch.cat(steps, 0).numpy()
        d = np.abs(dec - full)
        res["prefill%d+decode1x%d" % (n_prefill, len(ids) - n_prefill)] = (float(d.max()), float(d[n_prefill:].max()),
                                                                             float((dec.argmax(1) == full.argmax(1)).mean()))
        log("transformers prefill %d + %d single-token decode steps vs full forward: max|diff| %.3g "
            "(decoded positions %.3g), top-1 agreement %.3f, cache type %s"
            % (n_prefill, len(ids) - n_prefill, d.max(), d[n_prefill:].max(),
               (dec.argmax(1) == full.argmax(1)).mean(), type(pkv).__name__))
    except Exception:
        log("decode consistency (1-token steps) FAILED to run:\n" + traceback.format_exc())
    try:
        with torch.no_grad():
            out = model(x[:, :n_prefill], use_cache=True)
            pkv = out.past_key_values
            out2 = model(x[:, n_prefill:], past_key_values=pkv, use_cache=True)
        dec = torch.cat([out.logits[0], out2.logits[0]], 0).float().numpy()
        d = np.abs(dec - full)
        res["prefill%d+chunk%d" % (n_prefill, len(ids) - n_prefill)] = (float(d.max()), float(d[n_prefill:].max()),
                                                                          float((dec.argmax(1) == full.argmax(1)).mean()))
        log("transformers prefill %d + one %d-token continuation call vs full forward: max|diff| %.3g"
            % (n_prefill, len(ids) - n_prefill, d.max()))
    except Exception:
        log("decode consistency (chunk continuation) FAILED to run:\n" + traceback.format_exc())
    return res


def from_pretrained_check(hf_dir, tokens, ref_logits, torch):
    """Load hf/ with transformers' own loader (wrapper class, tiny vision tower swapped in to keep it
    cheap) and compare its logits with the ones written."""
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeVisionConfig
    cfg = Qwen3_5MoeConfig.from_pretrained(hf_dir)
    cfg.vision_config = Qwen3_5MoeVisionConfig(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                               out_hidden_size=R.TEXT_CONFIG["hidden_size"],
                                               num_position_embeddings=16)
    try:
        m = Qwen3_5MoeForConditionalGeneration.from_pretrained(hf_dir, config=cfg, dtype=torch.float32,
                                                               attn_implementation="eager")
    except TypeError:
        m = Qwen3_5MoeForConditionalGeneration.from_pretrained(hf_dir, config=cfg, torch_dtype=torch.float32,
                                                               attn_implementation="eager")
    m = m.eval()
    log("from_pretrained(hf/): class %s, dtype %s, lm_head tied to embed: %s" % (
        type(m).__name__, next(m.parameters()).dtype,
        m.lm_head.weight.data_ptr() == m.model.language_model.embed_tokens.weight.data_ptr()))
    worst = 0.0
    for ids, ref in zip(tokens, ref_logits):
        lg = tf_logits(m, ids, torch)
        worst = max(worst, float(np.abs(lg - ref).max()))
    check("transformers from_pretrained(hf/) (Qwen3_5MoeForConditionalGeneration) reproduces logits_bf16_*",
          worst < 1e-4, f"max|diff| {worst:.3g}")
    # the same checkpoint loaded the way a user would (dtype bfloat16): which parameters stay fp32?
    try:
        mb = Qwen3_5MoeForConditionalGeneration.from_pretrained(hf_dir, config=cfg, dtype=torch.bfloat16,
                                                                attn_implementation="eager").eval()
        lm = mb.model.language_model
        la = lm.layers[0].linear_attn
        log("from_pretrained(dtype=bfloat16) parameter dtypes: A_log %s, dt_bias %s, gated norm %s, "
            "input_layernorm %s, router %s, experts %s, conv1d %s" % (
                la.A_log.dtype, la.dt_bias.dtype, la.norm.weight.dtype, lm.layers[0].input_layernorm.weight.dtype,
                lm.layers[0].mlp.gate.weight.dtype, lm.layers[0].mlp.experts.gate_up_proj.dtype, la.conv1d.weight.dtype))
        a_exact = bits_equal(la.A_log.detach().float().numpy(),
                             np.asarray(R.make_weights(SEED_WEIGHTS)[R.HF_PREFIX + "layers.0.linear_attn.A_log"][1]))
        log("  A_log kept exactly (fp32) after bf16 load: %s" % a_exact)
        res = []
        for ids, ref in zip(tokens, ref_logits):
            with torch.no_grad():
                lg = mb(torch.tensor([ids])).logits[0]
            res.append((lg.dtype, lg.float().numpy(), ref))
        d = max(float(np.abs(x - r).max()) for _, x, r in res)
        ag = np.mean(np.concatenate([x.argmax(1) == r.argmax(1) for _, x, r in res]))
        rel = np.mean([np.abs(x - r).mean() / np.abs(r).mean() for _, x, r in res])
        log("  bf16-loaded reference (logits dtype %s) vs fp32 logits: max|diff| %.3g, mean relative %.3g, "
            "top-1 agreement %.3f" % (res[0][0], d, rel, ag))
    except Exception:
        log("bf16 from_pretrained failed:\n" + traceback.format_exc()[-2000:])


# --------------------------------------------------------------------------------------------

README_TMPL = """# tern golden fixtures: tiny random Qwen3.5/3.6-MoE (`qwen3_5_moe`)

Generated by `tools/reference/make_golden.py` (helpers in `tools/reference/np_reference.py`):

    cd tools/reference && PYTHONUNBUFFERED=1 python3 make_golden.py --out /tmp/golden --tar $OUT/golden.tar.gz

run on the device machine (CPU torch, float32), then unpacked here.
Versions: {versions}.
Generated {date}.

## Model

Hugging Face transformers' own implementation: `Qwen3_5MoeTextConfig` + `Qwen3_5MoeForCausalLM`,
`attn_implementation="eager"`, float32, CPU; logits are `model(input_ids).logits` of one full
teacher-forced pass per sequence (no cache).

Text config (also `hf/config.json` → `text_config`):

```json
{text_config}
```

Shapes: D=64, 4 layers (`linear_attention`, `full_attention`, `linear_attention`, `full_attention`),
attention 4 q heads / 2 kv heads of 256 (rotary 64 = first 64 dims, rotate-half, θ=1e7, output gate),
Gated DeltaNet 2 key heads / 4 value heads of 128 (value head n uses key head n // 2), conv 4,
conv channels 1024, MoE 16 experts top-4 (renormalised), expert width 64, shared expert 64, vocab 512.

## Weights (seed {seed_w}, numpy `Generator(PCG64(seed))`, drawn in the order of `np_reference.make_weights`)

All values exactly representable in bf16 (drawn, then rounded to bf16 RNE). N(0,v) = variance v.

| tensor | distribution |
|---|---|
| embed_tokens | N(0,1) |
| in-projections (q/k/v_proj, in_proj_qkv/z/a/b, expert gate/up, shared gate/up, router `mlp.gate`, `shared_expert_gate`) | N(0, 1/in) |
| residual outputs (o_proj, out_proj, expert down, shared down) | N(0, 0.09/in) |
| lm_head | N(0, 9/64) (logit std ≈ 3) |
| RMSNorm_1p (input_layernorm, post_attention_layernorm, final norm, q_norm, k_norm) | w = bf16(1 + 0.1·N(0,1)) − 1, so 1+w is exactly bf16 |
| linear_attn.norm.weight (gated norm, not shifted) | bf16(1 + 0.1·N(0,1)) |
| conv1d.weight | N(0, 0.25) |
| A_log | log(U(1,16)), float32 (stored F32) |
| dt_bias | bf16(U(−1,1)) (stored BF16) |

## Files

| file | what |
|---|---|
| `hf/config.json` | published wrapper form (`Qwen3_5MoeForConditionalGeneration`, `model_type` `qwen3_5_moe`, text under `text_config`; no `vision_config`; `mtp_num_hidden_layers` 0, no `mtp.*` tensors; bos/eos = 511) |
| `hf/model-00001-of-00002.safetensors`, `hf/model-00002-of-00002.safetensors` | official layout (docs/model.md §Checkpoints): prefix `model.language_model.`, head `lm_head.weight`, `mlp.experts.gate_up_proj` `[E, 2I, D]` (rows 0..I−1 gate, I..2I−1 up) and `mlp.experts.down_proj` `[E, D, I]` without `.weight`, conv1d `[C,1,4]`; BF16 except `A_log` F32. Shard 1: embed + layers 0–1; shard 2: layers 2–3 + norm + lm_head |
| `hf/model.safetensors.index.json` | `{{"metadata": {{"total_size": sum of tensor bytes}}, "weight_map": {{name: shard}}}}` |
| `mlx4/config.json` | HF config + `quantization` (group 64, 4 bits, affine, 8-bit overrides for every layer's `mlp.gate` and `mlp.shared_expert_gate`) and an identical `quantization_config` |
| `mlx4/model.safetensors` | MLX layout (docs/model.md §Checkpoints): `language_model.model.` prefix, `language_model.lm_head.`, experts as `mlp.switch_mlp.{{gate,up,down}}_proj`, conv1d `[C,4,1]`, the five RMSNorm_1p families stored as 1+w (BF16), gated norm unchanged, `A_log` F32, dt_bias/norms/conv BF16; every linear, the embedding, lm_head and the expert stacks quantised (`X.weight` U32 `[..., out, in·bits/32]`, `X.scales`/`X.biases` BF16 `[..., out, in/64]`) |
| `tokens.json` | three sequences of ids in [0,512) (seed {seed_t}), lengths 7, 40, 100 |
| `logits_bf16_<i>.npy` | float32 `[n_i, 512]`: transformers logits with the bf16-exact weights (= the `hf/` files) |
| `logits_q4_<i>.npy` | float32 `[n_i, 512]`: transformers logits with every quantised tensor replaced by its dequantised value (= the `mlx4/` file; norms identical by construction) |

safetensors files are written by a small writer in `np_reference.py` (header padded with spaces to a
multiple of 8; 4-byte tensors first, then BF16, each group sorted by name) and re-read by the
`safetensors` package during generation.

## The quantiser (tern's C++ must do exactly this; the q4 logits depend on it bit for bit)

Per row, per group of 64 consecutive input values `w` (float32 values of the bf16 weights), all
arithmetic in float32:

```
lo = min(w); hi = max(w)
scale = (hi - lo) / (2**bits - 1)          # float32
if scale == 0: scale = 1.0
s = bf16_round(scale); b = bf16_round(lo)  # round-to-nearest-even to bf16, kept as float32
q = clip(round_half_even((w - b) / s), 0, 2**bits - 1)
dequantised value = s * q + b              # float32: a multiply then an add, each rounded (no FMA)
```

`bf16_round` on the float32 bit pattern `u`: `u += 0x7fff + ((u >> 16) & 1); u &= 0xffff0000`.
Codes are packed into uint32 words least-significant bits first (4-bit: 8 codes/word, code j at bits
4j..4j+3; 8-bit: 4 codes/word). `X.scales` = s, `X.biases` = b (both stored BF16, exact).
Bits: 8 for `mlp.gate` and `mlp.shared_expert_gate`, 4 for everything else quantised.
When comparing dequantised weights bit for bit in C++, compile without FP contraction
(`-ffp-contract=off`), otherwise `s*q+b` may become an FMA.

## Results at generation time

{results}

## Self-checks

{checks}

## sha256

{hashes}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tar", default=None, help="write a .tar.gz of the output directory here")
    ap.add_argument("--numpy-only", action="store_true", help="no torch/transformers (local test)")
    args = ap.parse_args()
    t_start = time.time()

    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)

    torch = transformers = None
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    if not args.numpy_only:
        import torch  # noqa: F811
        import transformers  # noqa: F811
        torch.manual_seed(0)
        torch.set_num_threads(min(8, os.cpu_count() or 1))
        versions.update({"torch": torch.__version__, "transformers": transformers.__version__})
        try:
            import safetensors
            versions["safetensors"] = safetensors.__version__
        except Exception:
            pass
    log("versions:", json.dumps(versions))
    tf_version = versions.get("transformers", "5.17.0")

    # ---- weights, tokens, conversions
    W = R.make_weights(SEED_WEIGHTS)
    Wb = {k: a for k, (_, a) in W.items()}
    tokens = R.make_tokens(SEED_TOKENS, LENGTHS, R.TEXT_CONFIG["vocab_size"])
    mlx_tensors, Wq, quant = R.convert_to_mlx(W)
    n_params = sum(a.size for a in Wb.values())
    log(f"official tensors: {len(W)}, parameters: {n_params}; mlx tensors: {len(mlx_tensors)}")

    hf_dir = write_hf(out, W, tf_version)
    mlx_dir = write_mlx(out, mlx_tensors, quant, tf_version)
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")

    # ---- read back our own files with numpy
    hf_back = read_hf(hf_dir)
    ok = set(hf_back) == set(W) and all(
        hf_back[n][0] == W[n][0] and bits_equal(hf_back[n][1], W[n][1]) for n in W)
    check("hf/ read back with numpy == generated weights (names, dtypes, values bit-exact)", ok)
    check("hf/ dtypes: BF16 everywhere except A_log F32",
          all((d == "F32") == n.endswith("A_log") for n, (d, _) in hf_back.items()))
    mlx_back, meta = R.read_safetensors(os.path.join(mlx_dir, "model.safetensors"))
    with open(os.path.join(mlx_dir, "config.json")) as f:
        mcfg = json.load(f)
    check("mlx4/config.json quantization == quantization_config", mcfg["quantization"] == mcfg["quantization_config"])
    Wq_file = R.mlx_from_file_dequant(mlx_back, mcfg["quantization"])
    ok = set(Wq_file) == set(Wq) and all(bits_equal(Wq_file[n], Wq[n]) for n in Wq)
    check("mlx4/model.safetensors dequantised from disk == q4 weights (all tensors, bit-exact)", ok)
    n8 = sum(1 for k, v in mcfg["quantization"].items() if isinstance(v, dict) and v.get("bits") == 8)
    ok8 = all(bits_equal(Wq_file[n], Wq[n]) for n in Wq if R.quant_bits_for(n) == 8)
    check("8-bit tensors (mlp.gate, mlp.shared_expert_gate) dequantise bit-exactly", ok8 and n8 == 2 * 4,
          f"{n8} overrides")
    nonq = [n for n in Wq if R.quant_bits_for(n) is None]
    check("non-quantised tensors identical in both layouts (norms via 1+w, conv transposed)",
          all(bits_equal(Wq_file[n], Wb[n]) for n in nonq), f"{len(nonq)} tensors")
    qerr = {n: float(np.linalg.norm(Wq[n] - Wb[n]) / np.linalg.norm(Wb[n]))
            for n in Wq if R.quant_bits_for(n) is not None}
    log("relative quantisation error: 4-bit mean %.4f, 8-bit mean %.5f" % (
        np.mean([v for n, v in qerr.items() if R.quant_bits_for(n) == 4]),
        np.mean([v for n, v in qerr.items() if R.quant_bits_for(n) == 8])))

    results = []
    # ---- numpy oracle (float64, docs/model.md math)
    t0 = time.time()
    np_b = [R.np_forward(Wb, t) for t in tokens]
    np_q = [R.np_forward(Wq, t) for t in tokens]
    log("numpy float64 oracle forward: %.1fs" % (time.time() - t0))

    if args.numpy_only:
        logits_b = [a.astype(np.float32) for a in np_b]
        logits_q = [a.astype(np.float32) for a in np_q]
        results.append("numpy-only run (no transformers): logits are the float64 numpy oracle.")
    else:
        # safetensors package reads our files identically
        try:
            from safetensors.torch import load_file
            good = True
            for path, ref in [(os.path.join(hf_dir, fn), None) for fn in sorted(os.listdir(hf_dir))
                              if fn.endswith(".safetensors")] + [(os.path.join(mlx_dir, "model.safetensors"), None)]:
                mine, _ = R.read_safetensors(path)
                theirs = load_file(path)
                good &= set(mine) == set(theirs)
                for n, (dt, arr) in mine.items():
                    t = theirs[n]
                    if dt == "BF16":
                        good &= t.dtype == torch.bfloat16 and bits_equal(t.float().numpy(), arr)
                    elif dt == "F32":
                        good &= t.dtype == torch.float32 and bits_equal(t.numpy(), arr)
                    else:
                        good &= t.dtype == torch.uint32 and np.array_equal(
                            t.view(torch.int32).numpy().view(np.uint32), arr)
            check("safetensors.torch.load_file reads every file identically (dtypes + bits)", good)
        except Exception:
            check("safetensors.torch.load_file reads every file identically", False, traceback.format_exc())

        model_b = build_tf_model(torch, transformers)
        transposed = official_to_model_state(model_b, Wb, torch, report=True)
        lm_tied = model_b.lm_head.weight.data_ptr() == model_b.model.embed_tokens.weight.data_ptr()
        check("lm_head not tied to embed_tokens", not lm_tied)
        back = model_to_official(model_b, transposed)
        check("model_b weights == bf16-exact official weights (bit-exact)",
              all(bits_equal(back[n], Wb[n]) for n in Wb))
        rot = model_b.model.rotary_emb
        inv = rot.inv_freq.float().numpy()
        exp_inv = (1.0 / (10000000.0 ** (np.arange(0, 64, 2) / 64.0)))
        check("rotary: 32 inv_freq = 1e7^(-i/32) (partial rotary 64 of 256)",
              inv.shape == (32,) and np.allclose(inv, exp_inv, rtol=1e-5), f"shape {inv.shape}")
        experts_functional_check(model_b, Wb, torch)

        model_q = build_tf_model(torch, transformers)
        official_to_model_state(model_q, Wq, torch)
        back_q = model_to_official(model_q, transposed)
        check("q4 model weights == dequantised mlx4/model.safetensors (every tensor, bit-exact)",
              set(back_q) == set(Wq_file) and all(bits_equal(back_q[n], Wq_file[n]) for n in Wq_file))

        t0 = time.time()
        logits_b = [tf_logits(model_b, t, torch) for t in tokens]
        logits_q = [tf_logits(model_q, t, torch) for t in tokens]
        log("transformers forwards: %.1fs" % (time.time() - t0))

        # oracle vs transformers
        db = max(float(np.abs(a - b).max()) for a, b in zip(logits_b, np_b))
        dq = max(float(np.abs(a - b).max()) for a, b in zip(logits_q, np_q))
        ag = np.mean(np.concatenate([a.argmax(1) == b.argmax(1) for a, b in zip(logits_b, np_b)]))
        check("transformers fp32 logits == float64 numpy oracle of docs/model.md §Forward pass (bf16 and q4 weights)",
              max(db, dq) < 2e-3, f"max|diff| bf16 {db:.3g}, q4 {dq:.3g}, top-1 agreement {ag:.3f}")
        results.append("transformers fp32 vs independent float64 numpy forward (docs/model.md §Forward pass, recurrent "
                       "GDN): max|diff| bf16 %.3g, q4 %.3g" % (db, dq))

        # prefill vs decode consistency (40-token sequence)
        dc = decode_consistency(model_b, tokens[1], logits_b[1], torch)
        for k, (m, md, a) in dc.items():
            results.append("transformers %s vs full forward (seq 1): max|diff| %.3g (continued positions %.3g), "
                           "top-1 agreement %.3f" % (k, m, md, a))

        # bf16-activation reference (informational)
        try:
            mb16 = copy.deepcopy(model_b).to(torch.bfloat16)
            lb16 = [tf_logits(mb16, t, torch) for t in tokens]
            d = max(float(np.abs(a - b).max()) for a, b in zip(lb16, logits_b))
            a = np.mean(np.concatenate([x.argmax(1) == y.argmax(1) for x, y in zip(lb16, logits_b)]))
            rel = np.mean([np.abs(x - y).mean() / np.abs(y).mean() for x, y in zip(lb16, logits_b)])
            log("transformers in bf16 (dtype=bfloat16 model) vs fp32: max|diff| %.3g, mean rel %.3g, "
                "top-1 agreement %.3f" % (d, rel, a))
            results.append("transformers with bf16 activations (model.to(bfloat16)) vs the fp32 logits: "
                           "max|diff| %.3g, mean relative %.3g, top-1 agreement %.3f" % (d, rel, a))
        except Exception:
            log("bf16 run failed:\n" + traceback.format_exc())

        # small perturbation: not chaotic
        rng = np.random.Generator(np.random.PCG64(5))
        Wp = {n: (a * (1 + 2.0 ** -9 * rng.standard_normal(a.shape))).astype(np.float32) for n, a in Wb.items()}
        mp = build_tf_model(torch, transformers)
        official_to_model_state(mp, Wp, torch)
        lp = [tf_logits(mp, t, torch) for t in tokens]
        ap_ = np.mean(np.concatenate([x.argmax(1) == y.argmax(1) for x, y in zip(lp, logits_b)]))
        dp = max(float(np.abs(a - b).max()) for a, b in zip(lp, logits_b))
        log("weights × (1 + 2^-9·N(0,1)) perturbation: max|logit diff| %.3g, top-1 agreement %.3f" % (dp, ap_))
        results.append("weights multiplied by (1 + 2^-9·N(0,1)) (sub-bf16-ulp noise): max|logit diff| %.3g, "
                       "top-1 agreement %.3f (not chaotic)" % (dp, ap_))

        try:
            from_pretrained_check(hf_dir, tokens, logits_b, torch)
        except Exception:
            check("transformers from_pretrained(hf/) reproduces logits_bf16_*", False,
                  traceback.format_exc()[-2000:])

    # ---- save logits
    for i, (a, b) in enumerate(zip(logits_b, logits_q)):
        assert a.shape == (len(tokens[i]), R.TEXT_CONFIG["vocab_size"]) and a.dtype == np.float32
        np.save(os.path.join(out, f"logits_bf16_{i}.npy"), a)
        np.save(os.path.join(out, f"logits_q4_{i}.npy"), b)
    allb = np.concatenate(logits_b)
    allq = np.concatenate(logits_q)
    agree = float((allb.argmax(1) == allq.argmax(1)).mean())
    std = float(allb.std())
    log("logit std (bf16 weights): %.3f (mean per-position std %.3f); q4: %.3f" % (std, allb.std(1).mean(), allq.std()))
    log("top-1 agreement bf16 vs q4 over %d positions: %.3f (per sequence: %s); max|diff| %.3g" % (
        len(allb), agree, [round(float((a.argmax(1) == b.argmax(1)).mean()), 3) for a, b in zip(logits_b, logits_q)],
        np.abs(allb - allq).max()))
    check("logit std well above 1", std > 1.5, f"{std:.3f}")
    results.insert(0, "logit std (bf16 weights) %.3f; top-1 agreement bf16 vs q4 %.3f over %d positions "
                      "(4-bit g64 gives ~9%% relative weight error on Gaussian weights, so ~80%% is expected); "
                      "max|diff| bf16 vs q4 %.3g" % (std, agree, len(allb), np.abs(allb - allq).max()))

    # ---- README
    files = []
    for root, _, fns in os.walk(out):
        for fn in sorted(fns):
            p = os.path.join(root, fn)
            files.append(os.path.relpath(p, out))
    files = sorted(files)
    hashes = "\n".join("    %s  %s" % (sha256(os.path.join(out, p)), p) for p in files)
    readme = README_TMPL.format(
        versions=", ".join(f"{k} {v}" for k, v in versions.items()),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        text_config=json.dumps(R.TEXT_CONFIG, indent=2),
        seed_w=SEED_WEIGHTS, seed_t=SEED_TOKENS,
        results="\n".join("* " + r for r in results),
        checks="\n".join("* %s %s%s" % ("PASS" if ok else "FAIL", n, (": " + d) if d and len(d) < 300 else "")
                         for n, ok, d in CHECKS),
        hashes=hashes)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(readme)

    total = 0
    log("files:")
    for p in files + ["README.md"]:
        sz = os.path.getsize(os.path.join(out, p))
        total += sz
        log("  %9d  %s" % (sz, p))
    log("total %d bytes" % total)
    n_fail = sum(1 for _, ok, _ in CHECKS if not ok)
    log("checks: %d passed, %d failed; elapsed %.1fs" % (len(CHECKS) - n_fail, n_fail, time.time() - t_start))
    if args.tar:
        os.makedirs(os.path.dirname(os.path.abspath(args.tar)), exist_ok=True)
        subprocess.check_call(["tar", "czf", args.tar, "-C", out, "."])
        log("archive %s: %d bytes" % (args.tar, os.path.getsize(args.tar)))
        with open(os.path.join(os.path.dirname(os.path.abspath(args.tar)), "summary.txt"), "w") as f:
            f.write("\n".join(SUMMARY) + "\n")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
