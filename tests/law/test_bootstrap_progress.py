"""The bootstrap and the law fit report each step (the CLI turns that into progress with ETA)."""


def test_bootstrap_reports_every_refit(noisy_joint_fit):
    from mosaic.law.bootstrap import bootstrap_fit

    calls: list[tuple[int, int]] = []
    validated, _, _ = noisy_joint_fit
    bootstrap_fit(validated.fit, n_resamples=3, seed=0,
                  progress=lambda done, total: calls.append((done, total)))
    n = validated.fit.data.n_runs  # 3 resamples, then one jackknife refit per run
    assert calls == [(i, 3 + n) for i in range(1, 4 + n)]


def test_fit_reports_screened_blocks_then_refined_starts(joint_runs_factory):
    from mosaic.law import JOINT, FitSettings, fit_law

    runs, _ = joint_runs_factory(noise=0.005, seed=0, n_runs=40)
    calls: list[tuple[int, int]] = []
    settings = FitSettings(n_polished=3)
    fit_law(runs, JOINT, settings, progress=lambda done, total: calls.append((done, total)))
    total = calls[0][1]
    assert [done for done, _ in calls] == list(range(1, total + 1))
    assert {t for _, t in calls} == {total} and total >= 3 + 1  # >= 1 block, 3 refined
