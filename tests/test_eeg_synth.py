"""Generator honesty: published stage proportions, spatially decaying channel correlations."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import butter, sosfiltfilt

from multiview_app.data.eeg.preprocess import wake_crop_mask
from multiview_app.data.eeg.stages import PHYSIONET2018_EEG
from multiview_app.data.eeg.synth import (SubjectTraits, full_night_excerpt, spatial_correlation, synth_hypnogram,
                                          synth_night)

# Sleep-EDF SC, 20 subjects / 39 nights, Fpz-Cz, 30 min of wake kept around sleep (Supratak et al. 2017,
# DeepSleepNet, Table I): W 8285, N1 2804, N2 17799, N3 5703, REM 7717 epochs.
PUBLISHED_SC_EPOCHS = np.array([8285, 2804, 17799, 5703, 7717])


@pytest.mark.parametrize("compress", [1, 3])
def test_full_nights_and_excerpts_keep_published_stage_proportions(compress):
    totals = np.zeros(5)
    for subject in range(20):
        traits = SubjectTraits.sample(np.random.default_rng([0, subject]))
        stages = full_night_excerpt(synth_hypnogram(9 * 120, traits, np.random.default_rng([0, subject, 1])), compress)
        totals += np.bincount(stages[wake_crop_mask(stages, 30.0)], minlength=5)
    shares = totals / totals.sum()
    published = PUBLISHED_SC_EPOCHS / PUBLISHED_SC_EPOCHS.sum()
    np.testing.assert_allclose(shares, published, atol=0.025)  # every stage within 2.5 points
    if compress == 3:
        assert 330 < totals.sum() / 20 < 390  # ~3 h per night instead of ~9 h


def test_channel_correlations_decay_with_distance_and_nothing_is_shared_identically():
    traits = SubjectTraits.sample(np.random.default_rng(3))
    traits.latency_minutes = 5.0
    night = synth_night(list(PHYSIONET2018_EEG), 0.5, 100.0, traits, np.random.default_rng(3))
    sos = butter(4, [0.5, 30.0], btype="bandpass", fs=100.0, output="sos")
    x = sosfiltfilt(sos, np.stack([night.signals[c] for c in PHYSIONET2018_EEG]), axis=-1)
    corr = np.corrcoef(x)
    index = {c: i for i, c in enumerate(PHYSIONET2018_EEG)}
    near = corr[index["F3-M2"], index["C3-M2"]]
    far = corr[index["F3-M2"], index["O2-M1"]]
    assert near > far + 0.15
    assert corr[index["O1-M2"], index["O2-M1"]] > corr[index["O1-M2"], index["F4-M1"]]
    assert corr[~np.eye(6, dtype=bool)].max() < 0.9
    # per-epoch amplitude jitter is not common to all channels: the log power ratio of a near and a
    # far channel varies from epoch to epoch
    power = (x.reshape(6, -1, 3000) ** 2).mean(-1)
    ratio = np.log(power[index["F3-M2"]] / power[index["O2-M1"]])
    assert ratio.std() > 0.15
    model = spatial_correlation(list(PHYSIONET2018_EEG))
    assert model[index["F3-M2"], index["C3-M2"]] > model[index["F3-M2"], index["F4-M1"]] > model[index["F3-M2"], index["O2-M1"]]
