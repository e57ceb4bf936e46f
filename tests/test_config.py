"""config.describe_preset: the line names every field the applied presets set, and config_for
gives each of those fields the preset's value, so the line cannot drift from the config a run
gets. Plain Python: only `config` is imported here."""
import re

import pytest

import config

FIELDS = set(config.field_names())
UNKNOWN = "MyEnv-v0"

# (env id, sync, what the line must name as its first preset's source)
CASES = [
    ("Pendulum-v1", False, "the Pendulum-v1 preset (config.py PRESETS)"),
    ("CartPole-v1", False, "the CartPole-v1 preset (config.py PRESETS)"),
    ("Acrobot-v1", False, "the Acrobot-v1 preset (config.py PRESETS)"),
    ("ALE/Pong-v5", False, "the ALE/Pong-v5 preset (config.py PRESETS)"),  # an entry of its own
    ("ALE/Boxing-v5", False, "the Atari preset (config.py ATARI)"),        # none: ATARI
    (UNKNOWN, False, f"no preset for {UNKNOWN}: Config's defaults"),
    ("HalfCheetah-v5", False, "the HalfCheetah-v5 preset (config.py PRESETS)"),  # MUJOCO and more
    ("Swimmer-v4", False, "the MuJoCo preset (config.py MUJOCO)"),        # any MuJoCo env, any version
    ("Hopper-v5", False, "the Hopper-v5 preset (config.py PRESETS)"),     # MUJOCO and its own
    ("Walker2d-v4", False, "the Walker2d-v4 preset (config.py PRESETS)"),
    ("Ant-v5", True, "the MuJoCo preset (config.py MUJOCO)"),
    ("mypkg:Hopper-v0", False, "no preset for mypkg:Hopper-v0: Config's defaults"),
    ("Pendulum-v1", True, "the Pendulum-v1 preset (config.py PRESETS)"),
    ("CartPole-v1", True, "the CartPole-v1 preset (config.py PRESETS)"),
    ("Acrobot-v1", True, "the Acrobot-v1 preset (config.py PRESETS)"),    # no SYNC_PRESETS entry
    ("ALE/Boxing-v5", True, "the Atari preset (config.py ATARI)"),
    (UNKNOWN, True, f"no preset for {UNKNOWN}: Config's defaults"),
]
IDS = [f"{env}{' --sync' if sync else ''}" for env, sync, _ in CASES]


def env_preset(env_id: str) -> dict:
    """The env's own preset, looked up here from the dicts themselves, not through config's code."""
    if env_id in config.PRESETS:
        return config.PRESETS[env_id]
    if env_id.split("-v")[0] in ("HalfCheetah", "Swimmer", "Ant"):
        return config.MUJOCO
    return config.ATARI if env_id.startswith("ALE/") else {}


def sync_preset(env_id: str) -> dict:
    return {**config.SYNC_PRESETS.get(env_id, {}), "sync_updates": True}


def named_fields(text: str) -> set:
    return {word for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if word in FIELDS}


@pytest.mark.parametrize("env_id, sync, source", CASES, ids=IDS)
def test_the_line_names_the_preset_and_every_field_it_sets(env_id, sync, source):
    line = config.describe_preset(env_id, sync)
    assert "\n" not in line
    assert line.startswith(f"config: {source}")
    own, _, on_top = line.partition("; ")
    assert named_fields(own) == set(env_preset(env_id))
    if sync:
        assert "--sync" in on_top
        assert named_fields(on_top) == set(sync_preset(env_id))
        assert "SYNC_PRESETS" in on_top
    else:
        assert on_top == "" and "--sync" not in line


@pytest.mark.parametrize("env_id, sync, source", CASES, ids=IDS)
def test_config_for_gives_every_named_field_the_presets_value(env_id, sync, source):
    cfg, default = config.config_for(env_id, sync), config.Config()
    expected = {**env_preset(env_id), **(sync_preset(env_id) if sync else {})}
    named = named_fields(config.describe_preset(env_id, sync))
    assert named == set(expected)
    for field in named:
        assert getattr(cfg, field) == expected[field], field
    for field in FIELDS - named:
        assert getattr(cfg, field) == getattr(default, field), field
    assert config.preset_for(env_id, sync) == expected


def test_sync_on_top_of_an_env_preset_wins_where_both_set_a_field():
    # CartPole's --sync rates replace its preset's: the line lists actor_lr in both parts, and
    # config_for must take the later one
    line = config.describe_preset("CartPole-v1", sync=True)
    own, _, on_top = line.partition("; ")
    assert "actor_lr" in named_fields(own) and "actor_lr" in named_fields(on_top)
    sync_lr = config.SYNC_PRESETS["CartPole-v1"]["actor_lr"]
    assert sync_lr != config.PRESETS["CartPole-v1"]["actor_lr"]
    assert config.config_for("CartPole-v1", True).actor_lr == sync_lr
    assert config.config_for("CartPole-v1").actor_lr == config.PRESETS["CartPole-v1"]["actor_lr"]


def test_the_line_ends_with_the_preset_fields_the_command_line_sets_otherwise():
    preset = config.preset_for("HalfCheetah-v5")
    line = config.describe_preset("HalfCheetah-v5", given={
        "workers": 8, "n_steps": preset["n_steps"], "gamma": 0.98, "max_steps": 5_000})
    assert line == config.describe_preset("HalfCheetah-v5") + (
        " (the command line sets workers, max_steps instead)"), "not n_steps (the same), not gamma"
    assert config.describe_preset("HalfCheetah-v5", given={"gamma": 0.98}) == \
        config.describe_preset("HalfCheetah-v5")
    # --sync's own field, given by the flag, is no override of the SYNC_PRESETS that set it
    assert "command line" not in config.describe_preset("CartPole-v1", True, {"sync_updates": True})


def test_an_edited_default_that_a_preset_overrides_is_named():
    # the line's purpose: a user who changes Config.clip_norm sees that Pendulum's preset sets it
    assert "clip_norm" in config.describe_preset("Pendulum-v1")
    assert "clip_norm" not in config.describe_preset("Acrobot-v1")


def test_every_preset_names_real_fields_and_validates():
    for presets in (config.PRESETS, config.SYNC_PRESETS, {"ALE/*": config.ATARI}):
        for env_id, preset in presets.items():
            assert set(preset) <= FIELDS, env_id
    for env_id in [*config.PRESETS, "ALE/Boxing-v5", UNKNOWN]:
        for sync in (False, True):
            config.config_for(env_id, sync).validate()


def test_mujoco_presets_scale_the_rewards_of_the_walkers_only():
    """The values behind results/mujoco.md: reward_scale 0.1 for Hopper and Walker2d under -v4 and
    -v5 (it hurt HalfCheetah), n_steps 5 and 4 workers for HalfCheetah, 20 and 8 for the rest
    (docs/config.md)."""
    def fields(env_id):
        cfg = config.config_for(env_id)
        return cfg.n_steps, cfg.reward_scale, cfg.normalize_obs, cfg.workers

    for env_id in ("Hopper-v4", "Hopper-v5", "Walker2d-v4", "Walker2d-v5"):
        assert fields(env_id) == (20, 0.1, True, 8), env_id
    for env_id in ("HalfCheetah-v4", "HalfCheetah-v5"):
        assert fields(env_id) == (5, 1.0, True, 4), env_id
    assert fields("Ant-v5") == (20, 1.0, True, 8)


def test_the_lookup_hands_out_copies():
    gamma = config.PRESETS["Pendulum-v1"]["gamma"]
    config.preset_for("Pendulum-v1")["gamma"] = gamma / 2
    config.preset_for("ALE/Boxing-v5")["n_steps"] = 1
    assert config.PRESETS["Pendulum-v1"]["gamma"] == gamma
    assert config.config_for("Pendulum-v1").gamma == gamma
    assert config.ATARI["n_steps"] != 1


def test_a_layer_list_set_to_none_has_no_layers_as_its_refusal_says():
    assert config.parse_value("lstm_input_hidden", "none") == ()
    assert config.parse_value("lstm_input_hidden", "") == ()
    assert config.parse_value("lstm_input_hidden", "200") == (200,)
    cfg = config.Config(lstm_input_hidden=(0,))
    with pytest.raises(ValueError, match=r"\(or none\)"):
        cfg.validate()


def test_an_integer_field_takes_its_digits_exactly_and_an_exponent_too():
    """Parsed through float, 2**53 + 1 came out as 2**53."""
    assert config.parse_value("max_steps", str(2 ** 53 + 1)) == 2 ** 53 + 1
    assert config.parse_value("max_steps", "1e6") == 1_000_000
    with pytest.raises(ValueError, match="not a valid"):
        config.parse_value("max_steps", "1.5")


def test_every_preset_holds_values_of_its_fields_types():
    for env_id in [*config.PRESETS, "ALE/Boxing-v5", "Ant-v5"]:
        for sync in (False, True):
            config.config_for(env_id, sync).validate()
