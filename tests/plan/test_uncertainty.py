"""Bootstrap coefficient samples propagated through the ranking."""

import numpy as np
import pandas as pd
import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import CHINCHILLA
from mosaic.plan import LawSamples, load_samples, propagate, save_samples


def jittered(law, count: int, scale: float, seed: int = 0) -> LawSamples:
    rng = np.random.default_rng(seed)
    return LawSamples(law.form, law.log_coefs + scale * rng.standard_normal((count, 11)))


def test_identical_samples_reproduce_the_point_ranking(small_result, law):
    samples = LawSamples(law.form, np.tile(law.log_coefs, (4, 1)))
    u = propagate(small_result, law, samples)
    best = small_result.optimum_index
    assert u.robust_row == u.minimax_row == best
    assert u.p_optimal[0] == 1.0 and u.p_optimal[1:].sum() == 0
    np.testing.assert_allclose(u.loss_median, small_result.loss[u.rows], rtol=1e-12)
    np.testing.assert_allclose(u.loss_high - u.loss_low, 0, atol=1e-12)


def test_jittered_samples(small_result, law):
    samples = jittered(law, 200, 0.02)
    u = propagate(small_result, law, samples)
    assert u.p_optimal.sum() == pytest.approx(1.0)
    assert np.all(u.loss_low <= u.loss_median) and np.all(u.loss_median <= u.loss_high)
    assert u.robust_row == u.rows[np.argmin(u.expected_loss)]
    assert u.minimax_row == u.rows[np.argmin(u.max_regret)]
    assert np.all(u.expected_regret >= 0)
    again = propagate(small_result, law, jittered(law, 200, 0.02))
    np.testing.assert_array_equal(again.p_optimal, u.p_optimal)  # seeded, deterministic


def test_samples_files_round_trip(tmp_path, law):
    samples = jittered(law, 5, 0.01)
    save_samples(samples, tmp_path / "samples.json")
    loaded = load_samples(tmp_path / "samples.json")
    np.testing.assert_allclose(loaded.log_coefs, samples.log_coefs)
    pd.DataFrame(np.exp(samples.log_coefs), columns=law.form.params).to_csv(
        tmp_path / "samples.csv", index=False)
    from_csv = load_samples(tmp_path / "samples.csv")
    np.testing.assert_allclose(from_csv.log_coefs, samples.log_coefs, rtol=1e-12)


@pytest.mark.parametrize(("text", "message"), [
    (b"", "file is empty"),
    (b"\xff\xfe\n", "not UTF-8"),
    (b"a,b,c,j,e,alpha,beta,lambda,delta,gamma,eta\n" + b"abc" + b",1" * 10 + b"\n",
     "coefficients must be positive numbers"),
])
def test_an_unreadable_csv_samples_file_is_one_line(tmp_path, text, message):
    """A CSV samples file was read with a bare pd.read_csv: empty, not UTF-8 or a text cell
    raised EmptyDataError, UnicodeDecodeError or ValueError out of `plan
    --bootstrap-samples` (hand trials)."""
    path = tmp_path / "samples.csv"
    path.write_bytes(text)
    with pytest.raises(MosaicInputError, match=message):
        load_samples(path)


def test_bad_samples(tmp_path, small_result, law):
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(MosaicInputError, match="mosaic-law-samples/1"):
        load_samples(tmp_path / "bad.json")
    with pytest.raises(MosaicInputError, match="does not exist"):
        load_samples(tmp_path / "missing.json")
    chinchilla = LawSamples(CHINCHILLA, np.zeros((3, 5)))
    with pytest.raises(MosaicInputError, match="samples are of form 'chinchilla'"):
        propagate(small_result, law, chinchilla)
