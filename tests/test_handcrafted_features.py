"""The strong hand-crafted EEG row (eval/handcrafted.py): shapes, finiteness, the invariances it claims,
and each feature family against an independent computation on signals whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_app.eval.handcrafted import (
    FEATURE_NAMES,
    LOG_POWER_FEATURES,
    SCALE_INVARIANT,
    handcrafted_features,
    handcrafted_row,
)

SFREQ = 100.0
T = 3000
COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


def sine(freq: float, amplitude: float = 1.0, phase: float = 0.3) -> np.ndarray:
    t = np.arange(T) / SFREQ
    return amplitude * np.sin(2 * np.pi * freq * t + phase)


def test_shapes_names_and_finite_on_degenerate_windows() -> None:
    rng = np.random.default_rng(0)
    windows = np.stack(
        [
            rng.standard_normal((3, T)),
            np.zeros((3, T)),  # flat channel (e.g. a disconnected electrode)
            1e-9 * rng.standard_normal((3, T)),
            np.stack([sine(2.0), sine(11.0), sine(25.0)]),
        ]
    ).astype(np.float32)
    feats = handcrafted_features(windows, SFREQ)
    assert feats.shape == (4, 3, len(FEATURE_NAMES)) and len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) == 50
    assert np.isfinite(feats).all()
    row = handcrafted_row(windows, SFREQ)
    assert row.shape == (4, 3 * 50) and row.dtype == np.float32
    np.testing.assert_allclose(row[3, 50:100], feats[3, 1], rtol=1e-6)  # channel-major flattening


def test_amplitude_scale_changes_only_the_log_power_by_2_log_a() -> None:
    rng = np.random.default_rng(1)
    windows = rng.standard_normal((5, 2, T)) + np.stack([sine(10.0), sine(1.5)])[None]
    a = 3.7
    base, scaled = handcrafted_features(windows, SFREQ), handcrafted_features(a * windows, SFREQ)
    invariant = [COL[n] for n in sorted(SCALE_INVARIANT)]
    np.testing.assert_allclose(scaled[..., invariant], base[..., invariant], rtol=1e-9, atol=1e-9)
    for name in LOG_POWER_FEATURES:
        np.testing.assert_allclose(scaled[..., COL[name]] - base[..., COL[name]], 2 * np.log(a), rtol=1e-9)


def test_spectral_features_find_a_sine() -> None:
    feats = handcrafted_features(
        np.stack([sine(10.0)])[None] + 1e-3 * np.random.default_rng(2).standard_normal((1, 1, T)), SFREQ
    )[0, 0]
    spectrum = feats[: COL["log_delta_beta"]]
    assert FEATURE_NAMES[int(np.argmax(spectrum))] == "logrel_9.5-10.5Hz"
    assert abs(feats[COL["sef50_hz"]] - 10.0) <= 0.25 and abs(feats[COL["sef95_hz"]] - 10.0) <= 0.5
    assert feats[COL["spectral_entropy"]] < 0.3  # one peak: far below white noise's ~1
    noise = handcrafted_features(np.random.default_rng(3).standard_normal((1, 1, T)), SFREQ)[0, 0]
    assert noise[COL["spectral_entropy"]] > 0.9
    # theta/alpha ratio: a 10-Hz (alpha) sine has far less theta than alpha
    assert feats[COL["log_theta_alpha"]] < -3


def test_time_domain_features_against_closed_forms_and_numpy() -> None:
    f = 7.0
    x = sine(f)
    feats = handcrafted_features(x[None, None], SFREQ)[0, 0]
    # discrete Hjorth mobility of a sine: sqrt(var(diff x) / var x) = 2 sin(pi f / fs); complexity ~ 1
    assert feats[COL["hjorth_mobility"]] == pytest.approx(2 * np.sin(np.pi * f / SFREQ), rel=1e-3)
    assert feats[COL["hjorth_complexity"]] == pytest.approx(1.0, abs=1e-3)
    assert feats[COL["zero_crossings_per_s"]] == pytest.approx(2 * f, abs=0.1)
    assert feats[COL["subwindow_logvar_std"]] < 1e-3  # stationary
    # moments and percentiles against an independent computation on a skewed signal
    y = np.random.default_rng(4).gamma(2.0, size=T)
    got = handcrafted_features(y[None, None], SFREQ)[0, 0]
    z = (y - y.mean()) / y.std()
    assert got[COL["skewness"]] == pytest.approx(np.mean(z**3), rel=1e-9)
    assert got[COL["excess_kurtosis"]] == pytest.approx(np.mean(z**4) - 3, rel=1e-9)
    assert got[COL["p95_std_units"]] == pytest.approx(np.percentile(z, 95), rel=1e-9)
    assert got[COL["line_length_per_std"]] == pytest.approx(np.abs(np.diff(y)).mean() / y.std(), rel=1e-9)
    # a burst in one 5-s sub-window makes the window non-stationary
    burst = sine(f).copy()
    burst[:500] *= 6
    assert handcrafted_features(burst[None, None], SFREQ)[0, 0, COL["subwindow_logvar_range"]] > 3


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"\(N, C, T\)"):
        handcrafted_features(np.zeros((2, T)), SFREQ)
    with pytest.raises(ValueError, match="shorter than one 4-s Welch segment"):
        handcrafted_features(np.zeros((1, 1, 100)), SFREQ)
    bad = np.zeros((1, 1, T))
    bad[0, 0, 5] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        handcrafted_features(bad, SFREQ)
