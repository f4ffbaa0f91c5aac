"""Settings a stack's performance recipes switch on (mosaic.config.recipes), applied to run
records and jobs. Expected values read by hand in NVIDIA-NeMo/Megatron-Bridge
scripts/performance/configs/qwen/qwen3_workload_base_configs.py: Qwen3-30B-A3B MXFP8 on GB200
runs a full-iteration CUDA graph with the EP all-to-all overlap from v0.5.0 (NeMo 26.06,
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: cuda_graph_impl 'full_iteration',
moe_a2a_overlap True); on B200 the v0.5.0 MXFP8 preset is the BF16 one (partial TE graphs,
no overlap) and v0.5.1 (26.06.01) adds the bundle. Earlier releases, other precisions and
records that state a setting keep theirs."""

from copy import deepcopy
from pathlib import Path

import pytest
import yaml

from mosaic.config.job_schema import job_document, job_from_document, job_from_run_record
from mosaic.config.run_records import _validate_entry, load_run_records, run_record_from_entry
from mosaic.stacks.registry import parse_release, release_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"
EXTRA_RUNS = (Path(__file__).resolve().parents[2] / "src" / "mosaic" / "evaluate" / "data"
              / "extra_runs.yaml")
SHARED_RUNS = [Path(__file__).resolve().parents[3] / "shared" / "calibration" / name
               for name in ("published_runs.yaml", "paper_p6b200_sweeps.yaml")]


def _record(software: str, gpu: str = "B200", precision: str = "mxfp8", **stated):
    runs = yaml.safe_load(EXAMPLES.read_text())["runs"]
    raw = deepcopy(next(r for r in runs if r["id"].startswith("example-bridge-qwen3")))
    raw.update(software=software, gpu=gpu, precision=precision, **stated)
    return run_record_from_entry(_validate_entry(raw, "test"))


@pytest.mark.parametrize(("text", "expected"), [
    ("NeMo 26.06 container / Megatron-Bridge + Megatron-Core", (26, 6)),
    ("nvcr.io/nvidia/nemo:26.02.01", (26, 2)),
    ("Megatron-Bridge v0.2.0 (25.11)", (25, 11)),
    ("torch 2.13.0", None),
    (None, None),
])
def test_release_is_the_first_yy_mm_number(text, expected):
    assert parse_release(text) == expected


def test_qwen3_30b_mxfp8_on_gb200_from_2606_runs_one_graph_with_ep_overlap():
    record = _record("NeMo 26.06 container / Megatron-Bridge + Megatron-Core", gpu="GB200",
                     gpus_per_node=4, scaleup_domain=72)
    assert record.workload.stack == "megatron-bridge"
    assert record.workload.full_iteration_cuda_graph is True
    assert record.workload.ep_overlap is True
    assert str(record.workload.dispatcher) == "hybridep"
    assert any("recipe settings" in line for line in record.assumptions)


def test_on_b200_the_bundle_arrives_with_the_point_release_2606_01():
    first = _record("NeMo 26.06 container / Megatron-Bridge + Megatron-Core")
    assert (first.workload.full_iteration_cuda_graph, first.workload.ep_overlap) == (
        False, False)
    point = _record("NeMo 26.06.01 container / Megatron-Bridge + Megatron-Core")
    assert (point.workload.full_iteration_cuda_graph, point.workload.ep_overlap) == (
        True, True)


@pytest.mark.parametrize(("software", "gpu", "precision"), [
    ("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "B200", "mxfp8"),
    ("NeMo 26.06 container / Megatron-Bridge + Megatron-Core", "B200", "bf16"),
    ("NeMo 26.06 container / Megatron-Bridge + Megatron-Core", "H100-SXM-80GB", "fp8-cs"),
    ("Megatron-LM 26.06", "B200", "mxfp8"),  # megatron-core: no recipe sets the graph
])
def test_other_releases_precisions_gpus_and_stacks_keep_the_plain_defaults(
        software, gpu, precision):
    record = _record(software, gpu=gpu, precision=precision)
    assert record.workload.full_iteration_cuda_graph is False
    assert not any("full_iteration_cuda_graph=True" in line for line in record.assumptions)


def test_a_record_that_states_the_setting_keeps_it():
    record = _record("NeMo 26.06 container / Megatron-Bridge + Megatron-Core", gpu="GB200",
                     gpus_per_node=4, scaleup_domain=72, full_iteration_cuda_graph=False)
    assert record.workload.full_iteration_cuda_graph is False
    assert "full_iteration_cuda_graph" in record.stated_settings
    assert record.workload.ep_overlap is True  # not stated: the recipe's


def test_a_job_with_a_stack_version_takes_the_recipes_unless_it_states_them():
    """The job's model has no recipe of its own: the release's entry for every MoE model
    applies (the MXFP8 Blackwell bundle from 26.06)."""
    from mosaic.config.job_schema import job_from_document

    def job(version, **performance):
        return job_from_document({
            "model": {"layers": 4, "d_model": 512, "heads": 8, "kv_heads": 8, "head_dim": 64,
                      "ffn": 256, "vocab": 1000,
                      "moe": {"experts": 16, "top_k": 2, "expert_ffn": 256}},
            "batch": {"global_seqs": 64, "seq_len": 1024},
            "parallelism": {"ep": 8, "dp": 8},
            "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                            "stack_version": version, **performance},
            "hardware": {"system": "DGX-B200", "nodes": 1}}, "test").workload

    assert (job("26.06").full_iteration_cuda_graph, job("26.06").ep_overlap) == (True, True)
    assert (job("26.04").full_iteration_cuda_graph, job("26.04").ep_overlap) == (False, False)
    assert job("26.06", full_iteration_cuda_graph=False).full_iteration_cuda_graph is False
    assert job("26.06", precision="fp8").full_iteration_cuda_graph is False  # not MXFP8
    with pytest.raises(Exception, match="stack_version"):
        job("26.6")
    # 26.4 unquoted is the number 26.40: no month 40, refused with the fix, not matched to
    # nothing; 2604 and 26.13 likewise
    for bad in (26.4, 2604, "26.13"):
        with pytest.raises(Exception, match="month 01-12"):
            job(bad)
    # An unquoted YAML or --set value arrives as a number: 26.06 is June; 26.1 could be
    # October (an unquoted 26.10) or January, so it is refused with both readings.
    assert job(26.06).full_iteration_cuda_graph is True
    for ambiguous in (26.1, 25.1):
        with pytest.raises(Exception, match=r"could be '2[56]\.10' or '2[56]\.01'"):
            job(ambiguous)
    assert job("26.10").full_iteration_cuda_graph is True  # quoted: October, after 26.06


def test_a_job_in_fp8_with_current_scaling_takes_the_fp8_cs_recipes():
    """Megatron-Bridge's FP8_CS presets gather FP8 parameters; a job saying precision fp8
    and fp8_recipe current is that precision, plain fp8 (delayed) is not."""
    from mosaic.config.job_schema import job_from_document

    def job(**performance):
        return job_from_document({
            "model": {"layers": 4, "d_model": 512, "heads": 8, "kv_heads": 8, "head_dim": 64,
                      "ffn": 256, "vocab": 1000},
            "batch": {"global_seqs": 64, "seq_len": 1024},
            "parallelism": {"dp": 8},
            "performance": {"precision": "fp8", "stack": "megatron-bridge",
                            "stack_version": "26.04", **performance},
            "hardware": {"system": "DGX-B200", "nodes": 1}}, "test").workload

    assert job(fp8_recipe="current").fp8_param_gather is True
    assert job(fp8_recipe="delayed").fp8_param_gather is False


def test_a_record_stack_version_given_as_a_number_is_read_as_yy_mm():
    """A record whose software text names no release can state it in stack_version, also
    unquoted (26.06 as a number)."""
    record = _record("Megatron-Bridge performance recipes", stack="megatron-bridge",
                     stack_version=26.06, gpu="GB200", gpus_per_node=4, scaleup_domain=72)
    assert record.workload.full_iteration_cuda_graph is True
    older = _record("Megatron-Bridge performance recipes", stack="megatron-bridge",
                    stack_version=25.11, gpu="GB200", gpus_per_node=4, scaleup_domain=72)
    assert older.workload.full_iteration_cuda_graph is False


def test_a_nemo2_mixtral_record_of_unknown_routing_takes_the_recipes_token_drop():
    """NVIDIA/NeMo @ v2.2.0 nemo/collections/llm/recipes/mixtral_8x7b.py
    pretrain_performance_optimizations adds MegatronTokenDropCallback (capacity 1.0, inputs
    padded; nemo/lightning/pytorch/callbacks/moe_token_drop.py): drop-and-pad on the
    all-to-all dispatcher, which never waits on the host for expert counts."""
    from mosaic.perf.routing_load import expert_counts_reach_host

    record = _record("NeMo 25.04", gpu="GB200", precision="bf16", gpus_per_node=4,
                     scaleup_domain=72, routing="unknown")
    assert record.workload.routing == "unknown"  # Qwen3-30B geometry: no NeMo 2 recipe
    runs = yaml.safe_load(EXAMPLES.read_text())["runs"]
    raw = deepcopy(next(r for r in runs if r["id"].startswith("example-bridge-qwen3")))
    raw["model"].update(name="Mixtral-8x7B", layers=32, d_model=4096, heads=32, kv_heads=8,
                        vocab=32000)
    raw["model"]["moe"].update(experts=8, top_k=2, expert_ffn=14336)
    raw.update(software="NeMo 25.04", gpu="GB200", precision="bf16", gpus_per_node=4,
               scaleup_domain=72, routing="unknown")
    raw["parallelism"].update(ep=8, dispatcher=None)
    mixtral = run_record_from_entry(_validate_entry(raw, "test"))
    assert mixtral.workload.routing == "token_drop"
    assert mixtral.workload.pad_to_capacity is True
    assert not expert_counts_reach_host(mixtral.workload)
    stated = run_record_from_entry(_validate_entry({**raw, "routing": "dropless"}, "test"))
    assert stated.workload.routing == "dropless"  # a stated regime keeps its own


def test_a_qwen3_30b_job_takes_its_model_entry_of_the_release_not_the_point_release():
    """Megatron-Bridge v0.5.0 (NeMo 26.06): Qwen3-30B-A3B MXFP8 on B200 keeps the BF16 preset
    (no full-iteration graph, no EP overlap; the bundle arrives with 26.06.01), on GB200 it
    runs the bundle (recipes/megatron-bridge.yaml, the 26.06 Qwen3-30B entries)."""
    from mosaic.config.job_schema import job_from_document

    def job(system):
        return job_from_document({
            "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4,
                      "head_dim": 128, "ffn": 6144, "vocab": 151936,
                      "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
            "batch": {"global_seqs": 64, "seq_len": 4096},
            "parallelism": {"ep": 8, "dp": 8},
            "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                            "stack_version": "26.06"},
            "hardware": {"system": system, "nodes": 1}}, "test").workload

    b200 = job("DGX-B200")
    assert (b200.full_iteration_cuda_graph, b200.ep_overlap) == (False, False)
    assert str(b200.dispatcher) == "hybridep"
    gb200 = job("GB200-NVL72")
    assert (gb200.full_iteration_cuda_graph, gb200.ep_overlap) == (True, True)


def test_a_release_outside_the_recipes_is_said_so():
    """Megatron-Bridge's release-specific recipes start at 25.09: an earlier release takes
    only the entries for every release, and the assumptions say why."""
    from mosaic.config.layout import release_outside_recipes

    record = _record("NeMo 24.01 container / Megatron-Bridge + Megatron-Core")
    assert any("recipes start at 25.09" in line for line in record.assumptions)
    assert release_outside_recipes("megatron-bridge", "26.04") is None
    # a release after the last encoded one is said so too (its settings are not known)
    assert "encoded up to 26.06" in release_outside_recipes("megatron-bridge", "30.01")
    assert release_outside_recipes("megatron-bridge", None) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("NeMo 25.11 container / Megatron-Bridge + Megatron-Core", "25.11"),
    ("nvcr.io/nvidia/nemo:26.04.01", "26.04.01"),
    # the first release named, as parse_release reads it, with its own point suffix only
    ("nemo 25.07 base, hotfix 25.09.01", "25.07"),
    ("25.11.1 build", "25.11"),
    ("Megatron-Bridge main (2026-05-18)", None),
    (None, None),
])
def test_release_text_spells_the_release_as_a_job_states_it(text, expected):
    assert release_text(text) == expected
    assert parse_release(release_text(text)) == parse_release(text)


def test_a_job_made_from_a_record_keeps_its_release_and_reloads_to_the_same_workload():
    """`mosaic export RUNS.yaml#ID --to yaml` writes the record's release: its document
    reloads to the record's workload and layout, the recipe settings of that release
    included (all shipped extra runs, whose records state their release or do not)."""
    records = load_run_records(EXTRA_RUNS).records
    with_release = [r for r in records if r.stack_version is not None]
    assert len(with_release) >= 40
    # only stacks with release-keyed recipes carry one (a torchtitan record's NGC tag does not)
    assert all(r.workload.stack in ("megatron-bridge", "nemo", "megatron-core")
               for r in with_release)
    shared = [path for path in SHARED_RUNS if path.is_file()]  # when ../shared is present
    records = [*records, *(r for path in shared for r in load_run_records(path).records)]
    for record in records:
        document = job_document(job_from_run_record(record))
        assert document["performance"].get("stack_version") == record.stack_version
        reloaded = job_from_document(document, record.id)
        assert reloaded.workload == record.workload, record.id
        assert reloaded.plan.row(0) == record.plan.row(0), record.id
    gated = _record("NeMo 26.04 container", gpu="B200")
    assert gated.workload.gdn_context_parallel is False  # Megatron-Core before 26.06
    assert _record("NeMo 26.06 container", gpu="B200").workload.gdn_context_parallel


def test_a_release_typed_on_the_command_line_or_kept_by_the_studio_stays_as_typed():
    """`--set performance.stack_version=25.10` and the studio's stored '25.10' are October,
    though YAML reads both as the number 25.1 (which, unquoted in a file, is refused)."""
    from mosaic.config.job_schema import apply_overrides
    from mosaic.studio.jobs import _typed

    document = apply_overrides({"performance": {}}, ["performance.stack_version=25.10"])
    assert document["performance"]["stack_version"] == "25.10"
    assert apply_overrides({}, ["performance.stack_version=26.04.01"])[
        "performance"]["stack_version"] == "26.04.01"
    assert _typed({"performance": {"stack_version": "25.10", "micro": "4"}}) == {
        "performance": {"stack_version": "25.10", "micro": 4}}


MIXTRAL_RECORD = {
    "id": "ours-mixtral", "source": "a trial's record", "software":
    "Megatron-Core 0.12 (NeMo 25.04 container)", "gpu": "H100-SXM-80GB", "gpus_per_node": 8,
    "scaleup_domain": 8, "num_gpus": 32, "precision": "bf16", "recompute": "selective",
    "confidence": "medium", "flops_convention": "megatron",
    "model": {"name": "Mixtral-8x7B", "layers": 32, "d_model": 4096, "heads": 32,
              "kv_heads": 8, "head_dim": 128, "ffn": 14336, "vocab": 32000,
              "activation": "swiglu", "attention": "gqa", "tied_embeddings": False,
              "moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336}},
    "parallelism": {"tp": 1, "pp": 4, "cp": 1, "dp": 8, "ep": 8, "vpp": 1,
                    "sharding": "zero1"},
    "batch": {"global_seqs": 256, "micro_seqs": 1, "seq_len": 4096},
    "measured": {"tokens_per_s_per_gpu": 3300.0, "step_time_s": 9.9297},
}


@pytest.mark.parametrize(("routing", "padded"), [(None, True), ("token_drop", True),
                                                 ("dropless", False)])
def test_a_stated_routing_keeps_the_recipes_padding_only_under_token_drop(routing, padded):
    """NeMo 25.04's Mixtral 8x7B recipe drops tokens and pads every expert to capacity
    (recipes/nemo.yaml); a record stating dropless routing got 'pad_to_capacity=True' among
    its recipe settings (a trial). The padding belongs to the recipe's token-drop routing."""
    raw = deepcopy(MIXTRAL_RECORD) | ({} if routing is None else {"routing": routing})
    record = run_record_from_entry(_validate_entry(raw, "test"))
    assert record.workload.pad_to_capacity is padded
    refused = [note for note in record.assumptions if "pad_to_capacity=True in the recipe, not "
               "applied" in note]
    assert bool(refused) is not padded
