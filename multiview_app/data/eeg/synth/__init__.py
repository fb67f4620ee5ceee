"""Synthetic polysomnography written in the real Sleep-EDF (EDF/EDF+) and PhysioNet 2018 (WFDB) formats.

Hypnograms are semi-Markov: NREM-REM cycles of ~90 min (N3 early, REM periods lengthening) cut
into gamma-distributed stage bouts separated by brief arousals; signals are built per stage and
per channel from the known signatures (W: eyes-open beta, blinks and EMG or eyes-closed posterior
alpha; N1: theta, alpha dropout, vertex waves, slow eye movements; N2: central spindles and
K-complexes; N3: frontal high-amplitude delta; REM: sawtooth theta, atonia, rapid eye movements, no
spindles), with brief EEG arousals, subject-level variability (age-like delta and N3, alpha peak,
channel gains, noise), epoch-level amplitude jitter, smooth transitions, pink/white noise, movement
artifacts, electrode pops, sweat sways, drifts and line noise. The values checked against
references live in ``reference.py``. Everything is vectorized numpy (FFT band noise and
FFT convolution of event trains with templates).

One module per concern: ``parameters`` (constants, rhythm tables, :class:`SubjectTraits`, cohorts, random
side streams), ``hypnogram``, ``waveforms`` (noise, envelopes, event trains, templates), ``brain``
(:func:`synth_night`: EEG / EOG / EMG), ``arousals``, ``artifacts``, ``writers`` (EDF, WFDB,
``-arousal.mat``), ``formats`` (one night per real format, :data:`WRITERS`) and ``jobs``
(:func:`synth_psg`). This package re-exports the names other modules import from it.
"""

from __future__ import annotations

from ..stages import EPOCH_SECONDS, EXCLUDED, PHYSIONET2018_EEG, STAGES
from .arousals import (
    POSTERIOR_WEIGHTS,
    add_arousals,
)
from .artifacts import (
    Artifacts,
    add_artifacts,
)
from .brain import (
    EyeMovements,
    SyntheticNight,
    check_channels,
    derivation_matrix,
    eeg_sources,
    synth_night,
)
from .formats import (
    PHYSIONET_SYNTH_CHANNELS,
    SC_MIN_NIGHT_HOURS,
    SC_PADDING_BEFORE,
    SC_RECORD_HOURS,
    SLEEP_EDF_SYNTH_CHANNELS,
    WRITER_COHORT,
    WRITERS,
    default_record_hours,
    write_physionet2018_night,
    write_sleep_edf_night,
)
from .hypnogram import (
    AWAKENING_MINUTES,
    BOUT_MINUTES,
    EPOCHS_PER_MINUTE,
    INTERRUPTION,
    INTERRUPTION_EPOCHS,
    N3_MINUTES,
    REM_MINUTES,
    eyes_closed_epochs,
    full_night_excerpt,
    synth_hypnogram,
)
from .jobs import (
    COHORT_STREAM,
    synth_psg,
)
from .parameters import (
    AROUSAL_ALPHA_UV,
    AROUSAL_BETA_UV,
    AROUSAL_MIN_SECONDS,
    AROUSAL_SECONDS,
    AROUSALS_PER_HOUR,
    ARTIFACT_PROB,
    BIPOLAR_DERIVATIONS,
    COHORTS,
    EEG_POSITION,
    EEG_TOPOGRAPHY,
    ELECTRODE_POSITION,
    ELECTRODE_TOPOGRAPHY,
    EMG_AMPLITUDE,
    EMG_CHANNELS,
    EOG_CHANNELS,
    EOG_EVENTS,
    EOG_GAZE_SENSITIVITY,
    EPOCHS_PER_POP,
    EXTRA_AROUSALS_PER_HOUR,
    EYES_CLOSED,
    EYES_OPEN,
    N1,
    N2,
    N3,
    PHASIC_REM_SHARE,
    PINK_NOISE_UV,
    REM,
    RHYTHM_EPOCH_JITTER,
    RHYTHM_GAIN_OF,
    RHYTHM_SUBJECT_GAIN_SD,
    RHYTHMS,
    SC_AGE_EFFECTS,
    SC_ARTIFACT_SCALE,
    SC_FEMALE_SHARE,
    SC_WHITE_NOISE_UV,
    SECOND_EOG,
    SIDE_STREAMS,
    SLOW_WAVE_STAGES,
    SPATIAL_DECAY,
    SWEAT_PER_1000_EPOCHS,
    TRANSIENTS,
    WHITE_NOISE_UV,
    Rhythm,
    SubjectTraits,
    Transient,
    W,
    arousal_index_ratio,
    side_stream,
)
from .waveforms import (
    _templates as _templates,
)
from .waveforms import (
    spatial_correlation,
)
from .writers import (
    DEFAULT_START,
    SLEEP_EDF_TEXT,
    hypnogram_annotations,
    write_arousal_mat,
    write_edf,
    write_wfdb_record,
)
from .writers import (
    _fast_checked_record as _fast_checked_record,
)

__all__ = [
    "EPOCH_SECONDS",
    "EXCLUDED",
    "PHYSIONET2018_EEG",
    "STAGES",
    "W",
    "N1",
    "N2",
    "N3",
    "REM",
    "EEG_TOPOGRAPHY",
    "EEG_POSITION",
    "BIPOLAR_DERIVATIONS",
    "ELECTRODE_TOPOGRAPHY",
    "ELECTRODE_POSITION",
    "SPATIAL_DECAY",
    "EOG_CHANNELS",
    "EMG_CHANNELS",
    "SECOND_EOG",
    "EOG_GAZE_SENSITIVITY",
    "Rhythm",
    "Transient",
    "RHYTHMS",
    "RHYTHM_GAIN_OF",
    "TRANSIENTS",
    "EOG_EVENTS",
    "EYES_OPEN",
    "EYES_CLOSED",
    "PHASIC_REM_SHARE",
    "EMG_AMPLITUDE",
    "ARTIFACT_PROB",
    "EPOCHS_PER_POP",
    "SWEAT_PER_1000_EPOCHS",
    "AROUSALS_PER_HOUR",
    "EXTRA_AROUSALS_PER_HOUR",
    "AROUSAL_SECONDS",
    "AROUSAL_MIN_SECONDS",
    "AROUSAL_ALPHA_UV",
    "AROUSAL_BETA_UV",
    "RHYTHM_SUBJECT_GAIN_SD",
    "RHYTHM_EPOCH_JITTER",
    "PINK_NOISE_UV",
    "WHITE_NOISE_UV",
    "SubjectTraits",
    "COHORTS",
    "SC_FEMALE_SHARE",
    "SC_AGE_EFFECTS",
    "SLOW_WAVE_STAGES",
    "SC_WHITE_NOISE_UV",
    "SC_ARTIFACT_SCALE",
    "arousal_index_ratio",
    "side_stream",
    "SIDE_STREAMS",
    "EPOCHS_PER_MINUTE",
    "N3_MINUTES",
    "REM_MINUTES",
    "BOUT_MINUTES",
    "AWAKENING_MINUTES",
    "INTERRUPTION",
    "INTERRUPTION_EPOCHS",
    "synth_hypnogram",
    "full_night_excerpt",
    "eyes_closed_epochs",
    "spatial_correlation",
    "POSTERIOR_WEIGHTS",
    "add_arousals",
    "Artifacts",
    "add_artifacts",
    "SyntheticNight",
    "EyeMovements",
    "eeg_sources",
    "derivation_matrix",
    "check_channels",
    "synth_night",
    "DEFAULT_START",
    "write_edf",
    "SLEEP_EDF_TEXT",
    "hypnogram_annotations",
    "write_wfdb_record",
    "write_arousal_mat",
    "SLEEP_EDF_SYNTH_CHANNELS",
    "SC_RECORD_HOURS",
    "SC_PADDING_BEFORE",
    "SC_MIN_NIGHT_HOURS",
    "default_record_hours",
    "write_sleep_edf_night",
    "PHYSIONET_SYNTH_CHANNELS",
    "write_physionet2018_night",
    "WRITERS",
    "WRITER_COHORT",
    "COHORT_STREAM",
    "synth_psg",
]
