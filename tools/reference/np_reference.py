"""Pure-numpy helpers for tern's golden fixtures (no torch needed).

Contents
  * bf16 rounding on float32 bit patterns (round-to-nearest-even),
  * the exact affine quantiser / dequantiser / packer that tern's C++ engine mirrors,
  * a minimal safetensors writer and reader (BF16 / F32 / U32),
  * the seeded random weight recipe in the official Hugging Face layout (docs/model.md §Checkpoints),
  * the official -> MLX 4-bit conversion (docs/model.md §Checkpoints),
  * a float64 numpy forward pass written from docs/model.md §Forward pass (an independent oracle).

Used by make_golden.py (which runs it next to transformers on the device machine);
every function here also runs with plain numpy >= 1.24 (tested locally with 1.24 and 2.x).
"""

import json
import struct

import numpy as np

# --------------------------------------------------------------------------------------------
# model config (the small test model)
# --------------------------------------------------------------------------------------------

TEXT_CONFIG = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "full_attention_interval": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "attn_output_gate": True,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "partial_rotary_factor": 0.25,
    "rope_parameters": {
        "mrope_interleaved": True,
        "mrope_section": [11, 11, 10],
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000,
        "rope_type": "default",
    },
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "max_position_embeddings": 262144,
    "mamba_ssm_dtype": "float32",
    "mtp_num_hidden_layers": 0,
    "mtp_use_dedicated_embeddings": False,
    "bos_token_id": 511,
    "eos_token_id": 511,
    "pad_token_id": None,
    "initializer_range": 0.02,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "use_cache": True,
    "dtype": "bfloat16",
    "model_type": "qwen3_5_moe_text",
}

HF_PREFIX = "model.language_model."
MLX_PREFIX = "language_model.model."
GROUP_SIZE = 64


def wrapper_config(transformers_version="5.17.0"):
    """The published multimodal wrapper form (vision_config omitted), keys sorted like the original."""
    tc = dict(sorted(TEXT_CONFIG.items()))
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "image_token_id": 248056,
        "model_type": "qwen3_5_moe",
        "text_config": tc,
        "tie_word_embeddings": False,
        "transformers_version": transformers_version,
        "video_token_id": 248057,
        "vision_end_token_id": 248054,
        "vision_start_token_id": 248053,
    }


# --------------------------------------------------------------------------------------------
# bf16
# --------------------------------------------------------------------------------------------

def bf16_round(x):
    """Round float32 values to the nearest bf16 value (ties to even); returns float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).copy()
    u += np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    u &= np.uint32(0xFFFF0000)
    return u.view(np.float32)


def is_bf16_exact(x):
    return bool(np.all((np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF)) == 0))


def f32_to_bf16_bits(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert is_bf16_exact(x), "value not exactly representable in bf16"
    return (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


# --------------------------------------------------------------------------------------------
# the quantiser (must match tern's C++ bit for bit)
# --------------------------------------------------------------------------------------------

def quantize(w, bits, group_size=GROUP_SIZE):
    """Affine quantisation of w [..., out, in] (float32 values of bf16 weights).

    Per row, per group of `group_size` consecutive input values, all arithmetic float32:
        lo = min(w); hi = max(w)
        scale = (hi - lo) / (2**bits - 1);  if scale == 0: scale = 1.0
        s = bf16_round(scale); b = bf16_round(lo)
        q = clip(round_half_even((w - b) / s), 0, 2**bits - 1)
    Returns (packed uint32 [..., out, in*bits/32], s float32 [..., out, in/gs], b float32 [..., out, in/gs]).
    """
    w = np.ascontiguousarray(w, dtype=np.float32)
    *lead, n_in = w.shape
    assert n_in % group_size == 0 and 32 % bits == 0
    g = w.reshape(*lead, n_in // group_size, group_size)
    lo = g.min(axis=-1)
    hi = g.max(axis=-1)
    qmax = np.float32(2 ** bits - 1)
    scale = np.divide(np.subtract(hi, lo, dtype=np.float32), qmax, dtype=np.float32)
    scale = np.where(scale == np.float32(0), np.float32(1.0), scale).astype(np.float32)
    s = bf16_round(scale)
    b = bf16_round(lo)
    assert np.all(s > 0)
    t = np.divide(np.subtract(g, b[..., None], dtype=np.float32), s[..., None], dtype=np.float32)
    q = np.clip(np.round(t), np.float32(0), qmax).astype(np.uint32)
    q = q.reshape(*lead, n_in)
    return pack(q, bits), s, b


def pack(q, bits):
    """Codes [..., in] (uint32 < 2**bits) -> words [..., in*bits/32], least-significant bits first."""
    per = 32 // bits
    *lead, n_in = q.shape
    qq = q.astype(np.uint32).reshape(*lead, n_in // per, per)
    words = np.zeros((*lead, n_in // per), dtype=np.uint32)
    for j in range(per):
        words |= qq[..., j] << np.uint32(bits * j)
    return words


def unpack(words, bits):
    per = 32 // bits
    mask = np.uint32(2 ** bits - 1)
    *lead, n_w = words.shape
    out = np.empty((*lead, n_w, per), dtype=np.uint32)
    for j in range(per):
        out[..., j] = (words >> np.uint32(bits * j)) & mask
    return out.reshape(*lead, n_w * per)


def dequantize(words, s, b, bits, group_size=GROUP_SIZE):
    """w = s * q + b in float32 (a multiply then an add, each rounded; no FMA)."""
    q = unpack(words, bits).astype(np.float32)
    *lead, n_in = q.shape
    qg = q.reshape(*lead, n_in // group_size, group_size)
    s = np.asarray(s, dtype=np.float32)[..., None]
    b = np.asarray(b, dtype=np.float32)[..., None]
    prod = np.multiply(s, qg, dtype=np.float32)
    w = np.add(prod, b, dtype=np.float32)
    return w.reshape(*lead, n_in)


# --------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------

_ITEMSIZE = {"BF16": 2, "F32": 4, "U32": 4}


def _tensor_bytes(dtype, arr):
    if dtype == "BF16":
        return f32_to_bf16_bits(arr).astype("<u2").tobytes()
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    if dtype == "U32":
        assert arr.dtype == np.uint32
        return np.ascontiguousarray(arr, dtype="<u4").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype in BF16/F32/U32, ndarray)}. Larger itemsize first (keeps 4-byte data
    4-aligned), then by name; data contiguous as the format requires. Returns total tensor bytes."""
    order = sorted(tensors, key=lambda n: (-_ITEMSIZE[tensors[n][0]], n))
    header, blobs, off = {}, [], 0
    for n in order:
        dt, arr = tensors[n]
        data = _tensor_bytes(dt, arr)
        assert len(data) == _ITEMSIZE[dt] * int(np.prod(arr.shape, dtype=np.int64))
        header[n] = {"dtype": dt, "shape": [int(d) for d in arr.shape], "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    if metadata:
        header["__metadata__"] = metadata
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for blob in blobs:
            f.write(blob)
    return off


def read_safetensors(path):
    """-> ({name: (dtype, ndarray)}, metadata). BF16 comes back as float32 values, U32 as uint32."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        buf = raw[base + a: base + b]
        shape = tuple(h["shape"])
        if h["dtype"] == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2").reshape(shape))
        elif h["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float32).reshape(shape)
        elif h["dtype"] == "U32":
            arr = np.frombuffer(buf, dtype="<u4").astype(np.uint32).reshape(shape)
        else:
            raise ValueError(h["dtype"])
        out[name] = (h["dtype"], arr)
    return out, meta


# --------------------------------------------------------------------------------------------
# weights (official HF layout)
# --------------------------------------------------------------------------------------------

RMS1P_SUFFIXES = ("input_layernorm.weight", "post_attention_layernorm.weight",
                  "self_attn.q_norm.weight", "self_attn.k_norm.weight")


def is_rms1p(name):
    return name == HF_PREFIX + "norm.weight" or name.endswith(RMS1P_SUFFIXES)


def make_weights(seed, cfg=TEXT_CONFIG):
    """Seeded random weights, official names/shapes/layout (docs/model.md §Checkpoints).

    Returns {name: (file dtype 'BF16'|'F32', float32 ndarray)}; every BF16 tensor is bf16-exact.
    Recipe (N(0, v) means variance v):
      embed N(0,1); in-projections N(0, 1/in); residual outputs N(0, 0.09/in); lm_head N(0, 9/D);
      RMSNorm_1p w = bf16(1 + 0.1 N) - 1; gated norm w = bf16(1 + 0.1 N);
      conv1d N(0, 0.25); A_log = log(U(1,16)) (F32); dt_bias = bf16(U(-1,1)).
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    D = cfg["hidden_size"]
    V = cfg["vocab_size"]
    H, KVH, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    Dk, Dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    Kc = cfg["linear_conv_kernel_dim"]
    E, I, Is = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    key_dim, value_dim = Hk * Dk, Hv * Dv
    conv_dim = 2 * key_dim + value_dim

    W = {}

    def normal(shape, var):
        return bf16_round((rng.standard_normal(shape) * np.sqrt(var)).astype(np.float32))

    def lin_in(name, out, n_in):
        W[name] = ("BF16", normal((out, n_in), 1.0 / n_in))

    def lin_res(name, out, n_in):
        W[name] = ("BF16", normal((out, n_in), 0.09 / n_in))

    def norm1p(name, n):
        b = bf16_round((1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))
        w = (b - np.float32(1.0)).astype(np.float32)
        assert is_bf16_exact(w) and np.array_equal(w + np.float32(1.0), b)
        W[name] = ("BF16", w)

    P = HF_PREFIX
    W[P + "embed_tokens.weight"] = ("BF16", normal((V, D), 1.0))
    for i, lt in enumerate(cfg["layer_types"]):
        L = f"{P}layers.{i}."
        norm1p(L + "input_layernorm.weight", D)
        if lt == "linear_attention":
            A = L + "linear_attn."
            lin_in(A + "in_proj_qkv.weight", conv_dim, D)
            lin_in(A + "in_proj_z.weight", value_dim, D)
            lin_in(A + "in_proj_b.weight", Hv, D)
            lin_in(A + "in_proj_a.weight", Hv, D)
            W[A + "conv1d.weight"] = ("BF16", normal((conv_dim, 1, Kc), 0.25))
            W[A + "dt_bias"] = ("BF16", bf16_round(rng.uniform(-1.0, 1.0, Hv).astype(np.float32)))
            W[A + "A_log"] = ("F32", np.log(rng.uniform(1.0, 16.0, Hv)).astype(np.float32))
            W[A + "norm.weight"] = ("BF16", bf16_round((1.0 + 0.1 * rng.standard_normal(Dv)).astype(np.float32)))
            lin_res(A + "out_proj.weight", D, value_dim)
        elif lt == "full_attention":
            A = L + "self_attn."
            lin_in(A + "q_proj.weight", H * hd * 2, D)
            lin_in(A + "k_proj.weight", KVH * hd, D)
            lin_in(A + "v_proj.weight", KVH * hd, D)
            lin_res(A + "o_proj.weight", D, H * hd)
            norm1p(A + "q_norm.weight", hd)
            norm1p(A + "k_norm.weight", hd)
        else:
            raise ValueError(lt)
        norm1p(L + "post_attention_layernorm.weight", D)
        M = L + "mlp."
        lin_in(M + "gate.weight", E, D)
        W[M + "experts.gate_up_proj"] = ("BF16", normal((E, 2 * I, D), 1.0 / D))
        W[M + "experts.down_proj"] = ("BF16", normal((E, D, I), 0.09 / I))
        lin_in(M + "shared_expert.gate_proj.weight", Is, D)
        lin_in(M + "shared_expert.up_proj.weight", Is, D)
        lin_res(M + "shared_expert.down_proj.weight", D, Is)
        lin_in(M + "shared_expert_gate.weight", 1, D)
    norm1p(P + "norm.weight", D)
    W["lm_head.weight"] = ("BF16", normal((V, D), 9.0 / D))
    return W


def make_tokens(seed, lengths=(7, 40, 100), vocab=512):
    rng = np.random.Generator(np.random.PCG64(seed))
    return [[int(t) for t in rng.integers(0, vocab, n)] for n in lengths]


# --------------------------------------------------------------------------------------------
# official -> MLX 4-bit (docs/model.md §Checkpoints)
# --------------------------------------------------------------------------------------------

def quant_bits_for(hf_name):
    """Bits for a quantised tensor (by official name), or None if not quantised."""
    if hf_name.endswith("mlp.gate.weight") or hf_name.endswith("mlp.shared_expert_gate.weight"):
        return 8
    if hf_name in (HF_PREFIX + "embed_tokens.weight", "lm_head.weight"):
        return 4
    if hf_name.endswith(("experts.gate_up_proj", "experts.down_proj")):
        return 4
    if hf_name.endswith(".weight") and not is_rms1p(hf_name) and not hf_name.endswith(
            ("linear_attn.norm.weight", "conv1d.weight")):
        return 4  # every other linear (all input widths here are multiples of 64)
    return None


def mlx_name(hf_name):
    if hf_name == "lm_head.weight":
        return "language_model.lm_head.weight"
    assert hf_name.startswith(HF_PREFIX)
    return MLX_PREFIX + hf_name[len(HF_PREFIX):]


def convert_to_mlx(W, cfg=TEXT_CONFIG):
    """Returns (mlx_tensors {name: (dtype, arr)}, dequantised official weights {name: float32},
    quantization dict for config.json)."""
    I = cfg["moe_intermediate_size"]
    out, deq = {}, {}
    qcfg = {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}

    def put_quant(mname_base, arr, bits):
        words, s, b = quantize(arr, bits)
        out[mname_base + ".weight"] = ("U32", words)
        out[mname_base + ".scales"] = ("BF16", s)
        out[mname_base + ".biases"] = ("BF16", b)
        return dequantize(words, s, b, bits)

    for name in sorted(W):
        dt, arr = W[name]
        bits = quant_bits_for(name)
        if name.endswith("experts.gate_up_proj"):
            base = mlx_name(name).replace("experts.gate_up_proj", "switch_mlp.")
            dg = put_quant(base + "gate_proj", arr[:, :I, :], 4)
            du = put_quant(base + "up_proj", arr[:, I:, :], 4)
            deq[name] = np.concatenate([dg, du], axis=1)
        elif name.endswith("experts.down_proj"):
            base = mlx_name(name).replace("experts.down_proj", "switch_mlp.down_proj")
            deq[name] = put_quant(base, arr, 4)
        elif bits is not None:
            base = mlx_name(name)[: -len(".weight")]
            deq[name] = put_quant(base, arr, bits)
            if bits != 4:
                qcfg[base] = {"group_size": GROUP_SIZE, "bits": bits}
        elif name.endswith("conv1d.weight"):
            out[mlx_name(name)] = ("BF16", np.ascontiguousarray(np.swapaxes(arr, 1, 2)))  # [C,1,K] -> [C,K,1]
            deq[name] = arr
        elif is_rms1p(name):
            onep = (arr + np.float32(1.0)).astype(np.float32)
            assert is_bf16_exact(onep)
            out[mlx_name(name)] = ("BF16", onep)
            deq[name] = arr
        else:  # gated norm, A_log (F32), dt_bias
            out[mlx_name(name)] = (dt, arr)
            deq[name] = arr
    # order override keys like mlx-lm does (by layer)
    base_keys = {"group_size", "bits", "mode"}
    ov = {k: qcfg[k] for k in qcfg if k not in base_keys}

    def lkey(k):
        parts = k.split(".")
        return (int(parts[3]), parts[-1] != "gate", k)
    q = {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}
    for k in sorted(ov, key=lkey):
        q[k] = ov[k]
    return out, deq, q


def mlx_from_file_dequant(mlx_tensors, quant, cfg=TEXT_CONFIG):
    """Reconstruct official-layout float32 weights from MLX tensors (as read from disk)."""
    res = {}
    names = set(mlx_tensors)

    def bits_of(base):
        o = quant.get(base)
        return o["bits"] if isinstance(o, dict) else quant["bits"]

    def deq(base):
        b = bits_of(base)
        return dequantize(mlx_tensors[base + ".weight"][1], mlx_tensors[base + ".scales"][1],
                          mlx_tensors[base + ".biases"][1], b)

    for n in sorted(names):
        if n.endswith(".scales") or n.endswith(".biases"):
            continue
        base = n[: -len(".weight")] if n.endswith(".weight") else n
        if n.endswith(".weight") and base + ".scales" in names:
            w = deq(base)
            if ".switch_mlp." in n:
                continue
            hf = "lm_head.weight" if n == "language_model.lm_head.weight" else HF_PREFIX + n[len(MLX_PREFIX):]
            res[hf] = w
        else:
            hf = HF_PREFIX + n[len(MLX_PREFIX):]
            arr = mlx_tensors[n][1]
            if n.endswith("conv1d.weight"):
                arr = np.ascontiguousarray(np.swapaxes(arr, 1, 2))
            elif is_rms1p(hf):
                arr = (arr - np.float32(1.0)).astype(np.float32)
            res[hf] = arr
    for i in range(cfg["num_hidden_layers"]):
        b = f"{MLX_PREFIX}layers.{i}.mlp.switch_mlp."
        res[f"{HF_PREFIX}layers.{i}.mlp.experts.gate_up_proj"] = np.concatenate(
            [deq(b + "gate_proj"), deq(b + "up_proj")], axis=1)
        res[f"{HF_PREFIX}layers.{i}.mlp.experts.down_proj"] = deq(b + "down_proj")
    return res


# --------------------------------------------------------------------------------------------
# float64 forward pass written from docs/model.md §Forward pass (recurrent GDN, eager attention)
# --------------------------------------------------------------------------------------------

def _silu(x):
    return x / (1.0 + np.exp(-x))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def _rms1p(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


def np_forward(Wf, ids, cfg=TEXT_CONFIG):
    """Wf: {official name: float array}. Returns float64 logits [T, V]."""
    f = {k: np.asarray(v, dtype=np.float64) for k, v in Wf.items()}
    eps = cfg["rms_norm_eps"]
    D = cfg["hidden_size"]
    H, KVH, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    Dk, Dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    Kc = cfg["linear_conv_kernel_dim"]
    E, k_top, I = cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
    key_dim = Hk * Dk
    R = int(hd * cfg["rope_parameters"]["partial_rotary_factor"])
    theta = float(cfg["rope_parameters"]["rope_theta"])
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    P = HF_PREFIX

    def gdn(x, A):
        mixed = x @ f[A + "in_proj_qkv.weight"].T
        z = (x @ f[A + "in_proj_z.weight"].T).reshape(T, Hv, Dv)
        b = x @ f[A + "in_proj_b.weight"].T
        a = x @ f[A + "in_proj_a.weight"].T
        cw = f[A + "conv1d.weight"][:, 0, :]  # [C, Kc]; tap Kc-1 = current token
        u = np.concatenate([np.zeros((Kc - 1, mixed.shape[1])), mixed], axis=0)
        conv = sum(cw[:, j][None, :] * u[j:j + T] for j in range(Kc))
        c = _silu(conv)
        q = c[:, :key_dim].reshape(T, Hk, Dk)
        k = c[:, key_dim:2 * key_dim].reshape(T, Hk, Dk)
        v = c[:, 2 * key_dim:].reshape(T, Hv, Dv)
        q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6)
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
        q = q / np.sqrt(Dk)
        beta = _sigmoid(b)
        g = -np.exp(f[A + "A_log"])[None, :] * _softplus(a + f[A + "dt_bias"][None, :])
        S = np.zeros((Hv, Dk, Dv))
        o = np.zeros((T, Hv, Dv))
        rep = Hv // Hk
        for t in range(T):
            for n in range(Hv):
                m = n // rep
                S[n] *= np.exp(g[t, n])
                r = S[n].T @ k[t, m]
                du = beta[t, n] * (v[t, n] - r)
                S[n] += np.outer(k[t, m], du)
                o[t, n] = S[n].T @ q[t, m]
        y = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps) * f[A + "norm.weight"] * _silu(z)
        return y.reshape(T, Hv * Dv) @ f[A + "out_proj.weight"].T

    inv = 1.0 / theta ** (np.arange(0, R, 2, dtype=np.float64) / R)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]

    def rope(x):
        xr, xp = x[..., :R], x[..., R:]
        rh = np.concatenate([-xr[..., R // 2:], xr[..., :R // 2]], axis=-1)
        return np.concatenate([xr * cos + rh * sin, xp], axis=-1)

    def attn(x, A):
        qg = (x @ f[A + "q_proj.weight"].T).reshape(T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
        k = (x @ f[A + "k_proj.weight"].T).reshape(T, KVH, hd)
        v = (x @ f[A + "v_proj.weight"].T).reshape(T, KVH, hd)
        q = rope(_rms1p(q, f[A + "q_norm.weight"], eps))
        k = rope(_rms1p(k, f[A + "k_norm.weight"], eps))
        grp = H // KVH
        out = np.zeros((T, H, hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for h in range(H):
            kv = h // grp
            sc = q[:, h, :] @ k[:, kv, :].T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            sc /= sc.sum(axis=-1, keepdims=True)
            out[:, h, :] = sc @ v[:, kv, :]
        return (out.reshape(T, H * hd) * _sigmoid(gate)) @ f[A + "o_proj.weight"].T

    def moe(x, M):
        lg = x @ f[M + "gate.weight"].T
        p = np.exp(lg - lg.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        gu, dn = f[M + "experts.gate_up_proj"], f[M + "experts.down_proj"]
        routed = np.zeros_like(x)
        for t in range(T):
            sel = np.argsort(-p[t], kind="stable")[:k_top]
            wsel = p[t, sel] / p[t, sel].sum()
            for e, we in zip(sel, wsel):
                h2 = gu[e] @ x[t]
                routed[t] += we * (dn[e] @ (_silu(h2[:I]) * h2[I:]))
        sh = (_silu(x @ f[M + "shared_expert.gate_proj.weight"].T) * (x @ f[M + "shared_expert.up_proj.weight"].T)
              ) @ f[M + "shared_expert.down_proj.weight"].T
        return routed + _sigmoid(x @ f[M + "shared_expert_gate.weight"].T) * sh

    h = f[P + "embed_tokens.weight"][ids]
    for i, lt in enumerate(cfg["layer_types"]):
        L = f"{P}layers.{i}."
        a = _rms1p(h, f[L + "input_layernorm.weight"], eps)
        h = h + (gdn(a, L + "linear_attn.") if lt == "linear_attention" else attn(a, L + "self_attn."))
        m = _rms1p(h, f[L + "post_attention_layernorm.weight"], eps)
        h = h + moe(m, L + "mlp.")
    h = _rms1p(h, f[P + "norm.weight"], eps)
    assert h.shape[1] == D
    return h @ f["lm_head.weight"].T
