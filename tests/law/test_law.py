"""The law object: Table 2 default, the Table 4 acceptance value, prediction, law files."""

import json

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import CHINCHILLA, HOFFMANN_2022_FIT, PER_G, ScalingLaw, default_law

TABLE_2 = {
    "a": 8.462, "b": 88.32, "c": 0.1828, "j": 0.7123, "e": 0.3129, "alpha": 0.1048,
    "beta": 0.2070, "lambda": 0.1249, "delta": 0.5567, "gamma": 0.1702, "eta": 0.9513,
}  # fmt: skip


def table4_counts() -> tuple[float, float]:
    """(N_tot, N_act) of the Table 4 optimum, hand-counted (non-embedding parameters).

    q = 12 ladder rung (Sec. 7.1): L = 48, d = 6144, 48 heads and 8 KV heads of dim 128,
    d_ff = 15360; E = 96, K = 2, G = 4 so d_expert = 3840; one shared expert of width
    d_expert; layer 1 dense (SwiGLU, width d_ff); router E*d per MoE layer.
    """
    layers, d, d_ff, experts, top_k, split = 48, 6144, 15360, 96, 2, 4
    attention = d * d + 2 * d * 8 * 128 + d * d  # Q, K and V (GQA), O
    expert = 3 * d * (d_ff // split)  # SwiGLU: gate, up, down
    dense_ffn = 3 * d * d_ff
    moe_layers = layers - 1
    shared = layers * attention + dense_ffn + moe_layers * experts * d  # router
    n_total = shared + moe_layers * (experts + 1) * expert
    n_active = shared + moe_layers * (top_k + 1) * expert
    return float(n_total), float(n_active)


def test_table4_counts_match_the_paper():
    n_total, n_active = table4_counts()
    assert n_active == pytest.approx(14.517e9, rel=2e-4)  # Table 4: N_act 14.5 B
    assert n_total == pytest.approx(327.24e9, rel=2e-4)
    assert 1 - n_active / n_total == pytest.approx(0.956, abs=5e-4)  # Table 4: S 0.956
    # and mosaic's own count of the ladder rung is this hand count plus the norms the hand
    # count leaves out, exactly (a trial: the lines above check only the hand count): two
    # pre-LN LayerNorms per layer and a final one, weight and bias each (App. A.1)
    from mosaic.arch import count_parameters, ladder_geometry

    counts = count_parameters(ladder_geometry(12, 96, 2, 4))
    norms = (2 * 48 + 1) * 2 * 6144
    assert (counts.n_total, counts.n_active) == (n_total + norms, n_active + norms)


@pytest.mark.parametrize("tokens", [1.42e12, 98 * table4_counts()[1]], ids=["D=1.42T", "TPP=98"])
def test_table4_loss(tokens):
    # Table 4: the loss-optimal configuration reaches L = 1.3898 (D = 1.42 T, TPP = 98).
    n_total, n_active = table4_counts()
    loss = default_law().predict(n_total, tokens, 1 - n_active / n_total, 4)
    assert float(loss) == pytest.approx(1.3898, abs=5e-4)


def test_default_law_is_table_2():
    law = default_law()
    assert law.form.name == "joint"
    assert dict(law.coefficients) == TABLE_2
    assert law.provenance["identifiability"]["eta"] == "identified"


def test_predict_equals_eq10_by_hand_and_broadcasts():
    law = default_law()
    n_total = np.array([1e9, 2e10, 5e11])
    sparsity, tokens, split = 0.9, np.array([[1e10], [1e11]]), 8.0
    c = TABLE_2
    by_hand = (
        c["a"] / n_total ** c["alpha"]
        + c["b"] / tokens ** c["beta"]
        + c["c"] / (1 - sparsity) ** c["lambda"]
        + c["j"] / ((1 - sparsity) ** c["delta"] * n_total ** c["gamma"] * split ** c["eta"])
        + c["e"]
    )  # Eq. 10
    predicted = law.predict(n_total, tokens, sparsity, split)
    assert predicted.shape == (2, 3)
    np.testing.assert_allclose(predicted, by_hand, rtol=1e-13)


def test_chinchilla_law_at_hoffmann_coefficients():
    law = ScalingLaw(CHINCHILLA, HOFFMANN_2022_FIT)
    # Hoffmann et al. 2022, Eq. 2 evaluated by hand at Chinchilla (70 B params, 1.4 T tokens).
    by_hand = 1.69 + 406.4 / 70e9**0.34 + 410.7 / 1.4e12**0.28
    assert float(law.predict(70e9, 1.4e12)) == pytest.approx(by_hand, rel=1e-13)
    with pytest.raises(MosaicInputError, match="dense law"):
        law.predict(70e9, 1.4e12, sparsity=0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_total": -1.0}, "n_total must be a positive finite number, got -1"),
        ({"tokens": np.nan}, "tokens must be a positive finite number, got nan"),
        ({"sparsity": 1.0}, "sparsity must satisfy 0 <= S < 1, got 1"),
        ({"split_factor": None}, "needs split_factor"),
        ({"sparsity": None}, "needs sparsity"),
    ],
)
def test_predict_rejects_bad_inputs(kwargs, message):
    inputs = {"n_total": 1e9, "tokens": 1e10, "sparsity": 0.9, "split_factor": 4.0} | kwargs
    with pytest.raises(MosaicInputError, match=message):
        default_law().predict(**inputs)


def test_law_file_roundtrip_and_errors(tmp_path):
    law = ScalingLaw(PER_G, {p: TABLE_2[p] for p in PER_G.params}, split_factor=4.0)
    path = tmp_path / "law.json"
    law.save(path)
    loaded = ScalingLaw.load(path)
    assert loaded == law
    assert float(loaded.predict(1e10, 1e10, 0.9, 4.0)) == float(law.predict(1e10, 1e10, 0.9))
    with pytest.raises(MosaicInputError, match="describes split_factor G = 4 only"):
        loaded.predict(1e10, 1e10, 0.9, 8.0)

    payload = json.loads(path.read_text())
    payload["coefficients"].pop("gamma")
    path.write_text(json.dumps(payload))
    with pytest.raises(MosaicInputError, match=r"law.json: .*missing \['gamma'\]"):
        ScalingLaw.load(path)
    path.write_text("{not json")
    with pytest.raises(MosaicInputError, match="not valid JSON"):
        ScalingLaw.load(path)
    with pytest.raises(MosaicInputError, match="does not exist"):
        ScalingLaw.load(tmp_path / "absent.json")


@pytest.mark.parametrize("value", [0, -8.462, "8.462", float("nan")])
def test_law_file_coefficient_error_states_what_is_allowed(value):
    """A law file's coefficient error said "allowed: 0 or a finite number with 1e-12 <=
    |value| <= 1e+10", yet a 0 or a negative value was then refused (positive only)."""
    payload = default_law().to_dict()
    payload["coefficients"]["a"] = value
    with pytest.raises(MosaicInputError) as caught:
        ScalingLaw.from_dict(payload, source="law.json")
    message = str(caught.value)
    assert message.startswith("law.json: coefficients.a: got "), message
    assert "allowed: a positive number in 1e-12..1e+10" in message, message
