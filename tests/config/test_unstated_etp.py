"""A job that leaves expert tensor parallelism unstated runs its stack's default (trait
unstated_etp): Megatron-Core sets etp to tp (ModelParallelConfig.__post_init__), where the
expert mesh allows it; torchtitan and run records keep 1."""

import pytest

from mosaic.config.job_schema import job_from_document


def _mixtral_job(stack: str, tp: int, ep: int, nodes: int = 8) -> dict:
    return {"model": {"layers": 32, "d_model": 4096, "heads": 32, "kv_heads": 8,
                      "vocab": 32000, "moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336}},
            "parallelism": {"tp": tp, "ep": ep},
            "batch": {"global_seqs": 256, "micro_seqs": 1, "seq_len": 4096},
            "performance": {"stack": stack},
            "hardware": {"system": "DGX-H100", "nodes": nodes}}


def _etp(document: dict) -> tuple[int, list[str]]:
    spec = job_from_document(document, "test")
    return int(spec.plan.etp[0]), [a for a in spec.assumptions if "etp" in a]


@pytest.mark.parametrize("stack", ["megatron-core", "paper-nemo"])
def test_megatron_core_jobs_take_etp_equal_to_tp(stack):
    etp, notes = _etp(_mixtral_job(stack, tp=2, ep=8))
    assert etp == 2
    assert notes and "2 assumed" in notes[0]


@pytest.mark.parametrize("stack", ["torchtitan", "megatron-bridge"])
def test_stacks_whose_recipes_set_etp_keep_one(stack):
    # torchtitan: expert_tensor_parallel_degree defaults to 1; Megatron-Bridge's MoE
    # recipes set expert_tensor_parallel_size to 1 themselves
    assert _etp(_mixtral_job(stack, tp=2, ep=8))[0] == 1


def test_a_stated_etp_is_kept():
    document = _mixtral_job("megatron-core", tp=2, ep=8)
    document["parallelism"]["etp"] = 1
    assert _etp(document) == (1, [])


def test_etp_falls_back_to_one_where_tp_would_break_the_expert_mesh():
    # 16 GPUs at tp 4: dp 4, so etp·ep = 4·8 = 32 does not divide tp·cp·dp = 16
    etp, notes = _etp(_mixtral_job("megatron-core", tp=4, ep=8, nodes=2))
    assert etp == 1
    assert "but etp·ep=4·8 must divide tp·cp·dp=4·1·4 (expert mesh" in notes[0]


def test_etp_falls_back_to_one_where_megatron_refuses_biases_at_tp():
    """An attention-output bias turns Megatron's add_bias_linear on, which it runs in an
    MoE model only with etp 1 (transformer_config.py); the default reads that rule too (a
    review found the job refused for an etp it never stated)."""
    document = _mixtral_job("megatron-core", tp=2, ep=8)
    document["model"]["output_bias"] = True
    etp, notes = _etp(document)
    assert etp == 1
    assert "but etp=2 > 1 with linear biases" in notes[0]


def test_etp_falls_back_to_one_where_tp_does_not_divide_the_expert_width():
    document = _mixtral_job("megatron-core", tp=2, ep=8)
    document["model"]["moe"]["expert_ffn"] = 14335  # odd: etp 2 cannot split it
    etp, notes = _etp(document)
    assert etp == 1 and "14335" in notes[0], notes
