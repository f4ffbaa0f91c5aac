"""`mosaic plan`'s message when nothing is trainable: each reason with its count, and a
broken divisibility rule quoted next to the divisibility count (not the memory one)."""

from types import SimpleNamespace

from mosaic.report.plan_report import untrainable_message


def _result(reasons: list[str]) -> SimpleNamespace:
    rows = [{"reason": reason} for reason in reasons]
    return SimpleNamespace(infeasible=lambda: rows, envelope=SimpleNamespace(
        n_nodes=18, days=10.0, n_devices=72, global_batch=1024))


def test_the_divisibility_example_sits_with_the_divisibility_count():
    message = untrainable_message(_result([
        "no layout satisfies the divisibility rules (e.g. tp=3 must divide heads=32)",
        "no layout satisfies the divisibility rules (e.g. pp=9 must divide layers=16)",
        "out of memory on every layout",
    ]))
    assert ("2 geometries: no layout satisfies the divisibility rules (e.g. tp=3 must divide "
            "heads=32); 1 geometries: no layout fits device memory)") in message
    assert message.startswith("no geometry of the grid is trainable on 18 nodes in 10 days")
    assert "--global-batch" in message and "--memory-fraction" in message


def test_a_batch_the_gpus_cannot_divide_gets_a_nearby_multiple():
    # one GB200 NVL72 rack: 72 = 2^3·3^2 GPUs, the default batch 1024 = 2^10
    message = untrainable_message(_result(
        ["no layout satisfies the divisibility rules (e.g. pp=9 must divide layers=16)"]))
    assert "--global-batch 1008, a multiple of the 72 GPUs; 1024 shares only 8 with it" in message
