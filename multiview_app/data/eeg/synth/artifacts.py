"""Non-physiological parts of the synthetic EEG derivations: movement bursts (all channels, chin EMG and
EOG too), electrode pops (one channel), sweat sways, electrode drifts, white amplifier noise and line
noise. Added per derivation, after the bipolar derivations are formed from their electrodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..stages import EPOCH_SECONDS
from .parameters import ARTIFACT_PROB, EPOCHS_PER_POP, SWEAT_PER_1000_EPOCHS, SubjectTraits
from .waveforms import _band_noise


@dataclass
class Artifacts:
    """What :func:`add_artifacts` added: ``movement_epochs (k,)`` epochs with a movement burst, ``movements``
    ``[(start, length)]``, ``ocular (n,)`` their share seen by the EOG, ``pops`` ``[(channel, start, step
    uV)]``, ``sweat`` ``[(start, length)]``, ``drift (c + 2, n)`` random-walk drifts (the last two rows
    are for the EOG)."""

    movement_epochs: np.ndarray
    movements: list[tuple[int, int]]
    ocular: np.ndarray
    pops: list[tuple[str, int, float]]
    sweat: list[tuple[int, int]]
    drift: np.ndarray


def _movement_bursts(
    out: np.ndarray, emg: np.ndarray, stages: np.ndarray, traits: SubjectTraits, fs: float, rng: np.random.Generator
) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
    """Add 1-6 s low-frequency movement bursts in place to every derivation of ``out (c, n)`` and to
    ``emg (n,)`` (epochs drawn with :data:`ARTIFACT_PROB`). Returns the burst epochs ``(k,)``, the
    bursts ``[(start, length)]`` and their ocular share ``(n,)``."""
    n = out.shape[1]
    artifact_epochs = np.flatnonzero(
        rng.random(stages.size) < np.asarray(ARTIFACT_PROB)[stages] * traits.artifact_scale
    )
    spe = int(EPOCH_SECONDS * fs)
    movements, ocular_artifact = [], np.zeros(n)
    for e in artifact_epochs:
        length = int(rng.uniform(1.0, 6.0) * fs)
        start = e * spe + int(rng.integers(0, spe - length))
        burst = _band_noise(length, fs, (0.5, 8.0), rng, 1)[0] * rng.uniform(40.0, 150.0) * np.hanning(length)
        out[:, start : start + length] += burst[None] * rng.uniform(0.5, 1.5, size=(out.shape[0], 1))
        emg[start : start + length] += 3 * burst
        ocular_artifact[start : start + length] += burst
        movements.append((start, length))
    return artifact_epochs, movements, ocular_artifact


def _electrode_pops(
    out: np.ndarray, derivations: list[str], n_epochs: int, fs: float, rng: np.random.Generator
) -> list[tuple[str, int, float]]:
    """Add electrode pops in place (a step of up to +-80 uV in one derivation of ``out (c, n)`` decaying
    over 0.5 s; one per :data:`EPOCHS_PER_POP` epochs). Returns ``[(derivation, start, step uV)]``."""
    n = out.shape[1]
    pops = []
    for _ in range(rng.poisson(n_epochs / EPOCHS_PER_POP)) if derivations else ():
        channel, start = int(rng.integers(len(derivations))), int(rng.integers(0, n - int(fs)))
        step = rng.uniform(-80, 80)
        out[channel, start:] += step * np.exp(-np.arange(n - start) / (0.5 * fs))
        pops.append((derivations[channel], start, float(step)))
    return pops


def _sweat_sways(
    out: np.ndarray, n_epochs: int, traits: SubjectTraits, fs: float, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """Add slow (0.1-0.5 Hz) high-amplitude sways of a few minutes, later in the night, in place to every
    derivation of ``out (c, n)`` (:data:`SWEAT_PER_1000_EPOCHS`). Returns ``[(start, length)]``."""
    n = out.shape[1]
    sweat = []
    for _ in range(rng.poisson(SWEAT_PER_1000_EPOCHS * traits.artifact_scale * n_epochs / 1000.0)) if len(out) else ():
        length = min(n, int(rng.uniform(2.0, 8.0) * 60 * fs))
        start = int(n - length - rng.integers(0, max(1, (n - length) // 2 + 1)))
        sway = _band_noise(length, fs, (0.1, 0.5), rng, 1)[0] * rng.uniform(30.0, 100.0) * np.hanning(length)
        out[:, start : start + length] += sway[None] * rng.uniform(0.3, 1.0, size=(len(out), 1))
        sweat.append((start, length))
    return sweat


def _drift_and_noise(
    out: np.ndarray, traits: SubjectTraits, fs: float, mains_hz: float, rng: np.random.Generator
) -> np.ndarray:
    """Add random-walk drifts (1-s knots), white noise and line noise at ``mains_hz`` (omitted above 0.45
    ``fs``) in place to ``out (c, n)``. Returns the drifts ``(c + 2, n)`` (the last two for the EOG)."""
    c, n = out.shape
    drift = np.cumsum(rng.standard_normal((c + 2, n // int(fs) + 2)), axis=1) * 2.0
    drift = np.stack([np.interp(np.arange(n) / fs, np.arange(d.size), d) for d in drift])
    out += drift[:c] + traits.white_noise_uv * rng.standard_normal((c, n), dtype=np.float32)
    if mains_hz < 0.45 * fs:
        out += traits.mains_uv * np.sin(2 * np.pi * mains_hz * np.arange(n) / fs + rng.uniform(0, 2 * np.pi))[None]
    return drift


def add_artifacts(
    out: np.ndarray,
    emg: np.ndarray,
    derivations: list[str],
    stages: np.ndarray,
    traits: SubjectTraits,
    fs: float,
    mains_hz: float,
    rng: np.random.Generator,
) -> Artifacts:
    """Add movement bursts, pops, sweat, drifts, white and line noise in place to the EEG derivations
    ``out (c, n)`` (named ``derivations``) and movement bursts to ``emg (n,)``; ``stages (e,)``."""
    movement_epochs, movements, ocular = _movement_bursts(out, emg, stages, traits, fs, rng)
    pops = _electrode_pops(out, derivations, stages.size, fs, rng)
    sweat = _sweat_sways(out, stages.size, traits, fs, rng)
    drift = _drift_and_noise(out, traits, fs, mains_hz, rng)
    return Artifacts(movement_epochs, movements, ocular, pops, sweat, drift)
