"""The kernel families on CPU: the grouped_mm calls compute the GEMMs they claim to time,
unsupported cases are recorded as skipped, and rows carry consistent derived columns."""

import numpy as np
import pytest

from mosaic.bench import attention, gemm, grouped, streams
from mosaic.bench.cases import BenchOptions, Case, Unsupported
from mosaic.bench.device import random
from mosaic.bench.shapes import TINY
from mosaic.bench.timer import QUICK

torch = pytest.importorskip("torch")
CPU = torch.device("cpu")
OPTIONS = BenchOptions(policy=QUICK, dtypes=("bf16",))


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch without _grouped_mm")
@pytest.mark.parametrize("name", grouped.PASSES)
def test_grouped_mm_calls_match_a_loop_of_matmuls(name):
    loads = grouped.expert_loads(3, 16, "skewed", 1.0)
    tokens = int(loads.sum())
    x, dy = random((tokens, 32), CPU, torch.float32), random((tokens, 48), CPU, torch.float32)
    w = random((3, 32, 48), CPU, torch.float32)
    try:
        fused = grouped._grouped_mm(name, x.bfloat16(), w.bfloat16(), dy.bfloat16(), loads)()
    except RuntimeError as exc:
        pytest.skip(f"grouped_mm unavailable on this CPU build: {exc}")
    looped = grouped._loop(name, x, w, dy, loads)()
    expected = torch.cat(looped) if name != "wgrad" else torch.stack(looped)
    np.testing.assert_allclose(fused.float().numpy(), expected.numpy(), rtol=0.05, atol=0.3)


def test_gemm_row_has_consistent_rate():
    case = Case("gemm", "bf16:64x32x16", {"dtype": "bf16", "m": 64, "n": 32, "k": 16})
    row = gemm.measure(case, CPU, OPTIONS)
    assert row["time_s"] > 0 and row["p10_s"] <= row["time_s"] <= row["p90_s"]
    assert row["tflops"] == pytest.approx(2 * 64 * 32 * 16 / row["time_s"] / 1e12)


def test_fp8_and_memory_cap_are_skips_not_errors():
    fp8 = Case("gemm", "fp8:16x16x16", {"dtype": "fp8", "m": 16, "n": 16, "k": 16})
    with pytest.raises(Unsupported, match="compute capability"):
        gemm.measure(fp8, CPU, OPTIONS)
    mx = Case("gemm", "mxfp8:128x128x128", {"dtype": "mxfp8", "m": 128, "n": 128, "k": 128})
    with pytest.raises(Unsupported, match="Blackwell"):
        gemm.measure(mx, CPU, OPTIONS)
    big = Case("gemm", "bf16:big", {"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096})
    with pytest.raises(Unsupported, match="cap"):
        gemm.measure(big, CPU, BenchOptions(policy=QUICK, max_tensor_bytes=1e6))


def test_attention_backend_without_cpu_kernel_is_skipped():
    (shape,) = TINY.attention
    cases = {c.key: c for c in attention.build_cases(TINY, OPTIONS)}
    # the skip names the backend the case asked for, not torch's "turning off both the
    # math kernel and the fused kernels", which the user never did (a trial on CPU)
    with pytest.raises(Unsupported, match=r"^the cudnn kernel \(CUDNN_ATTENTION\) does not "
                                          r"run this case on cpu in float32"):
        attention.measure(cases[f"cudnn:fwd:b{shape.batch}h{shape.heads}kv{shape.kv_heads}"
                                f"s{shape.seq}d{shape.head_dim}"], CPU, OPTIONS)
    math_bwd = next(c for k, c in cases.items() if k.startswith("math:bwd"))
    row = attention.measure(math_bwd, CPU, OPTIONS)
    # causal backward FLOPs: 2.5 x 2·b·h·s²·d (mosaic.perf.kernels.flash_attention_flops)
    assert row["flops"] == 2.5 * 2 * shape.batch * shape.heads * shape.seq**2 * shape.head_dim


def test_streaming_cases_record_their_traffic():
    cases = {c.columns["op"] + str(c.columns["elements"]): c
             for c in streams.build_cases(TINY, OPTIONS)}
    add = cases["add4096"]
    assert add.columns["moved_bytes"] == 3 * 4096 * 2
    row = streams.measure(add, CPU, OPTIONS)
    assert row["bandwidth_bytes_per_s"] == pytest.approx(3 * 4096 * 2 / row["time_s"])
    launch = streams.measure(cases["launch64"], CPU, OPTIONS)
    assert 0 < launch["time_s"] < 1e-3  # one tiny eager op, per kernel


def test_a_skip_reason_keeps_whole_sentences():
    from mosaic.bench.attention import MAX_REASON_CHARS, whole_sentences

    message = ("No viable backend for scaled_dot_product_attention was found.\nThis is likely "
               "due to turning off both the math kernel and the fused kernels. " + "x " * 200)
    reason = whole_sentences(message)
    assert reason.endswith("turning off both the math kernel and the fused kernels.")
    long = whole_sentences("word " * 200)
    assert len(long) <= MAX_REASON_CHARS + 4 and long.endswith(" ...")


def test_a_cuda_device_without_cuda_and_disjoint_bench_folders_are_input_errors(tmp_path):
    import pandas as pd

    from mosaic.bench.compare import compare
    from mosaic.bench.device import resolve_device
    from mosaic.errors import MosaicInputError

    if not torch.cuda.is_available():
        with pytest.raises(MosaicInputError, match="sees no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(MosaicInputError, match="not a torch device"):
        resolve_device("tpu-please")
    # a device type torch knows but cannot use in this build: an internal error before
    # (getNewGenerator() without the MPS backend; a trial)
    with pytest.raises(MosaicInputError, match="--device meta: torch cannot run on it here"):
        resolve_device("meta")
    for name, case in (("a", "gemm 128x128x128"), ("b", "gemm 256x256x256")):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame({"case": [case], "time_s": [1e-3], "metadata_id": ["m"]}).to_csv(
            folder / "gemm.csv", index=False)
    with pytest.raises(MosaicInputError, match="no measured case in common"):
        compare(tmp_path / "a", tmp_path / "b")


def test_disjoint_bench_folders_say_what_each_measured(tmp_path):
    # a trial compared a gemm-only folder with a kernels-only one and read only 'no measured
    # case in common', where one family on each side makes the comparison empty
    import pandas as pd

    from mosaic.bench.compare import compare
    from mosaic.errors import MosaicInputError

    for name, family, cases in (("a", "gemm", ["128x128x128", "256x256x256"]),
                                ("b", "kernels", ["rmsnorm 4096"])):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame({"case": cases, "time_s": [1e-3] * len(cases),
                      "metadata_id": ["m"] * len(cases)}).to_csv(
            folder / f"{family}.csv", index=False)
    with pytest.raises(MosaicInputError, match=r"no measured case in common \(gemm: 2 only "
                       r"in .*a; kernels: 1 only in .*b\)"):
        compare(tmp_path / "a", tmp_path / "b")
