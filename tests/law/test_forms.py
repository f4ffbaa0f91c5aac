"""Law forms: analytic gradients, hand-evaluated values, form registry."""

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import CHINCHILLA, FORMS, JOINT, PER_G, get_form


@pytest.mark.parametrize("form", [JOINT, PER_G, CHINCHILLA], ids=lambda f: f.name)
def test_pullback_matches_central_differences(form):
    rng = np.random.default_rng(3)
    log_features = np.column_stack(
        [
            rng.uniform(-3.0, 25.0, 40) if f != "active_fraction" else rng.uniform(-4, 0, 40)
            for f in form.features
        ]
    )
    design = form.design(log_features)
    box = np.log(np.array([form.init_box[p] for p in form.params]))
    log_coefs = box[:, 0] + rng.uniform(size=(3, len(form.params))) * (box[:, 1] - box[:, 0])
    cotangent = rng.standard_normal((3, 40))
    analytic = form.log_predict(log_coefs, design).pullback(cotangent)
    step = 1e-6
    numeric = np.empty_like(analytic)
    for p in range(len(form.params)):
        shift = np.zeros(len(form.params))
        shift[p] = step
        up = form.log_predict(log_coefs + shift, design).value
        down = form.log_predict(log_coefs - shift, design).value
        numeric[:, p] = np.sum(cotangent * (up - down) / (2 * step), axis=1)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)
    jacobian = form.log_predict(log_coefs, design).jacobian()
    np.testing.assert_allclose(np.einsum("mn,mnp->mp", cotangent, jacobian), analytic, rtol=1e-12)


def test_joint_form_at_unit_features_is_sum_of_prefactors():
    # With N = D = 1 - S = G = 1 every term of Eq. 10 equals its prefactor.
    coefs = {p: 0.5 + i for i, p in enumerate(JOINT.params)}
    log_l = JOINT.log_predict(np.log(JOINT.vector(coefs)), JOINT.design(np.zeros((1, 4)))).value
    assert np.exp(log_l[0, 0]) == pytest.approx(sum(coefs[p] for p in "abcje"))


def test_forms_declare_their_features():
    assert JOINT.features == ("n_total", "tokens", "active_fraction", "split_factor")
    assert PER_G.features == ("n_total", "tokens", "active_fraction")
    assert CHINCHILLA.features == ("n_total", "tokens")
    assert set(FORMS) == {"joint", "per-g", "chinchilla"}


def test_unknown_form_and_bad_coefficients_are_reported():
    with pytest.raises(MosaicInputError, match=r"form must be one of .*'quadratic'"):
        get_form("quadratic")
    with pytest.raises(MosaicInputError, match=r"missing \['beta'\]"):
        CHINCHILLA.vector({"E": 1.0, "A": 1.0, "B": 1.0, "alpha": 0.3})
    with pytest.raises(MosaicInputError, match="positive finite"):
        CHINCHILLA.vector({"E": 1.0, "A": -1.0, "B": 1.0, "alpha": 0.3, "beta": 0.3})
