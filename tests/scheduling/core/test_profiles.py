import pytest

from scheduling.core.plugin_args import ProfileError
from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Framework


def names(yaml_text: str, point: str) -> list[str]:
    return [spec.name for spec in load_profiles(yaml_text)[0].enabled(point)]


def test_defaults_are_enabled_when_a_profile_names_nothing() -> None:
    text = "profiles: [{schedulerName: plain}]"
    assert names(text, "filter") == ["NodeResourcesFit"]
    assert names(text, "reserve") == ["GPUAllocator"]
    assert names(text, "bind") == ["DefaultBinder"]


def test_enabled_plugins_follow_the_defaults_and_the_allocator_stays_last() -> None:
    text = "profiles: [{schedulerName: t, plugins: {reserve: {enabled: [{name: GPUTopology}]}}}]"
    assert names(text, "reserve") == ["GPUTopology", "GPUAllocator"]


def test_star_disables_the_defaults() -> None:
    text = """
profiles:
- schedulerName: t
  plugins:
    score: {enabled: [{name: GPUTopology, weight: 2}], disabled: [{name: "*"}]}
"""
    profile = load_profiles(text)[0]
    assert [(s.name, s.weight) for s in profile.enabled("score")] == [("GPUTopology", 2)]
    assert names(text, "filter") == ["NodeResourcesFit"]


def test_a_default_listed_as_enabled_keeps_its_place_and_takes_the_weight() -> None:
    text = (
        "profiles: [{schedulerName: t, plugins: "
        "{score: {enabled: [{name: NodeResourcesFit, weight: 4}]}}}]"
    )
    assert [(s.name, s.weight) for s in load_profiles(text)[0].enabled("score")] == [
        ("NodeResourcesFit", 4)
    ]


def test_multipoint_enables_a_plugin_everywhere_it_has_a_method() -> None:
    text = "profiles: [{schedulerName: t, plugins: {multiPoint: {enabled: [{name: GPUTopology}]}}}]"
    for point in ("preFilter", "filter", "preScore", "score", "reserve"):
        assert "GPUTopology" in names(text, point)
    assert "GPUTopology" not in names(text, "bind")


def test_plugin_args_reach_the_plugin() -> None:
    text = """
profiles:
- schedulerName: t
  plugins: {score: {enabled: [{name: NodeResourcesFit}]}}
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: LeastAllocated, resources: [{name: cpu, weight: 1}]}}
"""
    framework = Framework(load_profiles(text)[0])
    plugin = framework.score[0][1]
    assert (plugin.strategy, plugin.weights) == ("LeastAllocated", {"cpu": 1})  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "profiles: [{schedulerName: t, "
            "plugins: {filter: {enabled: [{name: GPUTopologyAwre}]}}}]",
            r"profiles\[0\].plugins.filter.enabled\[0\].name: unknown plugin 'GPUTopologyAwre'",
        ),
        (
            "profiles: [{schedulerName: t, "
            "pluginConfig: [{name: GPUTopology, args: {preferSameNuma: true}}]}]",
            "unknown argument 'preferSameNuma'",
        ),
        (
            "profiles: [{schedulerName: t, "
            "pluginConfig: [{name: GPUTopology, args: {preferSameNUMA: 1}}]}]",
            "'preferSameNUMA' must be bool",
        ),
        ("profiles: [{schedulerName: t, plugin: {}}]", r"profiles\[0\]: unknown key 'plugin'"),
        (
            "profiles: [{schedulerName: t, plugins: {scores: {}}}]",
            "unknown extension point 'scores'",
        ),
        (
            "profiles: [{schedulerName: t, "
            "plugins: {score: {enabled: [{name: GPUTopology, weight: 0}]}}}]",
            "weight must be a positive integer",
        ),
        (
            "profiles: [{schedulerName: t, plugins: {bind: {enabled: [{name: GPUTopology}]}}}]",
            "does not implement bind",
        ),
        ("profiles: [{schedulerName: a}, {schedulerName: a}]", "used by more than one profile"),
        ("profiles: []", "non-empty list"),
        ("bogus: 1\nprofiles: [{schedulerName: a}]", "unknown key 'bogus'"),
        (
            "profiles: [{schedulerName: t, "
            "pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: Most}}}]}]",
            "'Most' is not one of",
        ),
        ("profiles: [", "not valid YAML"),
        # A repeated key would silently keep its last value: refused with its line.
        (
            "profiles:\n- schedulerName: t\n  plugins: {score: {enabled: [{name: GPUTopology, "
            "weight: 1, weight: 5}]}}",
            "line 3: duplicate key 'weight'",
        ),
        ("profiles: [{schedulerName: t}]\nprofiles: []", "line 2: duplicate key 'profiles'"),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta1\nprofiles: [{schedulerName: t}]",
            "apiVersion must be 'kubescheduler.config.k8s.io/v1'",
        ),
        ("kind: ClusterQueue\nprofiles: [{schedulerName: t}]", "kind must be"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 12)}]\n"
                for p, c in zip("abcdefghi", "bcdefghij", strict=True)
            )
            + "profiles: [{schedulerName: t}]",
            "more than 100 aliases",
        ),
    ],
)
def test_bad_profiles_are_rejected_naming_the_offender(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        Framework(load_profiles(text)[0])
