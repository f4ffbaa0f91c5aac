"""DBRX: its own field names, attention and FFN fields nested in ``attn_config`` and
``ffn_config``."""

from __future__ import annotations

import warnings

from mosaic.arch.geometry import AttentionKind, Geometry, MoEConfig, NormKind, RouterConfig
from mosaic.arch.hf_fields import ConfigFields
from mosaic.arch.hf_warnings import UnmodelledFieldWarning
from mosaic.errors import MosaicInputError, shown

# DbrxExpertGLU's activation (transformers models/dbrx/modeling_dbrx.py: ACT2FN[name] of
# ffn_config.ffn_act_fn, gating v1's output) as mosaic's gated FFN
DBRX_ACTIVATIONS = {"silu": "swiglu", "gelu": "geglu"}


def dbrx(fields: ConfigFields) -> Geometry:
    """``DbrxConfig`` (DBRX; transformers models/dbrx configuration_dbrx.py and
    modeling_dbrx.py): ``n_layers`` blocks of ``d_model``, each a bias-free ``nn.LayerNorm``
    (``norm_1``), attention with one fused bias-free ``Wqkv`` (d -> d + 2 x kv_n_heads x
    head_dim, head_dim = d_model / n_heads) and a bias-free ``out_proj``, a second bias-free
    LayerNorm (``norm_2``), then ``DbrxFFN``: a bias-free router over ``moe_num_experts``
    GLU experts (w1, v1: d -> ffn_hidden_size, w2 back) of which ``moe_top_k`` run; a
    bias-free final LayerNorm (``norm_f``), an untied LM head (``DbrxConfig`` refuses
    ``tie_word_embeddings``). The router (``DbrxRouter``): softmax over every expert, the
    top-k weights divided by their p-norm, p = ``moe_normalize_expert_weights`` (1: they
    sum to 1; null: not renormalised), and ``load_balancing_loss_func`` weighted by
    ``moe_loss_weight``. ``clip_qkv`` clamps the q/k/v activations and ``moe_jitter_eps``
    scales the router's input by noise in training: neither has weights or changes FLOPs.

    mosaic's LayerNorm counts a gain and a bias (:func:`mosaic.arch.counts.params_per_norm`);
    DBRX's have the gain alone, so the counts hold d_model parameters a norm more than the
    checkpoint (2 x n_layers + 1 norms), said in a warning."""
    where = fields.where
    attn, ffn = fields.block("attn_config"), fields.block("ffn_config")
    if fields.bool("tie_word_embeddings", False):
        raise MosaicInputError(f"{where}: tie_word_embeddings=true: DbrxConfig refuses it "
                               "(DBRX's LM head is its own)")
    act = ffn.block("ffn_act_fn").config.get("name", "silu")  # DbrxFFNConfig: silu if absent
    if act not in DBRX_ACTIVATIONS:
        raise MosaicInputError(f"{where}: ffn_config.ffn_act_fn.name {shown(act)} is not "
                               f"supported; allowed: {', '.join(DBRX_ACTIVATIONS)}")
    d_model, heads = fields.int("d_model"), fields.int("n_heads")
    if d_model % heads:
        raise MosaicInputError(f"{where}: n_heads ({heads}) must divide d_model ({d_model}): "
                               "DbrxAttention's head_dim is d_model / n_heads")
    kv_heads = attn.int("kv_n_heads")  # DbrxAttentionConfig's 1 describes no DBRX: state it
    norm_power = ffn.config.get("moe_normalize_expert_weights", 1.0)
    if norm_power not in (None, 1):
        warnings.warn(f"{where}: ffn_config.moe_normalize_expert_weights {shown(norm_power)}: "
                      "the top-k weights divided by their p-norm are read as renormalised to "
                      "sum to 1 (p = 1): the same weights and FLOPs, but exports write a "
                      "sum-to-one router", UnmodelledFieldWarning, stacklevel=4)
    router = RouterConfig(score="softmax", balancing="aux_loss",
                          normalize_top_k=norm_power is not None, top_k_scaling=1.0)
    # training behaviours without weights: dropouts, the q/k/v clamp, router input noise and
    # loss weight, MegaBlocks' uniform_expert_assignment (round-robin expert indices for
    # benchmarks; megablocks/layers/router.py), which DbrxRouter does not read; and the
    # rotary position limit
    fields.ignored("emb_pdrop", "resid_pdrop", "max_seq_len")
    attn.ignored("attn_pdrop", "clip_qkv")
    ffn.ignored("moe_jitter_eps", "moe_loss_weight", "uniform_expert_assignment")
    layers = fields.int("n_layers")
    warnings.warn(f"{where}: DBRX's LayerNorms have no bias (nn.LayerNorm(bias=False)); "
                  f"mosaic's LayerNorm counts one, {2 * layers + 1} norms x {d_model} = "
                  f"{(2 * layers + 1) * d_model:,} parameters more than the checkpoint",
                  UnmodelledFieldWarning, stacklevel=4)
    moe = MoEConfig(experts=ffn.int("moe_num_experts"), top_k=ffn.int("moe_top_k"),
                    expert_ffn=ffn.int("ffn_hidden_size"), router=router)
    return Geometry(layers=layers, d_model=d_model, vocab=fields.int("vocab_size"),
                    glu=True, activation=DBRX_ACTIVATIONS[act], norm=NormKind.LAYERNORM,
                    tied_embeddings=False, **attn.rope(), heads=heads, kv_heads=kv_heads,
                    head_dim=d_model // heads,
                    attention=AttentionKind.MHA if kv_heads == heads else AttentionKind.GQA,
                    ffn=moe.expert_ffn, moe=moe)
