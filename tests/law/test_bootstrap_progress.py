"""The bootstrap reports each refit (the CLI turns that into progress with ETA)."""


def test_bootstrap_reports_every_refit(noisy_joint_fit):
    from mosaic.law.bootstrap import bootstrap_fit

    calls: list[tuple[int, int]] = []
    validated, _, _ = noisy_joint_fit
    bootstrap_fit(validated.fit, n_resamples=3, seed=0,
                  progress=lambda done, total: calls.append((done, total)))
    n = validated.fit.data.n_runs  # 3 resamples, then one jackknife refit per run
    assert calls == [(i, 3 + n) for i in range(1, 4 + n)]
