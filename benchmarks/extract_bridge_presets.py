"""Extract NVIDIA Megatron-Bridge's performance presets (NeMo containers 25.09-26.06.01) into
memory-only run records: every preset NVIDIA shipped ran, so mosaic should predict it fits.

    python benchmarks/extract_bridge_presets.py [--repo PATH] [--out FILE]

For each tag the ``scripts/performance`` tree is read with ``git archive`` into a temporary
directory. From v0.2.0 on the ``*workload_base_configs.py`` modules are imported with that
directory on ``sys.path`` (they import only ``utils.utils.WorkloadBaseConfig``, a plain
dataclass) and every module-level ``WorkloadBaseConfig`` named for a pretrain preset of a model
mosaic can state is kept, one record per name (an alias such as ``..._FP8_MX_V1 =
..._FP8_CS_V1`` is its own preset). v0.1.0rc4 (25.09) has YAML ``perf_matrix`` blocks instead
(``configs/<model>/<model>_llm_pretrain.yaml``): one preset per GPU, GPU count and precision,
the precision's block over ``common``.

Only configurations are read (layouts, batches, recompute, offload, FSDP, pipeline layouts,
CUDA-graph settings); no performance table (docs/performance-summary*.md) is opened. Release
settings the launcher applies per model x GPU x precision x release (dispatcher, EP overlap,
full-iteration graphs, MTP, TE cross entropy, ...) are left to
``src/mosaic/stacks/data/recipes/megatron-bridge.yaml``, which the loader applies by the
record's ``stack_version``; a record states what its preset sets.

Container -> tag (docs/evidence/megatron_bridge_recipes_by_release.md, section 5).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

REPO = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
OUT = Path(__file__).resolve().parents[1] / "src/mosaic/evaluate/data/bridge_presets.yaml"
EXTRA_RUNS = Path(__file__).resolve().parents[1] / "src/mosaic/evaluate/data/extra_runs.yaml"
QWEN3_NEXT_EXAMPLE = Path(__file__).resolve().parents[1] / "examples/qwen3_next_80b_b200.yaml"

RELEASES = {  # NeMo container -> Megatron-Bridge tag
    "25.09": "v0.1.0rc4", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1",
    "26.04": "v0.4.0", "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1",
}

# preset model key -> (model name of the existing records, source record id of the block)
MODELS = {
    "DEEPSEEK_V3": "bridge2511-deepseekv3-w-o-mtp-gb300-256-bf16",
    "KIMI_K2": "automodel-kimi-k2-h100-256-bf16-mla",
    "QWEN3_30B_A3B": "bridge2511-qwen3-30b-a3b-gb300-8-fp8mx",
    "QWEN3_235B_A22B": "bridge2511-qwen3-235b-a22b-gb300-256-bf16",
    "QWEN3_NEXT_80B_A3B": None,  # examples/qwen3_next_80b_b200.yaml
    "GPT_OSS_120B": "bridge2511-gpt-oss-120b-gb300-64-bf16",
    "LLAMA3_8B": "bridge2511-llama3-8b-gb300-8-fp8cs",
    "LLAMA3_70B": "bridge2511-llama3-70b-gb300-64-fp8cs",
    "LLAMA31_405B": "bridge2511-llama3.1-405b-gb300-256-fp8cs",
}
SLUG = {"DEEPSEEK_V3": "deepseek-v3", "KIMI_K2": "kimi-k2", "QWEN3_30B_A3B": "qwen3-30b-a3b",
        "QWEN3_235B_A22B": "qwen3-235b-a22b", "QWEN3_NEXT_80B_A3B": "qwen3-next-80b-a3b",
        "GPT_OSS_120B": "gpt-oss-120b", "LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b",
        "LLAMA31_405B": "llama3.1-405b"}
# rc4 YAML file stem -> model key
RC4_FILES = {"deepseek/deepseek_v3": "DEEPSEEK_V3", "qwen3/qwen3_30b_a3b": "QWEN3_30B_A3B",
             "qwen3/qwen3_235b_a22b": "QWEN3_235B_A22B", "llama3/llama3_8b": "LLAMA3_8B",
             "llama3/llama3_70b": "LLAMA3_70B", "llama31/llama31_405b": "LLAMA31_405B"}
GPUS = {"H100": ("H100-SXM-80GB", 8, 8), "B200": ("B200", 8, 8), "B300": ("B300", 8, 8),
        "GB200": ("GB200", 4, 72), "GB300": ("GB300", 4, 72)}  # VR200 / R100: not catalogued
# Bridge compute dtype -> record precision. fp8_sc (v0.2.0+) and rc4's fp8 'ss' are
# subchannel (blockwise) scaling, rc4's 'ds' per-tensor delayed scaling (plain fp8: the
# stack's default recipe); utils/helpers.py get_precision_config @ v0.1.0rc4/v0.2.0,
# utils/precision.py @ v0.3.0+.
PRECISIONS = {"BF16": "bf16", "FP8_CS": "fp8-cs", "FP8_MX": "mxfp8", "FP8_SC": "fp8-blockwise",
              "FP8_DS": "fp8", "FP8_SS": "fp8-blockwise", "NVFP4": "nvfp4"}
# Models whose Bridge recipe counts the embedding and the loss as one pipeline layer slot each
# (account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split True):
# src/megatron/bridge/recipes/llama/llama31_405b.py @ v0.1.0rc4 (model_config defaults),
# recipes/llama/llama3.py llama31_405b_pretrain_config @ v0.2.0..v0.5.1 (v0.5.1:1146-1147);
# recipes/qwen/qwen3_235b_a22b.py @ v0.1.0rc4, recipes/qwen/qwen3_moe.py
# qwen3_235b_a22b_pretrain_config @ v0.2.0..v0.5.1 (v0.5.1:166-167). DeepSeek-V3, Kimi-K2 and
# GPT-OSS set both False; the perf scripts do not change them.
VOCAB_IN_PIPELINE_SPLIT = {"LLAMA31_405B", "QWEN3_235B_A22B"}
_MODEL = "|".join(sorted(MODELS, key=len, reverse=True))
_GPU = "|".join(GPUS)
_PREC = "|".join(PRECISIONS)
NAME_V2 = re.compile(rf"^({_MODEL})_({_GPU})_({_PREC})_BASE_CONFIG$")  # v0.2.0
NAME_V3 = re.compile(  # v0.3.0+
    rf"^({_MODEL})_PRETRAIN_CONFIG_({_GPU})_({_PREC})(?:_(V\d+|LARGE_SCALE|GBS\d+))?$")


def seq_len(model: str, tag: str) -> int:
    """The preset's sequence length: set by the model's perf common function
    (scripts/performance/configs/*/*_llm_pretrain.py: DeepSeek-V3, Kimi-K2, Qwen3 MoE 4096;
    Llama 3/3.1 8192; Qwen3-Next set_qwen3_next_common_configs 8192 @ v0.2.0..v0.3.1, from
    v0.4.0 set_qwen3_common_configs 4096) or, for GPT-OSS-120B, whose perf script sets none,
    the model recipe's (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py: 4096 at every tag;
    the 8192 of gpt_oss_llm_pretrain.py @ v0.5.x is GPT-OSS-20B's). rc4 states seq_length in
    each perf_matrix block (read there)."""
    if model.startswith("LLAMA"):
        return 8192
    if model == "QWEN3_NEXT_80B_A3B" and tag in ("v0.2.0", "v0.3.0", "v0.3.1"):
        return 8192
    return 4096


def archive(repo: Path, tag: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", tag,
                           "scripts/performance"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "scripts/performance"


def presets_py(perf: Path, tag: str) -> list[dict]:
    """Every WorkloadBaseConfig preset of a model we keep, as {name, model, gpu, prec,
    variant, file, fields}."""
    for name in [m for m in sys.modules if m == "utils" or m.startswith("utils.")]:
        del sys.modules[name]
    sys.path.insert(0, str(perf))
    try:
        from utils.utils import WorkloadBaseConfig  # type: ignore[import-not-found]
        found = []
        for path in sorted(perf.glob("configs/*/*workload_base_configs.py")):
            spec = importlib.util.spec_from_file_location(f"wbc_{tag}_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for attr, value in vars(module).items():
                if not isinstance(value, WorkloadBaseConfig):
                    continue
                match = (NAME_V2 if tag == "v0.2.0" else NAME_V3).match(attr)
                if match is None:
                    continue
                model, gpu, prec = match.group(1, 2, 3)
                variant = match.group(4) if tag != "v0.2.0" else None
                fields = {f: getattr(value, f) for f in value.__dataclass_fields__}
                found.append({"name": attr, "model": model, "gpu": gpu, "prec": prec,
                              "variant": variant, "file": str(path.relative_to(perf.parents[1])),
                              "fields": fields})
        return found
    finally:
        sys.path.remove(str(perf))


def presets_rc4(perf: Path) -> list[dict]:
    found = []
    for stem, model in RC4_FILES.items():
        rel = f"configs/{stem}_llm_pretrain.yaml"
        matrix = yaml.safe_load((perf / rel).read_text())["perf_matrix"]
        for gpu_key, by_count in matrix.items():
            gpu = gpu_key.upper()
            for count_key, block in by_count.items():
                common = block.get("common") or {}
                for prec_key, override in block.items():
                    if prec_key == "common":
                        continue
                    fields = {**common, **(override or {})}
                    fields["num_gpus"] = int(count_key.removeprefix("num_gpus_"))
                    found.append({
                        "name": f"perf_matrix.{gpu_key}.{count_key}.{prec_key}",
                        "model": model, "gpu": gpu, "prec": prec_key.upper(), "variant": None,
                        "file": f"scripts/performance/{rel}", "fields": fields})
    return found


def normalise(preset: dict, tag: str) -> dict:
    """The rc4 YAML keys spelled as WorkloadBaseConfig fields."""
    if tag != "v0.1.0rc4":
        return preset["fields"]
    f = preset["fields"]
    return {
        "num_gpus": f["num_gpus"], "tensor_model_parallel_size": f.get("tp", 1),
        "pipeline_model_parallel_size": f.get("pp", 1), "context_parallel_size": f.get("cp", 1),
        "virtual_pipeline_model_parallel_size": f.get("vp"),
        "expert_model_parallel_size": f.get("ep", 1), "expert_tensor_parallel_size": f.get("etp"),
        "global_batch_size": f["gbs"], "micro_batch_size": f["mbs"],
        "use_megatron_fsdp": f.get("use_megatron_fsdp") or f.get("fsdp"),
        "cpu_offloading_num_layers": f.get("cpu_offloading_num_layers") or None,
        "recompute_num_layers": f.get("recompute_num_layers"),
        "rc4_cuda_graphs": f.get("cuda_graphs"), "seq_length": f.get("seq_length"),
        "num_gpus_per_node": f.get("num_gpus_per_node"),
    }


def model_blocks() -> dict[str, dict]:
    runs = {r["id"]: r for r in yaml.safe_load(EXTRA_RUNS.read_text())["runs"]}
    blocks = {key: dict(runs[rid]["model"]) for key, rid in MODELS.items() if rid}
    blocks["DEEPSEEK_V3"]["mtp_layers"] = None  # the recipe's one MTP module (recipes file)
    blocks["QWEN3_NEXT_80B_A3B"] = yaml.safe_load(QWEN3_NEXT_EXAMPLE.read_text())["model"]
    return blocks


def record(preset: dict, release: str, tag: str, blocks: dict[str, dict]) -> dict | None:
    f = normalise(preset, tag)
    model = preset["model"]
    gpu, per_node, domain = GPUS[preset["gpu"]]
    n = int(f["num_gpus"])
    tp, pp = int(f["tensor_model_parallel_size"]), int(f["pipeline_model_parallel_size"])
    cp = int(f["context_parallel_size"] or 1)
    vpp = f.get("virtual_pipeline_model_parallel_size")
    ep = int(f.get("expert_model_parallel_size") or 1)
    block = blocks[model]
    moe = bool((block.get("moe") or {}).get("experts"))
    notes = []
    etp = f.get("expert_tensor_parallel_size")
    if not moe:
        ep, etp = 1, 1
    elif etp is None:
        etp = tp
        notes.append("expert_tensor_parallel_size unset: Megatron-Core's default, the TP size")
    dp = n // (tp * pp * cp)
    fsdp = bool(f.get("use_megatron_fsdp"))
    parallelism = {"tp": tp, "pp": pp, "vpp": vpp, "cp": cp, "ep": ep, "etp": etp, "dp": dp,
                   "sequence_parallel": tp > 1, "sharding": "fsdp" if fsdp else "zero1",
                   "dispatcher": None}
    if f.get("pp_layout"):
        if block.get("hybrid_pattern"):
            notes.append(f"pp_layout {f['pp_layout']!r} not stated: a hybrid pattern takes no "
                         "pipeline_layout (docs/schema.md)")
        else:
            parallelism["pipeline_layout"] = f["pp_layout"]
    if model in VOCAB_IN_PIPELINE_SPLIT and pp > 1 and "pipeline_layout" not in parallelism:
        parallelism["vocab_in_pipeline_split"] = True
    seq = int(f.get("seq_length") or seq_len(model, tag))
    entry = {
        "id": (f"preset-{tag}-{SLUG[model]}-{preset['gpu'].lower()}-"
               f"{preset['prec'].lower().replace('_', '')}"
               + (f"-{preset['variant'].lower().replace('_', '')}" if preset["variant"] else "")
               + (f"-n{n}" if tag == "v0.1.0rc4" else "")),
        "source": (f"NVIDIA-NeMo/Megatron-Bridge @ {tag} {preset['file']} {preset['name']} "
                   "(performance preset; configuration only)"),
        "software": f"NeMo {release} container / Megatron-Bridge + Megatron-Core",
        "stack": "megatron-bridge",
        "stack_version": f"NeMo {release} container",
        "gpu": gpu, "num_gpus": n, "gpus_per_node": per_node, "scaleup_domain": domain,
        "model": block,
        "precision": PRECISIONS[preset["prec"]],
        "parallelism": parallelism,
        "batch": {"global_seqs": int(f["global_batch_size"]),
                  "micro_seqs": int(f["micro_batch_size"]), "seq_len": seq},
        "recompute": "unknown",
    }
    # what the preset itself sets (utils/overrides.py set_workload_base_configs and
    # _set_recompute_overrides @ v0.3.0+, utils/helpers.py @ v0.1.0rc4/v0.2.0)
    layers = int(block["layers"])
    if f.get("recompute_num_layers") is not None:
        # recompute_granularity full, recompute_method block: the first k blocks of each
        # model chunk (Megatron-Core transformer_block.py _checkpointed_forward)
        per_chunk = layers / (pp * (vpp or 1))
        entry["recompute"] = "full"
        entry["recompute_block_fraction"] = round(min(1.0, f["recompute_num_layers"]
                                                      / per_chunk), 6)
        notes.append(f"recompute_num_layers {f['recompute_num_layers']} of "
                     f"{per_chunk:g} blocks per model chunk")
    elif f.get("recompute_modules"):
        entry["recompute"] = "selective"
        entry["recompute_modules"] = list(f["recompute_modules"])
    if f.get("cpu_offloading_num_layers"):
        entry["offloaded_activation_layers"] = int(f["cpu_offloading_num_layers"])
    graph_impl, scope = f.get("cuda_graph_impl"), f.get("cuda_graph_scope")
    if graph_impl == "full_iteration" or (graph_impl == "local" and scope == "full_iteration"):
        entry["full_iteration_cuda_graph"] = True
    if f.get("rc4_cuda_graphs"):
        entry["layer_cuda_graphs"] = True  # rc4 cuda_graphs -> model.enable_cuda_graph
    entry["measured"] = {"tokens_per_s_per_gpu": None, "step_time_s": None,
                         "memory_gib": None, "oom": False, "trained": True}
    entry["flops_convention"] = "none_reported"
    entry["confidence"] = "medium"
    entry["notes"] = " | ".join(["shipped preset: assumed to have trained (no measurement read)",
                                 *notes])
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    blocks = model_blocks()
    runs, seen = [], set()
    for release, tag in RELEASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            perf = archive(args.repo, tag, Path(tmp))
            presets = presets_rc4(perf) if tag == "v0.1.0rc4" else presets_py(perf, tag)
        kept = 0
        for preset in presets:
            entry = record(preset, release, tag, blocks)
            if entry is None or entry["id"] in seen:
                continue
            seen.add(entry["id"])
            runs.append(entry)
            kept += 1
        print(f"{release:9s} {tag:10s} {kept:4d} presets")
    doc = {
        "schema_version": 1,
        "description": (
            "Megatron-Bridge performance presets (NeMo containers 25.09-26.06.01) as "
            "memory-only run records: every preset shipped in scripts/performance ran, so each "
            "is recorded as trained (measured.trained: true) with no throughput. Generated by "
            "benchmarks/extract_bridge_presets.py from the configuration code of each tag; no "
            "performance table was read. docs/evidence/bridge_presets_memory.md."),
        "runs": runs,
    }
    args.out.write_text(yaml.safe_dump(doc, sort_keys=False, width=100))
    print(f"{len(runs)} records -> {args.out}")


if __name__ == "__main__":
    main()
