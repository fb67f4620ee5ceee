"""Flat, saturated and out-of-range channels are found (the checks behind `data info` and the readers)."""

import numpy as np

from multiview_app.data.eeg.channel_quality import assess_channel, edf_storable_limits


def test_normal_eeg_is_usable():
    eeg = np.random.default_rng(0).normal(0, 20, 10_000)
    assert assess_channel("C3-M2", eeg).usable


def test_flat_channel_and_constant_channel():
    assert assess_channel("C3-M2", np.full(1000, 3.0)).problem == "flat"
    steps = np.r_[np.zeros(950), np.random.default_rng(1).normal(0, 50, 50)]
    assert assess_channel("C3-M2", steps).problem == "flat"  # 95 % one value


def test_saturated_when_int16_clips_a_wider_digital_range():
    limits = edf_storable_limits((-2643.0, 2916.0), (-264296, 291593))  # DREAMS excerpt 3's VAB header
    assert -330 < limits[0] < -320 and 320 < limits[1] < 330
    wave = 600 * np.sin(np.linspace(0, 60, 5000))
    clipped = np.clip(wave, *limits)
    verdict = assess_channel("VAB", clipped, "arbitrary", limits)
    assert verdict.problem == "saturated" and "range" in verdict.detail
    assert assess_channel("VAB", wave / 10, "arbitrary", limits).usable


def test_spo2_reading_zero_is_out_of_range():
    zeros = np.random.default_rng(2).normal(0, 0.3, 2000)
    assert assess_channel("SaO2", zeros, "%", valid_range=(50, 100)).problem == "out_of_range"
    normal = 96 + np.random.default_rng(3).normal(0, 0.7, 2000)
    assert assess_channel("SaO2", normal, "%", valid_range=(50, 100)).usable
