import pytest

from sim.utilization import ProfileError, UtilizationProfile


def test_constant_profile_stays_near_its_mean() -> None:
    profile = UtilizationProfile(mean=0.3, jitter=0.05, seed=4)
    values = [profile.at(t) for t in range(0, 86_400, 60)]
    assert all(0.25 <= v <= 0.35 for v in values)
    assert profile.at(1234.0) == profile.at(1234.0)


def test_bursty_profile_is_busy_for_its_duty_share() -> None:
    profile = UtilizationProfile(kind="bursty", mean=0.3, duty=0.25, period_s=600, jitter=0.0)
    values = [profile.at(t) for t in range(0, 6000, 10)]
    busy = sum(v > 0.5 for v in values) / len(values)
    assert busy == pytest.approx(0.25, abs=0.03)


def test_diurnal_profile_rises_and_falls() -> None:
    profile = UtilizationProfile(kind="diurnal", mean=0.5, jitter=0.0)
    assert profile.at(6 * 3600) > 0.8 > 0.2 > profile.at(18 * 3600)


@pytest.mark.parametrize(("field", "value"), [("mean", 1.5), ("jitter", -0.1), ("kind", "spiky")])
def test_bad_profiles_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ProfileError, match=field):
        UtilizationProfile(**{field: value})  # type: ignore[arg-type]
