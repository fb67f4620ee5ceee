"""The EEG demo (``make run``) as an experiment: its settings, data and pretraining, over several seeds.

``make run`` pretrains once (seed 0). The README's headline rows come from this module instead:
:func:`pretrain` trains the demo's encoder with each pretraining seed exactly as ``scripts/run_eeg_demo.sh``
does (settings from ``configs/demo_eeg.yaml``, each overridable by ``DEMO_<KEY>`` like the script), and
:mod:`.headline` stages the Sleep-EDF-format nights with every run and pools them.

- :func:`demo_settings`: the demo config as the script resolves it;
- :func:`demo_data`: its synthetic nights, synthesized and prepared once under a data folder;
- :func:`demo_config` / :func:`pretrain`: one pretraining run per seed (a finished run is reused).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

DEMO_CONFIG = Path("configs") / "demo_eeg.yaml"
"""The demo's settings, relative to the repository root (``DEMO_CONFIG=FILE`` reads another file)."""
TRAIN_CONFIG = Path("configs") / "eeg_synthetic_m3g.yaml"
"""The training config the demo overrides."""
DEMO_KEYS = (
    "data subjects edf_subjects hours compress steps lr batch encoder epsilon draws psg_seed edf_seed augment "
    "combine ceiling"
).split()
"""Every key of the demo config (the script refuses a file with others)."""
KEEP_EMPTY = frozenset({"augment"})
"""Keys whose ``DEMO_<KEY>`` may be set empty on purpose (``DEMO_AUGMENT=""``: no view augmentations);
for the others an empty variable keeps the file's value, as in the script."""
RUN_NAME = "eeg_synthetic_m3g_demo"


def repo_root() -> Path:
    """The repository root: the working directory when it holds the configs, else the source checkout."""
    here = Path.cwd()
    if (here / TRAIN_CONFIG).is_file():
        return here
    return Path(__file__).resolve().parents[2]


def demo_settings(env: Mapping[str, str] | None = None, path: Path | None = None) -> dict[str, str]:
    """The demo's settings ``{key: value as text}`` as ``scripts/run_eeg_demo.sh`` resolves them: the file
    (``path``, else ``$DEMO_CONFIG``, else ``configs/demo_eeg.yaml``) with ``DEMO_<KEY>`` from ``env`` (default
    the environment) winning. A file with missing or unknown keys is an error naming them."""
    env = dict(os.environ if env is None else env)
    path = path or Path(env.get("DEMO_CONFIG") or repo_root() / DEMO_CONFIG)
    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict) or set(config) != set(DEMO_KEYS):
        keys = set(config) if isinstance(config, dict) else set()
        raise ValueError(
            f"{path}: expected the demo keys {DEMO_KEYS}; missing {sorted(set(DEMO_KEYS) - keys)}, "
            f"unknown {sorted(keys - set(DEMO_KEYS))}"
        )
    settings = {}
    for key in DEMO_KEYS:
        value = config[key]
        text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        override = env.get(f"DEMO_{key.upper()}")
        settings[key] = text if override is None or (override == "" and key not in KEEP_EMPTY) else override
    return settings


def mvapp(*args: str) -> None:
    """Run ``mvapp ARGS`` (this interpreter's package) with one torch thread, as the demo does; raise on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run([sys.executable, "-m", "multiview_app.cli", *args], check=True, env=env)


def demo_data(data: Path, settings: Mapping[str, str], sleep_edf: bool = False) -> dict[str, Path]:
    """The demo's synthetic nights under ``data``, synthesized and prepared as the demo script does (existing
    files reused): ``{"physionet2018": cache}`` (``subjects`` nights, generator seed ``psg_seed``; pretraining)
    and, with ``sleep_edf``, ``"sleep-edf"`` (``edf_subjects`` nights, seed ``edf_seed``; cross-dataset)."""
    wanted = [("physionet2018", "subjects", "psg_seed")]
    wanted += [("sleep-edf", "edf_subjects", "edf_seed")] if sleep_edf else []
    caches = {}
    for fmt, subjects, seed in wanted:
        stem = fmt.replace("-", "_")
        raw, cache = data / f"{stem}_raw", data / f"{stem}_cache"
        if not raw.is_dir() or not any(raw.glob("*")):
            mvapp(
                *("data", "synth-psg", "--subjects", settings[subjects], "--nights", "1", "--format", fmt),
                *("--hours", settings["hours"], "--compress", settings["compress"], "--out", str(raw)),
                *("--seed", settings[seed]),
            )
        if not (cache / "manifest.json").is_file():
            mvapp("data", "prepare", fmt, "--source", str(raw), "--out", str(cache))
        caches[fmt] = cache
    return caches


def demo_config(
    cache: Path, runs: Path, name: str, seed: int, settings: Mapping[str, str], extra: list[str] | tuple = ()
) -> Any:
    """The demo's training config (``configs/eeg_synthetic_m3g.yaml`` with the overrides the demo script passes)
    for run ``runs/name`` with ``train.seed`` ``seed``; ``extra`` overrides last."""
    from ..config import load_config

    overrides = [
        f"output.runs_dir={runs}",
        f"train.seed={seed}",
        f"data.options.cache={cache}",
        f"train.max_steps={settings['steps']}",
        f"train.batch_size={settings['batch']}",
        f"optim.lr={settings['lr']}",
        f"model.encoders.eeg={settings['encoder']}",
        "train.checkpoint_every=0",
        "train.log_every=10",
        f"loss.epsilon={settings['epsilon']}",
        "loss.max_iter=300",
        *settings["augment"].split(),
        *extra,
    ]
    return load_config(repo_root() / TRAIN_CONFIG, overrides, name=name)


def pretrain(runs: Path, seed: int, data: Path, settings: Mapping[str, str] | None = None) -> Path:
    """The demo's encoder pretrained with training seed ``seed`` on the demo's nights under ``data`` (made
    unless present) into ``runs/eeg_synthetic_m3g_demo_seed<seed>``; a finished run with the same config is
    reused, one trained with other settings refused (``ensure_trained(cfg, "refuse-mismatch")``)."""
    from .training import ensure_trained

    settings = settings or demo_settings()
    cache = demo_data(data.resolve(), settings)["physionet2018"]
    cfg = demo_config(cache, runs.resolve(), f"{RUN_NAME}_seed{seed}", seed, settings)
    ensure_trained(cfg, "refuse-mismatch")
    return cfg.run_dir


__all__ = ["DEMO_KEYS", "RUN_NAME", "demo_config", "demo_data", "demo_settings", "mvapp", "pretrain"]
