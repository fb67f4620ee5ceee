"""Waveform building blocks of the synthetic signals (vectorized numpy): FFT band-limited and 1/f noise,
smooth per-epoch envelopes, Poisson event trains, transient templates, spatially correlated mixing
and per-stage tables expanded to per-epoch values."""

from __future__ import annotations

import numpy as np
from scipy import fft as sp_fft

from ..stages import EPOCH_SECONDS
from .parameters import (
    EEG_POSITION,
    ELECTRODE_POSITION,
    EYES_CLOSED,
    EYES_OPEN,
    SPATIAL_DECAY,
    SubjectTraits,
    W,
)


def _band_noise(
    n: int,
    fs: float,
    band: tuple[float, float],
    rng: np.random.Generator,
    count: int,
    slope: float = 0.0,
    soft: bool = False,
) -> np.ndarray:
    """``count`` unit-variance noises band-limited to ``band`` Hz: ``(count, n)`` float32.
    ``slope``: power ~ ``f ** -slope`` in the band; ``soft``: edges ramp over 15 % of the band
    width (at least 0.3 Hz) instead of 0.3 Hz, so neighbouring rhythms overlap (no box spectra)."""
    freqs = np.fft.rfftfreq(n, 1.0 / fs).astype(np.float32)
    low, high = band[0], min(band[1], 0.48 * fs)
    ramp = max(0.3, 0.15 * (high - low)) if soft else 0.3
    mask = np.clip(np.minimum((freqs - low) / ramp + 1.0, (high - freqs) / ramp + 1.0), 0.0, 1.0)
    if slope:
        mask = mask * (np.maximum(freqs, low) / low) ** (-slope / 2)
    keep = np.flatnonzero(mask > 0)  # only the band's bins are drawn (complex Gaussian = FFT of white noise)
    spectrum = np.zeros((count, freqs.size), dtype=np.complex64)
    spectrum[:, keep] = (
        rng.standard_normal((count, keep.size), dtype=np.float32)
        + 1j * rng.standard_normal((count, keep.size), dtype=np.float32)
    ) * mask[keep]
    noise = sp_fft.irfft(spectrum, n=n, axis=-1)
    return noise / (noise.std(axis=-1, keepdims=True) + 1e-12)


def _pink_noise(n: int, fs: float, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` unit-variance 1/f noises: ``(count, n)`` float32."""
    freqs = np.fft.rfftfreq(n, 1.0 / fs).astype(np.float32)
    scale = 1.0 / np.sqrt(np.maximum(freqs, 0.3))
    spectrum = (
        rng.standard_normal((count, freqs.size), dtype=np.float32)
        + 1j * rng.standard_normal((count, freqs.size), dtype=np.float32)
    ) * scale
    noise = sp_fft.irfft(spectrum.astype(np.complex64), n=n, axis=-1)
    return noise / (noise.std(axis=-1, keepdims=True) + 1e-12)


def _envelope(per_epoch: np.ndarray, n: int, fs: float) -> np.ndarray:
    """Per-epoch amplitudes ``(e,)`` -> smooth per-sample envelope ``(n,)`` (linear between epoch centres)."""
    spe = EPOCH_SECONDS * fs
    centres = (np.arange(per_epoch.size) + 0.5) * spe
    return np.interp(np.arange(n), centres, per_epoch)


def _event_train(rates: np.ndarray, n: int, fs: float, rng: np.random.Generator) -> np.ndarray:
    """Impulse train with Poisson counts per epoch (``rates`` events/min per epoch) and random heights."""
    spe = int(EPOCH_SECONDS * fs)
    counts = rng.poisson(rates * EPOCH_SECONDS / 60.0)
    epoch_of_event = np.repeat(np.arange(rates.size), counts)
    positions = epoch_of_event * spe + rng.integers(0, spe, size=epoch_of_event.size)
    train = np.zeros(n)
    np.add.at(train, positions[positions < n], rng.uniform(0.6, 1.4, size=int((positions < n).sum())))
    return train


def _templates(fs: float, traits: SubjectTraits) -> dict[str, np.ndarray]:
    """Waveform templates (peak ~1) of the transient events."""

    def gauss(t: np.ndarray, mu: float, sd: float) -> np.ndarray:
        return np.exp(-0.5 * ((t - mu) / sd) ** 2)

    t1 = np.arange(int(2.4 * fs)) / fs
    t2 = np.arange(int(2.0 * fs)) / fs
    t3 = np.arange(int(0.5 * fs)) / fs
    return {
        **{
            f"spindle{i}": gauss(t1, 1.2, sd) * np.cos(2 * np.pi * traits.spindle_hz * t1)
            for i, sd in enumerate((0.12, 0.2, 0.3))
        },  # visible for ~0.5, ~0.9, ~1.4 s
        "k_complex": -gauss(t2, 0.35, 0.1) + 0.7 * gauss(t2, 0.85, 0.22),
        "vertex": -gauss(t3, 0.2, 0.05) + 0.3 * gauss(t3, 0.33, 0.05),
        "sawtooth": gauss(t2, 1.0, 0.4) * (2 * ((3.0 * t2) % 1.0) - 1.0),
        "blink": gauss(t3, 0.2, 0.06),
        "slow_roll": np.sin(np.pi * np.arange(int(3.0 * fs)) / (3.0 * fs)),
        "saccade": np.concatenate(
            [np.linspace(0, 1, max(2, int(0.04 * fs))), np.exp(-np.arange(int(0.6 * fs)) / (0.3 * fs))]
        ),
    }


def spatial_correlation(channels: list[str]) -> np.ndarray:
    """``(c, c)`` correlation ``exp(-distance / SPATIAL_DECAY)`` between EEG derivations."""
    positions = np.array([{**EEG_POSITION, **ELECTRODE_POSITION}[c] for c in channels]).reshape(len(channels), 2)
    distance = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    return np.exp(-distance / SPATIAL_DECAY)


def _correlated(mixing: np.ndarray, white: np.ndarray) -> np.ndarray:
    """Unit-variance signals ``(c, m)`` with correlation ``mixing @ mixing.T`` from white ``(c, m)``."""
    return (mixing @ white).astype(np.float32)


def _per_epoch(table: tuple[float, ...], stages: np.ndarray, closed: np.ndarray, name: str) -> np.ndarray:
    """A per-stage ``table`` as per-epoch values ``(e,)``, wake scaled by the eyes-open/closed factors."""
    values = np.asarray(table, dtype=float)[stages]
    wake = stages == W
    values[wake & closed] *= EYES_CLOSED.get(name, 1.0)
    values[wake & ~closed] *= EYES_OPEN.get(name, 1.0)
    return values
