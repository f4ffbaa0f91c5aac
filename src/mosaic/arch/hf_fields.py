"""Typed, bounded reading of a HuggingFace ``config.json``, and which of its fields were read.

:class:`ConfigFields` gives one-line errors naming the field; the mapping it reads through
records every key looked at, so the importer can say which fields of a config it never
read (:func:`unread_fields`) instead of dropping them in silence (a trial: a relabelled
GLM config lost its MTP layer and q/k norms without a word).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mosaic.errors import MosaicInputError, shown
from mosaic.limits import LIMITS, is_finite_number, shown_number

# Config fields that count layers (checked against LIMITS["layers"]; other counts and widths
# against LIMITS["vocab"], the widest range of any field).
LAYER_COUNT_FIELDS = {name: "layers" for name in (
    "num_hidden_layers", "num_nextn_predict_layers", "first_k_dense_replace",
    "decoder_sparse_step", "full_attention_interval", "interleave_moe_layer_step",
    "moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval")}

# Fields that change neither a parameter count nor the compute of a training step: ids and
# bookkeeping, initialisation, norm epsilons, dropout, inference caches and position limits,
# RoPE scaling for long contexts, and router loss weights and noise (a training choice the
# exports state on their own). Any other field left unread is named in a warning.
NO_SHAPE_FIELDS = frozenset((
    "architectures", "model_type", "auto_map", "torch_dtype", "dtype",
    "transformers_version", "_name_or_path", "name_or_path", "tokenizer_class",
    "bos_token_id", "eos_token_id", "pad_token_id", "eod_token_id", "sep_token_id",
    "initializer_range",
    "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "norm_eps", "max_position_embeddings", "use_cache", "rope_scaling", "rope_type",
    "attention_dropout", "hidden_dropout", "dropout", "output_router_logits",
    # BailingMoeV2Config's dropouts (Ling 2.0)
    "embedding_dropout", "output_dropout",
    "router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "router_jitter_noise",
    "router_z_loss_coef", "quantization_config", "pretraining_tp", "is_decoder",
    "return_dict", "output_attentions", "output_hidden_states", "ep_size",
    "use_sliding_window", "max_window_layers", "topk_method", "swiglu_limit",
    "rope_interleave", "keys_to_ignore_at_inference", "num_logits_to_keep",
    "initial_context_length", "attn_scale", "attn_temperature_tuning", "floor_scale",
    "cache_implementation", "for_llm_compressor", "mamba_hidden_act", "time_step_floor",
    "time_step_min", "time_step_max", "time_step_limit", "time_step_rank",
    "rescale_prenorm_residual", "residual_in_fp32", "use_mamba_kernels", "mamba_chunk_size",
    # scalars that scale activations (GraniteMoeConfig) or clamp them (OlmoeConfig.clip_qkv)
    "embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier",
    "clip_qkv",
    # the inference SSM cache's dtype (NemotronHConfig.mamba_ssm_cache_dtype) and the dtype
    # the router computes in (Glm4MoeConfig-style moe_router_dtype): precision, not shape
    "mamba_ssm_cache_dtype", "moe_router_dtype",
    # the stored weights' precision in an mlx-lm conversion (mlx-community/dbrx-instruct-4bit
    # config.json: {"group_size": 64, "bits": 4}), not the model's shape
    "quantization",
))

# PretrainedConfig's own attributes (transformers configuration_utils.py
# PretrainedConfig.__init__ and its generation defaults): output flags, label maps, token ids
# and sampling settings. A sub-config class (DbrxAttentionConfig, DbrxFFNConfig) inherits
# them, so a config saved through it repeats them inside its block (mlx-community/
# dbrx-instruct-4bit config.json: attn_config.return_dict, .max_length, .top_k, .id2label);
# no model module reads them from a block.
PRETRAINED_CONFIG_FIELDS = frozenset((
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "torch_dtype",
    "dtype", "pruned_heads", "tie_word_embeddings", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size", "add_cross_attention",
    "tie_encoder_decoder", "architectures", "finetuning_task", "id2label", "label2id",
    "task_specific_params", "problem_type", "tokenizer_class", "prefix", "bos_token_id",
    "pad_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id", "model_type",
    "transformers_version", "_name_or_path", "_commit_hash", "attn_implementation",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
))


def _field_kind(name: str) -> str:
    """The physical range (mosaic.limits) a config count belongs to: layers, the
    vocabulary, expert counts, else a width (d_model, FFN, heads, head and latent dims)."""
    if name in LAYER_COUNT_FIELDS:
        return LAYER_COUNT_FIELDS[name]
    if "vocab" in name:
        return "vocab"
    if "expert" in name and not name.endswith("_size"):
        return "experts"
    return "width"


class ReadTracker(Mapping[str, Any]):
    """A read-only view of a config that records every key looked up, present or not.

    ``items()``, ``values()`` and equality look at the data without recording reads (the
    Mapping mixins would fetch every key); a bulk copy (``dict(tracker)``, ``{**tracker}``)
    still reads every key, so the importer copies single fields only."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.read: set[str] = set()
        # nested blocks read through their own trackers (:meth:`ConfigFields.block`)
        self.blocks: dict[str, ReadTracker] = {}

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def items(self) -> Any:
        return self._data.items()

    def values(self) -> Any:
        return self._data.values()

    def __eq__(self, other: object) -> bool:
        return self._data == (other._data if isinstance(other, ReadTracker) else other)

    __hash__ = None  # type: ignore[assignment]  # a mapping, unhashable as dict is

    def __len__(self) -> int:
        return len(self._data)


def unread_fields(tracker: ReadTracker, no_shape: frozenset[str] = NO_SHAPE_FIELDS
                  ) -> list[str]:
    """The config's fields never read that may change its shape (not in ``no_shape``, not a
    ``_``-prefixed comment or path, and not null: a null states nothing, the config class's
    default applies; a trial found released Nemotron 3 configs warned of their
    ``sliding_window: null``), in the config's order; a nested block's as ``block.field``
    (:data:`PRETRAINED_CONFIG_FIELDS` have no shape there either)."""
    values = dict(tracker.items())
    unread = [key for key in tracker if key not in tracker.read and key not in no_shape
              and not key.startswith("_") and values[key] is not None]
    for name, block in tracker.blocks.items():
        unread += [f"{name}.{key}" for key in unread_fields(
            block, NO_SHAPE_FIELDS | PRETRAINED_CONFIG_FIELDS)]
    return unread


class ConfigFields:
    """Typed access to a config mapping with one-line errors naming the field."""

    def __init__(self, config: Mapping[str, Any], where: str) -> None:
        self.config = config
        self.where = where

    def int(self, name: str, default: int | None = None) -> int:
        """A positive integer; absent or null, ``default`` (a stated null means "derive it",
        as transformers' config classes read it: Mistral-7B-Instruct-v0.3's ``head_dim:
        null`` was refused as missing; a trial), and without one an error."""
        value = self.config.get(name)
        if value is None:
            value = default
        if value is None:
            raise MosaicInputError(f"{self.where}: missing required field {name!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise MosaicInputError(
                f"{self.where}: {name} must be a positive integer, got {value!r}")
        return self._bounded(name, value)

    def _bounded(self, name: str, value: int) -> int:
        """``value`` within the physical range of its field, checked before any per-layer
        list is built from it (a config with 1e30 layers never returned; a trial)."""
        limit = LIMITS[_field_kind(name)]
        if value > limit.high:
            shown = shown_number(value)
            raise MosaicInputError(f"{self.where}: {name} is {shown}; allowed at most "
                                   f"{limit.high:g} ({limit.why})")
        return value

    def block(self, name: str) -> ConfigFields:
        """The fields of the nested object ``name`` (DBRX's ``attn_config``); absent or null,
        an empty one (the config class's defaults apply). Its reads are tracked apart and
        its unread fields named as ``name.field`` (:func:`unread_fields`)."""
        value = self.config.get(name)
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise MosaicInputError(f"{self.where}: {name} must be a JSON object, got "
                                   f"{shown(value)}")
        tracker = ReadTracker(value)
        if isinstance(self.config, ReadTracker):
            self.config.blocks[name] = tracker
        return ConfigFields(tracker, f"{self.where}: {name}")

    def ignored(self, *names: str) -> None:
        """Mark fields as read that this family's model does not build from (it ignores
        them, or they carry no weights here), so :func:`unread_fields` does not name them."""
        for name in names:
            self.config.get(name)

    def optional_int(self, name: str) -> int | None:
        return None if self.config.get(name) is None else self.int(name)

    def count(self, name: str, default: int = 0) -> int:
        """A non-negative integer (0 allowed)."""
        value = self.config.get(name, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MosaicInputError(
                f"{self.where}: {name} must be a non-negative integer, got {value!r}")
        return self._bounded(name, value)

    def index_list(self, name: str, layers: int | None = None) -> list[int]:
        """A list of non-negative integers (layer indices), each below ``layers`` where
        given (a trial's mlp_only_layers [99] on 48 layers was dropped without a word);
        absent or null = empty."""
        value = self.config.get(name)
        value = [] if value is None else value  # (0 or "" is not a list: refused below)
        if not isinstance(value, list) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in value):
            raise MosaicInputError(
                f"{self.where}: {name} must be a list of layer indices, got {value!r}")
        past = [i for i in value if layers is not None and i >= layers]
        if past:
            raise MosaicInputError(f"{self.where}: {name} names layer(s) {past} past the "
                                   f"last of num_hidden_layers={layers} (indices 0..{layers - 1})")
        return value

    def positive_float(self, name: str, default: float | None = None) -> float | None:
        """A positive, finite number (int or float); absent or null = ``default`` (a
        400-digit integer made float() raise OverflowError, a traceback)."""
        value = self.config.get(name)
        if value is None:
            return default
        if not is_finite_number(value) or not value > 0:
            shown = shown_number(value)
            raise MosaicInputError(f"{self.where}: {name} must be a positive finite number, "
                                   f"got {shown}")
        return float(value)

    def _rope_fields(self) -> ConfigFields:
        """The rotary fields where transformers >= 5 nests them (``rope_parameters``), a
        top-level ``rope_theta`` or ``partial_rotary_factor`` taking precedence."""
        nested = self.config.get("rope_parameters")
        if not isinstance(nested, Mapping):
            return self
        top = {key: self.config[key] for key in ("rope_theta", "partial_rotary_factor")
               if key in self.config}
        return ConfigFields({**nested, **top}, self.where)

    def rotary_fraction(self) -> float | None:
        """The stated ``partial_rotary_factor`` (top level or nested); None where absent."""
        return self._rope_fields().positive_float("partial_rotary_factor")

    def rope(self, fraction_default: float = 1.0) -> dict[str, Any]:
        """The rotary embedding's base (``rope_theta``) and rotating share
        (``partial_rotary_factor``) where the config states them."""
        fraction = self.rotary_fraction()
        return {"rope_base": self._rope_fields().positive_float("rope_theta"),
                "rope_fraction": fraction_default if fraction is None else fraction}

    def bool(self, name: str, default: bool) -> bool:
        value = self.config.get(name, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise MosaicInputError(f"{self.where}: {name} must be true or false, got {value!r}")
        return value
