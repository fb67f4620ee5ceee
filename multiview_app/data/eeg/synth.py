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
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import fft as sp_fft
from scipy.signal import oaconvolve

from ...fileio import temp_sibling
from .provenance import provenance_text
from .reference import AROUSAL_DURATION_SECONDS, AROUSAL_INDEX_PER_HOUR, SLEEP_EDF_SC_SUBJECTS
from .stages import EPOCH_SECONDS, EXCLUDED, PHYSIONET2018_EEG, STAGES

W, N1, N2, N3, REM = range(5)

# Region weights (frontal, central, occipital) of each EEG derivation (the bipolar Sleep-EDF ones are
# generated from their electrodes, ``BIPOLAR_DERIVATIONS``; their entries here name the known channels).
EEG_TOPOGRAPHY: dict[str, tuple[float, float, float]] = {
    "F3-M2": (1.0, 0.45, 0.1),
    "F4-M1": (1.0, 0.45, 0.1),
    "C3-M2": (0.45, 1.0, 0.3),
    "C4-M1": (0.45, 1.0, 0.3),
    "O1-M2": (0.1, 0.3, 1.0),
    "O2-M1": (0.1, 0.3, 1.0),
    "EEG Fpz-Cz": (1.0, 0.55, 0.0),
    "EEG Pz-Oz": (0.0, 0.45, 1.0),
}
# Approximate scalp position (x: left -> right, y: back -> front; head radius ~1) of each EEG
# derivation's active site (bipolar Sleep-EDF derivations: the midpoint of their two electrodes).
EEG_POSITION: dict[str, tuple[float, float]] = {
    "F3-M2": (-0.40, 0.50),
    "F4-M1": (0.40, 0.50),
    "C3-M2": (-0.50, 0.00),
    "C4-M1": (0.50, 0.00),
    "O1-M2": (-0.30, -0.90),
    "O2-M1": (0.30, -0.90),
    "EEG Fpz-Cz": (0.00, 0.45),
    "EEG Pz-Oz": (0.00, -0.70),
}
BIPOLAR_DERIVATIONS: dict[str, tuple[str, str]] = {"EEG Fpz-Cz": ("Fpz", "Cz"), "EEG Pz-Oz": ("Pz", "Oz")}
"""Sleep-EDF's EEG derivations are bipolar (Kemp et al. 2000; PhysioNet Sleep-EDF Expanded description):
each is generated as the difference of its two electrodes' potentials, so sources
both electrodes see alike cancel (a central spindle or K-complex is small and inverted on Fpz-Cz) and
the spatially incoherent part adds; the PhysioNet-format derivations are mastoid-referenced (one
active site each). The region weights and positions of the electrodes below are assumptions."""
ELECTRODE_TOPOGRAPHY: dict[str, tuple[float, float, float]] = {
    "Fpz": (1.0, 0.35, 0.0),
    "Cz": (0.45, 1.0, 0.3),
    "Pz": (0.1, 0.75, 0.6),
    "Oz": (0.0, 0.3, 1.0),
}
ELECTRODE_POSITION: dict[str, tuple[float, float]] = {
    "Fpz": (0.0, 0.95),
    "Cz": (0.0, 0.0),
    "Pz": (0.0, -0.45),
    "Oz": (0.0, -0.95),
}
SPATIAL_DECAY = 1.0
"""Length (head radii) over which the correlation of two derivations' background rhythms decays by
1/e: neighbours (F3-C3, 0.5 apart) share ~0.6, homologous F3-F4 ~0.45, distant F3-O2 ~0.2."""
EOG_CHANNELS = ("E1-M2", "EOG horizontal")
EMG_CHANNELS = ("Chin1-Chin2", "EMG submental")
SECOND_EOG = "E2-M1"
"""The second AASM EOG derivation: generated on request (tests: conjugate eye movements are out of
phase on E1-M2 and E2-M1) but written by neither writer, because neither real format has it."""
EOG_GAZE_SENSITIVITY: dict[str, tuple[float, float]] = {
    "E1-M2": (-1.0, -0.5),
    "E2-M1": (1.0, 0.5),
    "EOG horizontal": (2.0, 0.0),
}
"""How an EOG derivation sees the shared gaze of both eyes: (horizontal, vertical) gain on the gaze
trace (uV at one outer-canthus electrode; + = gaze to the subject's right / up). The cornea is
positive to the retina, so an electrode the cornea turns towards goes positive. E1 (1 cm below the
left outer canthus, AASM) goes negative for rightward and for upward gaze, E2 (1 cm above the right
outer canthus) positive; the mastoid references are too far from the eyes to see them. Conjugate
movements therefore deflect E1-M2 and E2-M1 in opposite directions (out of phase, unlike EEG that
leaks into both in phase). Sleep-EDF's "EOG horizontal" is a bipolar derivation between the outer
canthi at eye level: both eyes' horizontal dipoles add (twice a canthus electrode) and vertical
movements (blinks) cancel; its sign (here right minus left canthus) is an assumption, the SC
documentation does not state it."""


@dataclass(frozen=True)
class Rhythm:
    """A band-limited background rhythm: amplitude (uV) per stage and region weights (f, c, o);
    ``slope``: power falls as ``f ** -slope`` inside the band (0: flat)."""

    band: tuple[float, float]
    amplitude: tuple[float, float, float, float, float]
    topography: tuple[float, float, float]
    slope: float = 0.0


@dataclass(frozen=True)
class Transient:
    """Transient events (spindles, K-complexes, ...): rate per minute per stage, amplitude, topography."""

    rate_per_min: tuple[float, float, float, float, float]
    amplitude: float
    topography: tuple[float, float, float]


# N1, N2 and REM backgrounds are low-amplitude mixed-frequency (AASM), N2's delta low enough that
# K-complexes stand out for a blind 75-uV detector. W, N1, N2 and N3 amplitudes are set so that the
# central derivation (C3-M2) matches the DREAMS excerpts' central lead (C3-A1 / Cz-A1,
# ``reference.DREAMS_CENTRAL_BAND_RMS_UV``): per stage, the median in-band rms of delta, theta, alpha,
# sigma and beta within ~15 % (was: W alpha 8.3 vs 3.2 uV, W delta 7.3 vs 10.5, N3 delta 36.5 vs 22.4,
# N2 delta 11.4 vs 15.1); REM (5 real epochs) and the region weights (topography) stay assumptions.
RHYTHMS: dict[str, Rhythm] = {
    "delta": Rhythm((0.5, 3.5), (11.5, 7.5, 12.5, 23.5, 6.5), (1.0, 0.8, 0.55), slope=1.5),
    "theta": Rhythm((4.0, 7.5), (2.4, 3.2, 4.8, 5.3, 4.0), (0.7, 1.0, 0.6), slope=1.0),
    # around the subject's alpha peak; posterior (assumption: central weight 0.3, was 0.55, so that
    # central wake alpha is the real 3.2 uV while occipital eyes-closed alpha stays the largest)
    "alpha": Rhythm((-1.5, 1.5), (6.0, 1.5, 0.3, 0.5, 1.5), (0.15, 0.3, 1.0)),
    "beta": Rhythm((16.0, 30.0), (1.9, 1.05, 0.3, 0.18, 1.25), (0.8, 0.8, 0.6), slope=1.0),
    "muscle": Rhythm((30.0, 45.0), (3.5, 1.6, 1.0, 0.9, 0.6), (1.0, 0.5, 0.7)),
    "sigma": Rhythm(
        (12.0, 15.0), (1.5, 0.8, 2.2, 1.5, 0.0), (0.55, 1.0, 0.4)
    ),  # 12-15 Hz background (real in every stage)
    # 8-12 Hz power of real central sleep EEG (DREAMS: 3.5 / 3.9 / 4.5 uV rms in N1 / N2 / N3, more than
    # central wake's 3.2), central rather than posterior, so that the occipital N1 alpha dropout stays
    "alpha_sleep": Rhythm((8.0, 12.0), (0.0, 2.8, 2.85, 3.6, 0.0), (0.6, 1.0, 0.4)),
}
RHYTHM_GAIN_OF = {"sigma": "spindle", "alpha_sleep": "alpha"}
"""Rhythms added later take the subject's gain of a related event type (so no trait draw moved)."""
TRANSIENTS: dict[str, Transient] = {  # spindles and K-complexes mark N2 (AASM): none in W, N1, REM
    "spindle": Transient((0.0, 0.0, 3.5, 1.5, 0.0), 17.0, (0.55, 1.0, 0.4)),  # DREAMS N2 sigma, experts 2.0-3.0 / min
    "k_complex": Transient((0.0, 0.0, 1.2, 0.6, 0.0), 90.0, (1.0, 0.85, 0.35)),
    "vertex": Transient((0.1, 1.5, 0.4, 0.0, 0.1), 25.0, (0.6, 1.0, 0.3)),
    "sawtooth": Transient((0.0, 0.2, 0.0, 0.0, 1.5), 14.0, (0.6, 1.0, 0.4)),
}
EOG_EVENTS: dict[str, tuple[float, float, float, float, float]] = {  # rate per minute per stage
    "blink": (8.0, 1.0, 0.0, 0.0, 0.5),
    "slow_roll": (0.5, 3.0, 0.3, 0.0, 0.3),
    "saccade": (3.0, 0.3, 0.0, 0.0, 5.0),
}
EYES_OPEN = {"alpha": 0.45, "beta": 1.1, "muscle": 1.4, "blink": 1.9, "saccade": 1.9, "slow_roll": 0.0, "emg": 1.2}
EYES_CLOSED = {"alpha": 1.35, "beta": 1.1, "muscle": 0.7, "blink": 0.05, "saccade": 0.1, "slow_roll": 1.5, "emg": 0.8}
"""Wake epochs are eyes open (blinks, saccades, EMG; alpha blocked) or eyes closed (posterior alpha, few
eye movements): multipliers of the wake entries of the tables above. Beta 1.1 in both (was 1.3 open /
0.8 closed) and alpha 0.45 / 1.35 (was 0.3 / 1.5): on the central lead the eyes-closed epochs had a
relative beta of 0.035 and the eyes-open ones an alpha of 0.025 against the real DREAMS wake's 0.062 and
0.081 (pooled medians), and a band-power classifier trained on the real epochs staged a third of the
eyes-closed wake as N1 (W recall 0.70 young-adult / 0.75 SC, now 0.86 / 0.85, three draws;
``scripts/reproduce/eeg_generator/compare_wake_n1.py``). The posterior alpha still rises 3x in amplitude
with the eyes closed."""
PHASIC_REM_SHARE = 0.3
"""Share of REM epochs that are phasic (bursts of rapid eye movements; tonic REM has few): an assumption."""
EMG_AMPLITUDE = (18.0, 10.0, 7.0, 6.5, 3.0)
ARTIFACT_PROB = (0.10, 0.05, 0.02, 0.02, 0.03)
"""Probability per epoch and stage (W, N1, N2, N3, REM) of a movement burst (1-6 s, all channels),
times the subject's ``artifact_scale``: an assumption (see reference.py ``ARTIFACT_RATES``)."""
EPOCHS_PER_POP = 200.0
"""One electrode pop (a step of up to +-80 uV in one EEG channel decaying over 0.5 s) per 200 epochs
(0.6 per hour) on average; an assumption."""
SWEAT_PER_1000_EPOCHS = 0.5
"""Sweat sways per 1000 epochs (0.06 per hour), times ``artifact_scale``; an assumption."""
AROUSALS_PER_HOUR = 10.0
"""Brief EEG arousals (~15 s of alpha/beta and chin EMG, no stage change) per hour of sleep, times
the subject's ``arousal_scale``, drawn from the night's main random stream: the first, assumed rate."""
EXTRA_AROUSALS_PER_HOUR = 4.7
"""Further arousals per hour of sleep (same kind, times ``arousal_scale``) from their own random
stream, so that the total, 14.7 / h for ``arousal_scale`` 1, is the published arousal index of
healthy young adults (reference.py ``AROUSAL_INDEX_PER_HOUR``); a separate stream leaves every other
random draw, hence every window without an added arousal, as before."""
AROUSAL_SECONDS = {**AROUSAL_DURATION_SECONDS, "spread": 0.4}
"""Arousal durations: each subject's mean duration is drawn from N(mean, sd) (clipped at 3 sd), the
published mean +- SD of healthy sleepers (reference.py ``AROUSAL_DURATION_SECONDS``, read as the
spread of per-subject means); single arousals last ``uniform(1 - spread, 1 + spread)`` x the subject's
mean (at least 3 s, the AASM minimum), so the longest (1.4 x 21.8 s) still fits inside its 30-s epoch."""
AROUSAL_MIN_SECONDS = 3.0
"""Shortest EEG arousal (AASM scoring rule)."""
AROUSAL_ALPHA_UV = 3.0
AROUSAL_BETA_UV = 2.0
"""Amplitudes of an arousal's alpha and 16-30 Hz beta bursts (times the posterior weight, 1.3 on C3-M2):
an arousal shifts the EEG to wake frequencies, so at the central lead it now carries about the real
central wake's alpha / beta (DREAMS 3.2 / 2.7 uV rms). They were 6 / 4 uV (assumptions): 8 / 5 uV on
C3-M2, and the SC cohort's extra arousals lifted its N1 relative alpha further above the real one."""
RHYTHM_SUBJECT_GAIN_SD = 0.15
"""Standard deviation of the log of a subject's gain of each background rhythm (transients keep 0.3).
0.15 (was 0.3, i.e. 0.6 in log power): between the 8 DREAMS subjects, the per-subject median log
relative power of the central lead varies with SD 0.23-0.27 for alpha and theta in N2 / N3 (synthetic
at 0.3: 0.55-0.74 for alpha; ``scripts/reproduce/eeg_generator/compare_eeg_signals.py`` data)."""
RHYTHM_EPOCH_JITTER = 0.2
"""Standard deviation of the log per-epoch amplitude of each background rhythm (independent per rhythm,
spatially correlated across derivations). 0.2 (was 0.35): the DREAMS central epochs' log relative band
powers are tighter per stage (e.g. N3 alpha IQR 0.54 vs synthetic 1.5 at 0.35)."""
PINK_NOISE_UV = 5.0
"""1/f background (uV rms, all stages); 5 (was 8): at 8 its 16-30 Hz part alone (2.8 uV) exceeded the real
central N2 / N3 beta (2.0 / 1.8 uV rms, DREAMS)."""
WHITE_NOISE_UV = (1.5, 3.0)
"""Range of the subject's white (amplifier / electrode) noise level, uV rms over 0-fs/2."""


@dataclass
class SubjectTraits:
    """Subject-level variability (drawn once per subject, shared by the subject's nights)."""

    gain: float
    band_gain: dict[str, float]
    alpha_hz: float
    spindle_hz: float
    white_noise_uv: float
    artifact_scale: float
    cycle_minutes: float
    latency_minutes: float  # wake from the recording start to sleep onset (lights-off + sleep latency)
    final_wake_minutes: float = 40.0  # wake after the final awakening until the recording ends
    n3_scale: float = 1.0  # age-like: less N3 and smaller delta in older subjects (``delta_scale`` follows it)
    rem_scale: float = 1.0
    awakening_prob: float = 0.5  # an awakening at the end of a REM period
    delta_scale: float = 1.0  # age-like delta amplitude (follows n3_scale)
    arousal_scale: float = 1.0
    arousal_seconds: float = 14.9  # the subject's mean arousal duration (``AROUSAL_SECONDS``)
    eyes_closed_prob: float = 0.5  # share of wake spent with eyes closed
    mains_uv: float = 1.0  # line-noise amplitude
    channel_gain: dict[str, float] = field(default_factory=dict)  # electrode/impedance gain per channel
    awakening_scale: float = 1.0  # times the mean awakening duration (age: more wake after sleep onset)
    age_years: float | None = None  # set for cohorts with an age structure (``with_cohort``)
    slow_wave_scale: float = 1.0  # cohort age / sex effect on the NREM slow waves (``SLOW_WAVE_STAGES`` delta)
    sex: str | None = None

    @classmethod
    def sample(cls, rng: np.random.Generator) -> SubjectTraits:
        return cls(
            gain=float(rng.lognormal(0.0, 0.25)),
            band_gain={
                name: float(rng.lognormal(0.0, RHYTHM_SUBJECT_GAIN_SD if name in RHYTHMS else 0.3))
                for name in [r for r in RHYTHMS if r not in RHYTHM_GAIN_OF] + list(TRANSIENTS)
            },
            alpha_hz=float(rng.uniform(8.5, 11.5)),
            spindle_hz=float(rng.uniform(11.5, 14.5)),
            white_noise_uv=float(rng.uniform(*WHITE_NOISE_UV)),
            artifact_scale=float(rng.uniform(0.5, 2.0)),
            cycle_minutes=float(rng.uniform(80.0, 110.0)),
            latency_minutes=float(rng.uniform(35.0, 60.0)),
            final_wake_minutes=float(rng.uniform(35.0, 60.0)),
            n3_scale=float(rng.lognormal(0.0, 0.3)),
            rem_scale=float(rng.lognormal(0.0, 0.12)),
            awakening_prob=float(rng.uniform(0.6, 0.95)),
        ).with_age_like_traits(rng)

    def with_age_like_traits(self, rng: np.random.Generator) -> SubjectTraits:
        """Draw the traits added for subject-level variation (kept out of :meth:`sample`'s first draws)."""
        self.delta_scale = float(self.n3_scale**0.6 * rng.lognormal(0.0, 0.1))
        self.arousal_scale = float(rng.lognormal(0.0, 0.4))
        self.eyes_closed_prob = float(rng.uniform(0.3, 0.7))
        self.mains_uv = float(rng.uniform(0.0, 3.0))
        self.channel_gain = {
            c: float(rng.lognormal(0.0, 0.15))
            for c in list(EEG_TOPOGRAPHY) + list(EOG_CHANNELS) + list(EMG_CHANNELS) + [SECOND_EOG]
        }
        mean, sd = AROUSAL_SECONDS["mean"], AROUSAL_SECONDS["sd"]
        self.arousal_seconds = float(np.clip(rng.normal(mean, sd), mean - 3 * sd, mean + 3 * sd))
        return self

    def with_cohort(self, cohort: str, rng: np.random.Generator) -> SubjectTraits:
        """Traits of a subject of ``cohort`` (:data:`COHORTS`; "young-adult" leaves them unchanged),
        drawn from ``rng`` (its own stream, so the base traits keep their values). "sleep-edf-sc": an
        age from the SC range and a sex from its female share, then the age and sex effects of
        :data:`SC_AGE_EFFECTS` (less N3 and smaller slow waves, longer awakenings, more arousals with
        age; larger low-frequency amplitude in women) and the SC recorder's noise / artifact profile."""
        if cohort not in COHORTS:
            raise ValueError(f"synth: unknown cohort '{cohort}'; available: {', '.join(COHORTS)}")
        if cohort == "young-adult":
            return self
        low, high = SLEEP_EDF_SC_SUBJECTS["age_range"]
        self.age_years = float(rng.uniform(low, high))
        self.sex = "F" if rng.random() < SC_FEMALE_SHARE else "M"
        decades = max(0.0, self.age_years - SC_AGE_EFFECTS["reference_age"]) / 10.0
        self.n3_scale *= max(SC_AGE_EFFECTS["n3_floor"], 1.0 - SC_AGE_EFFECTS["n3_loss_per_decade"] * decades)
        amplitude = max(SC_AGE_EFFECTS["n3_floor"], 1.0 - SC_AGE_EFFECTS["delta_loss_per_decade"] * decades)
        self.slow_wave_scale *= amplitude * SC_AGE_EFFECTS["delta_by_sex"][self.sex]
        self.awakening_scale *= 1.0 + SC_AGE_EFFECTS["awakening_gain_per_decade"] * decades
        self.awakening_prob = min(0.98, self.awakening_prob + SC_AGE_EFFECTS["awakening_prob_per_decade"] * decades)
        self.arousal_scale *= arousal_index_ratio(self.age_years)
        self.white_noise_uv = float(rng.uniform(*SC_WHITE_NOISE_UV))
        self.artifact_scale *= SC_ARTIFACT_SCALE
        return self


COHORTS = ("young-adult", "sleep-edf-sc")
"""Subject populations: the generator's base traits (young-adult-like; the PhysioNet-format nights) and
the Sleep-EDF SC cohort (the Sleep-EDF-format nights of ``synth_psg``)."""
SC_FEMALE_SHARE = 40 / 74
"""Females among the SC study's subjects: 40 females and 34 males aged 26-101 (Mourtazaev, Kemp,
Zwinderman, Kamphuisen, "Age and gender affect different characteristics of slow waves in the sleep
EEG", Sleep 18(7):557-564, 1995; abstract retrieved; the study the Sleep-EDF SC recordings come from)."""
SC_AGE_EFFECTS = {
    "reference_age": 25.0,
    "n3_loss_per_decade": 0.12,
    "delta_loss_per_decade": 0.08,
    "n3_floor": 0.15,
    "delta_by_sex": {"F": 1.18, "M": 0.84},
    "awakening_gain_per_decade": 0.35,
    "awakening_prob_per_decade": 0.03,
}
"""Age and sex effects of the SC cohort, per decade above 25 y. DIRECTIONS are published: in adults
slow-wave sleep % decreases and wake after sleep onset increases with age (Ohayon, Carskadon,
Guilleminault, Vitiello, Sleep 27(7):1255-1273, 2004, meta-analysis of 65 studies, 3,577 subjects;
abstract retrieved); in the SC study itself low-frequency (0.2-2 Hz) amplitude decreased substantially
with age and was 40 % larger in women than in men (Mourtazaev et al. 1995, above: F / M = 1.18 / 0.84 =
1.40 here); middle-aged (62 y) vs young (22 y) men: less SWS, more stage 1 and wake after sleep onset,
most in cycles 3-4 (Landolt, Dijk, Achermann, Borbely, Brain Res 738(2):205-212, 1996; abstract
retrieved). The MAGNITUDES (-12 % N3 and -8 % slow-wave amplitude per decade, floor 15 %; awakenings
+35 % longer and +3 points likelier per decade) are ASSUMPTIONS: the per-decade slopes were not in the
retrieved abstracts. Not tuned on any SSL / staging score."""
SLOW_WAVE_STAGES = (N2, N3)
"""Stages whose delta rhythm carries the cohort's age / sex effect (``SubjectTraits.slow_wave_scale``):
the SC study measured the sleep slow waves (Mourtazaev et al. 1995, above), not wake or N1 / REM delta.
Applied to every stage's delta (before), the effect left the SC cohort's wake and N1 with a relative
delta of 0.51 / 0.39 on the central lead against the real DREAMS 0.63 / 0.59 (young-adult cohort 0.72 /
0.57; now SC 0.73 / 0.54; per-person medians, 6 synthetic subjects per cohort, 8 excerpts;
``scripts/reproduce/eeg_generator/compare_wake_n1.py``)."""
SC_WHITE_NOISE_UV = WHITE_NOISE_UV
"""Range of an SC subject's white (amplifier / electrode) noise, uV rms over 0-fs/2: the base cohort's.
It was 2.5-5 uV (an ASSUMPTION: SC nights were recorded at home on ambulatory cassette recorders in
1987-1991, Kemp et al., IEEE-BME 47(9):1185-1194, 2000; no published noise floor was found), which the
real central lead refutes: with it the SC cohort's relative beta was 2-3x the real DREAMS one in every
stage (per-person medians, N2 0.030 vs 0.012, N1 0.086 vs 0.032, W 0.10 vs 0.047) and a classifier
trained on SC nights staged the real excerpts at kappa 0.21-0.24 over three draws (now 0.33-0.37, with
the slow-wave and arousal changes; young-adult cohort 0.45-0.49, real leave-one-excerpt-out ceiling
0.37-0.40; ``scripts/reproduce/eeg_generator/compare_wake_n1.py``)."""
SC_ARTIFACT_SCALE = 1.5
"""Movement-burst / sweat rate multiplier of SC subjects (home ambulatory recordings over a day-night
period): an ASSUMPTION (no published artifact rate; see ``reference.ARTIFACT_RATES``)."""


def arousal_index_ratio(age_years: float) -> float:
    """Arousal index of ``age_years``' group over the 20-39 y group's (Boselli et al. 1998,
    ``reference.AROUSAL_INDEX_PER_HOUR``: 14.7 / 17.8 / 27.1 per hour at 20-39 / 40-59 / >= 60 y)."""
    index = AROUSAL_INDEX_PER_HOUR
    group = "20-39 y" if age_years < 40 else "40-59 y" if age_years < 60 else ">=60 y"
    return index[group] / index["20-39 y"]


# ----------------------------------------------------------------------------- hypnogram

EPOCHS_PER_MINUTE = 60.0 / EPOCH_SECONDS
N3_MINUTES = (38.0, 28.0, 15.0, 9.0)
"""N3 per NREM-REM cycle (minutes, times the subject's ``n3_scale``); none from cycle 5 on: slow-wave
sleep is concentrated in the first cycles (Carskadon & Dement, "Normal human sleep: an overview").
Cycles 3-4 raised from 12 / 5 min: the 20 real Sleep-EDF SC nights hold 9.8 ± 14 min
of N3 in the last third of the sleep period (synthetic was 4.4) and an N3 share of 0.149 (was 0.135;
``reference.SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE``)."""
REM_MINUTES = (11.0, 19.0, 25.0, 30.0, 32.0, 34.0)
"""REM per cycle (minutes, times ``rem_scale``): REM periods lengthen across the night."""
BOUT_MINUTES = {N1: (2.5, 1.0), N2: (8.0, 1.0), N3: (5.0, 0.35), REM: (11.0, 1.0)}
"""Stage bouts inside a cycle segment: gamma-distributed durations (mean minutes, shape). Measured
against the 20 real Sleep-EDF SC hypnograms (``reference.SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE``):
real bouts are short and skewed (median / mean minutes N2 2.5 / 5.3, N3 1 / 3.7, REM 5.5 / 7.5; 47 % of
real N3 bouts last one epoch: N3 flickers with N2), so shapes <= 1 replace the former shapes 1.5-2.5
(means 8 / 7 / 16 min), which gave N3 bouts of median 4.5 min (KS 0.56) and REM of 9.5 min (KS 0.28)."""
AWAKENING_MINUTES = (12.0, 1.5)
"""Awakenings at the end of a REM period: gamma-distributed duration (mean minutes, shape)."""
INTERRUPTION = {  # what interrupts a bout of each stage: (stage, probability) of the first interrupting epoch
    N1: ((W, 0.6), (N2, 0.4)),
    N2: ((W, 0.2), (N1, 0.8)),
    N3: ((N2, 0.95), (W, 0.05)),
    REM: ((W, 0.25), (N1, 0.75)),
}
"""N3 is interrupted by N2 (95 %, was 85 %): in the real nights N3 alternates with N2 (one-epoch N3
bouts), and a wake interruption adds W/NREM/REM transitions the real nights do not have (6.0 / h)."""
INTERRUPTION_EPOCHS = {W: (1, 2), N1: (1, 3), N2: (1, 2)}
"""Length (epochs, inclusive range) of an interruption by each stage: N1 interruptions last 1-3 epochs
(were 1-2, like the others): real N1 bouts average 1.42 min (synthetic was 0.86) and the real N1 share
is 0.080 (was 0.059)."""


def _gamma_epochs(rng: np.random.Generator, mean_minutes: float, shape: float) -> int:
    """A gamma-distributed duration (mean ``mean_minutes``, ``shape``) in whole epochs, at least 1."""
    return max(1, int(round(rng.gamma(shape, mean_minutes / shape) * EPOCHS_PER_MINUTE)))


def _segment(stage: int, length: int, rng: np.random.Generator) -> list[int]:
    """``length`` epochs of ``stage`` split into gamma bouts separated by brief interruptions (a 1-2
    epoch awakening or lighter stage, then back): ``length`` labels."""
    out: list[int] = []
    while len(out) < length:
        out += [stage] * _gamma_epochs(rng, *BOUT_MINUTES[stage])
        if len(out) >= length:
            break
        choices, probs = zip(*INTERRUPTION[stage])
        first = int(rng.choice(choices, p=np.asarray(probs) / sum(probs)))
        low, high = INTERRUPTION_EPOCHS[first]
        out += [first] * int(rng.integers(low, high + 1))
        if first == W:  # an awakening is followed by light sleep before the stage resumes
            out += [N1] * int(rng.integers(0, 3))
    return out[:length]


def synth_hypnogram(n_epochs: int, traits: SubjectTraits, rng: np.random.Generator) -> np.ndarray:
    """Semi-Markov night: ``(n_epochs,)`` labels 0..4.

    Wake from the recording start through lights-off and sleep latency (``latency_minutes``), a
    W/N1 sleep-onset period, then NREM-REM cycles of ``cycle_minutes`` (times a per-cycle jitter):
    N1 entry, N2 descent, N3 (:data:`N3_MINUTES`, early cycles only), N2 ascent, REM
    (:data:`REM_MINUTES`, lengthening), and sometimes an awakening at the end of a REM period. Each
    segment is split into gamma-distributed stage bouts (:data:`BOUT_MINUTES`) separated by brief
    arousals (:data:`INTERRUPTION`). After the final awakening, wake until the recording ends
    (``final_wake_minutes``, at most a tenth of a short recording; the latency at most a sixth), as in
    Sleep-EDF SC files.
    """
    final_wake = max(2, min(int(traits.final_wake_minutes * EPOCHS_PER_MINUTE), n_epochs // 10))
    sleep_end = n_epochs - final_wake
    latency = min(int(traits.latency_minutes * EPOCHS_PER_MINUTE), max(2, n_epochs // 6))  # short recordings: short
    stages: list[int] = [W] * min(latency, sleep_end)
    # sleep onset: N1 with a brief return to wake
    stages += [N1] * _gamma_epochs(rng, 2.5, 2.0) + [W] * int(rng.integers(0, 3)) + [N1] * int(rng.integers(1, 4))
    cycle = 0
    while len(stages) < sleep_end:
        minutes = traits.cycle_minutes * float(rng.lognormal(0.0, 0.08))
        remaining = (sleep_end - len(stages)) / EPOCHS_PER_MINUTE
        if remaining < 1.5 * minutes:  # the last cycle fills the rest of the night (and ends in REM)
            minutes = remaining
        n3 = (N3_MINUTES[cycle] if cycle < len(N3_MINUTES) else 0.0) * traits.n3_scale
        rem = REM_MINUTES[min(cycle, len(REM_MINUTES) - 1)] * traits.rem_scale * float(rng.lognormal(0.0, 0.15))
        n1 = 0.0 if cycle == 0 else float(rng.gamma(2.0, 1.0))
        n2 = max(minutes - n3 - rem - n1, min(12.0, 0.5 * minutes))
        descent = n2 * (0.6 if n3 > 0 else 0.5)
        for stage, length in ((N1, n1), (N2, descent), (N3, n3), (N2, n2 - descent), (REM, rem)):
            epochs = int(round(length * EPOCHS_PER_MINUTE))
            if epochs > 0:
                stages += _segment(stage, epochs, rng)
        if rng.random() < traits.awakening_prob:  # awakening at the end of a REM period
            stages += [W] * _gamma_epochs(rng, AWAKENING_MINUTES[0] * traits.awakening_scale, AWAKENING_MINUTES[1])
        cycle += 1
    labels = np.full(n_epochs, W, dtype=np.int64)
    labels[:sleep_end] = np.asarray(stages[:sleep_end], dtype=np.int64)
    return labels


# ----------------------------------------------------------------------------- signals


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


@dataclass
class SyntheticNight:
    """One synthetic night: signals (uV) per channel at ``fs`` and the true per-epoch stages."""

    signals: dict[str, np.ndarray]
    fs: float
    stages: np.ndarray
    meta: dict = field(default_factory=dict)


def spatial_correlation(channels: list[str]) -> np.ndarray:
    """``(c, c)`` correlation ``exp(-distance / SPATIAL_DECAY)`` between EEG derivations."""
    positions = np.array([{**EEG_POSITION, **ELECTRODE_POSITION}[c] for c in channels]).reshape(len(channels), 2)
    distance = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    return np.exp(-distance / SPATIAL_DECAY)


def _correlated(mixing: np.ndarray, white: np.ndarray) -> np.ndarray:
    """Unit-variance signals ``(c, m)`` with correlation ``mixing @ mixing.T`` from white ``(c, m)``."""
    return (mixing @ white).astype(np.float32)


def full_night_excerpt(stages: np.ndarray, compress: int, crop_wake_minutes: float = 30.0) -> np.ndarray:
    """A ``compress``-times shorter night with the stage proportions of the full night ``stages``
    as the readers crop it: the span the reader keeps (``crop_wake_minutes`` of wake around sleep)
    with every ``compress``-th epoch. ``compress = 1`` returns ``stages`` unchanged."""
    if compress <= 1:
        return stages
    from .preprocess import wake_crop_mask

    kept = np.flatnonzero(wake_crop_mask(stages, crop_wake_minutes))
    return stages[kept[0] : kept[-1] + 1][::compress].copy()


def eyes_closed_epochs(stages: np.ndarray, traits: SubjectTraits, rng: np.random.Generator) -> np.ndarray:
    """``(e,)`` bool: wake epochs with eyes closed, in runs of gamma-distributed length (mean 3 min);
    the last 5 minutes before sleep onset are eyes closed. False outside wake."""
    closed = np.zeros(stages.size, dtype=bool)
    i = 0
    while i < stages.size:
        length = _gamma_epochs(rng, 3.0, 1.5)
        closed[i : i + length] = rng.random() < traits.eyes_closed_prob
        i += length
    sleep = np.flatnonzero(stages != W)
    if sleep.size:
        closed[max(0, sleep[0] - int(5 * EPOCHS_PER_MINUTE)) : sleep[0]] = True
    return closed & (stages == W)


def _per_epoch(table: tuple[float, ...], stages: np.ndarray, closed: np.ndarray, name: str) -> np.ndarray:
    """A per-stage ``table`` as per-epoch values ``(e,)``, wake scaled by the eyes-open/closed factors."""
    values = np.asarray(table, dtype=float)[stages]
    wake = stages == W
    values[wake & closed] *= EYES_CLOSED.get(name, 1.0)
    values[wake & ~closed] *= EYES_OPEN.get(name, 1.0)
    return values


def _arousal_onsets(
    stages: np.ndarray, traits: SubjectTraits, fs: float, rng: np.random.Generator, per_hour: float = AROUSALS_PER_HOUR
) -> list[tuple[int, int]]:
    """Brief arousals ``[(start sample, length), ...]`` inside sleep epochs (no stage change),
    ``per_hour`` x ``arousal_scale`` per hour of sleep; durations :data:`AROUSAL_SECONDS` around the
    subject's ``arousal_seconds``."""
    spe = int(EPOCH_SECONDS * fs)
    sleep = np.flatnonzero(stages != W)
    count = rng.poisson(per_hour * traits.arousal_scale * sleep.size * EPOCH_SECONDS / 3600.0)
    out = []
    for e in rng.choice(sleep, size=min(count, sleep.size), replace=False) if sleep.size else ():
        spread = AROUSAL_SECONDS["spread"]
        seconds = max(AROUSAL_MIN_SECONDS, rng.uniform(1.0 - spread, 1.0 + spread) * traits.arousal_seconds)
        length = min(int(seconds * fs), spe - 1)
        out.append((int(e) * spe + int(rng.integers(0, spe - length)), length))
    return out


def side_stream(rng: np.random.Generator, key: int) -> np.random.Generator:
    """An independent generator derived from ``rng``'s seed without drawing from ``rng`` (so the
    draws of ``rng`` keep their values when a feature adds randomness): ``key`` names the feature
    (:data:`SIDE_STREAMS`). ``rng`` must come from ``np.random.default_rng(seed)``."""
    seed = rng.bit_generator.seed_seq
    if not isinstance(seed, np.random.SeedSequence):
        raise ValueError("synth: the night generator must be np.random.default_rng(seed) (it has no seed sequence)")
    return np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 1000 + key)))


SIDE_STREAMS = {"second_eog": 1, "day_padding": 2, "extra_arousals": 3}
"""Keys of :func:`side_stream` per feature added after the demo's measurements started."""


def eeg_sources(derivations: list[str]) -> list[str]:
    """The generated sources of ``derivations``: a referential derivation itself, a bipolar one's two
    electrodes (:data:`BIPOLAR_DERIVATIONS`), each once, in order of first use."""
    sources: list[str] = []
    for name in derivations:
        for source in BIPOLAR_DERIVATIONS.get(name, (name,)):
            if source not in sources:
                sources.append(source)
    return sources


def derivation_matrix(sources: list[str], derivations: list[str]) -> np.ndarray:
    """``(c, s)`` float32 map from sources to derivations: 1 for a referential derivation's own row,
    +1 / -1 for a bipolar derivation's first / second electrode."""
    matrix = np.zeros((len(derivations), len(sources)), dtype=np.float32)
    for row, name in enumerate(derivations):
        if name in BIPOLAR_DERIVATIONS:
            first, second = BIPOLAR_DERIVATIONS[name]
            matrix[row, sources.index(first)], matrix[row, sources.index(second)] = 1.0, -1.0
        else:
            matrix[row, sources.index(name)] = 1.0
    return matrix


def synth_night(
    channels: list[str],
    hours: float,
    fs: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    mains_hz: float = 50.0,
    stages: np.ndarray | None = None,
) -> SyntheticNight:
    """Generate one night: every channel ``(n,)`` in uV with ``n = epochs * 30 s * fs``.

    The hypnogram is that of a ``hours``-long night; ``compress > 1`` writes a shorter excerpt with
    the full night's stage proportions (:func:`full_night_excerpt`: every ``compress``-th epoch of
    the span the readers keep), for quick CPU demos. Bipolar derivations (:data:`BIPOLAR_DERIVATIONS`)
    are the difference of their electrodes' physiological signals (rhythms, transients, ocular
    leakage, arousals); artifacts and noise are then added per derivation. Background rhythms and their per-epoch
    amplitude jitter are correlated across derivations by :func:`spatial_correlation` (no
    component is shared identically by all channels). Wake epochs are eyes open or closed
    (:func:`eyes_closed_epochs`); brief arousals, movement, electrode pops, sweat drifts and line
    noise at ``mains_hz`` (omitted when above 0.45 ``fs``) are added. ``meta``: ``eyes_closed (e,)``,
    ``phasic_rem (e,)``, ``arousals [(start, length)]``, ``sweat_episodes``, ``movement_epochs``,
    ``movements [(start, length)]``, ``pops [(channel, start, step uV)]``, ``events`` (onset samples
    per transient and eye movement), ``eye_movement_signs`` (saccades / slow rolls: +1 rightward;
    blinks always move the eyes up, their drawn sign is unused), ``mains_hz`` (None when omitted).
    ``stages``: use this hypnogram ``(e,)`` instead of drawing one (``hours`` and ``compress`` are
    then ignored; e.g. wake-only padding).
    """
    if stages is None:
        stages = full_night_excerpt(synth_hypnogram(int(round(hours * 3600 / EPOCH_SECONDS)), traits, rng), compress)
    n_epochs = stages.size
    n = int(n_epochs * EPOCH_SECONDS * fs)
    eeg = [c for c in channels if c in EEG_TOPOGRAPHY]
    known_eog = list(EOG_CHANNELS) + [SECOND_EOG]
    unknown = [c for c in channels if c not in EEG_TOPOGRAPHY and c not in known_eog and c not in EMG_CHANNELS]
    if unknown:
        raise ValueError(
            f"synth-psg: no synthetic model for channel(s) {unknown}; known: "
            f"{sorted(EEG_TOPOGRAPHY) + known_eog + list(EMG_CHANNELS)}"
        )
    closed = eyes_closed_epochs(stages, traits, rng)
    derivations, eeg = eeg, eeg_sources(eeg)  # physiology on the sources, artifacts on the derivations
    topo = np.array([{**EEG_TOPOGRAPHY, **ELECTRODE_TOPOGRAPHY}[c] for c in eeg]).reshape(len(eeg), 3)  # (s, 3)
    mixing = np.linalg.cholesky(spatial_correlation(eeg) + 1e-9 * np.eye(len(eeg))) if eeg else np.zeros((0, 0))
    jitter = lambda: rng.lognormal(0.0, 0.35, size=n_epochs)  # noqa: E731 - per-epoch amplitude jitter (EOG/EMG)
    out = np.zeros((len(eeg), n), dtype=np.float32)
    for name, rhythm in RHYTHMS.items():
        band = rhythm.band if name != "alpha" else (traits.alpha_hz + rhythm.band[0], traits.alpha_hz + rhythm.band[1])
        mixed = _correlated(
            mixing, _band_noise(n, fs, band, rng, len(eeg), rhythm.slope, soft=True)
        )  # (c, n), spatially decaying correlation
        channel_jitter = np.exp(
            RHYTHM_EPOCH_JITTER * _correlated(mixing, rng.standard_normal((len(eeg), n_epochs)))
        )  # (c, e)
        scale = traits.band_gain[RHYTHM_GAIN_OF.get(name, name)] * (traits.delta_scale if name == "delta" else 1.0)
        amp = _per_epoch(rhythm.amplitude, stages, closed, name)[None] * channel_jitter * scale
        if name == "delta" and traits.slow_wave_scale != 1.0:
            amp = amp * np.where(np.isin(stages, SLOW_WAVE_STAGES), traits.slow_wave_scale, 1.0)[None]
        gains = topo @ np.asarray(rhythm.topography) / np.asarray(rhythm.topography).max()
        for c in range(len(eeg)):
            out[c] += gains[c] * _envelope(amp[c], n, fs) * mixed[c]
    templates = _templates(fs, traits)
    events: dict[str, np.ndarray] = {}  # event onsets (template start sample) per transient / eye movement
    for name, transient in TRANSIENTS.items():
        train = _event_train(np.asarray(transient.rate_per_min)[stages] * traits.band_gain[name], n, fs, rng)
        events[name] = np.flatnonzero(train)
        if name == "spindle":  # durations 0.5-2 s: three widths
            width = rng.integers(0, 3, size=n)
            wave = sum(oaconvolve(train * (width == i), templates[f"spindle{i}"])[:n] for i in range(3))
        else:
            wave = oaconvolve(train, templates[name])[:n]
        gains = topo @ np.asarray(transient.topography) / max(transient.topography)
        out += gains[:, None] * (wave * transient.amplitude)[None] * rng.lognormal(0.0, 0.15, size=(len(eeg), 1))
    out += PINK_NOISE_UV * _pink_noise(n, fs, rng, len(eeg))
    out *= traits.gain

    eog = np.zeros(n)
    gaze = {"horizontal": np.zeros(n), "vertical": np.zeros(n)}  # shared by both eyes (conjugate)
    eye_signs: dict[str, np.ndarray] = {}
    phasic_epochs = (rng.random(n_epochs) < PHASIC_REM_SHARE) & (stages == REM)
    phasic = np.where(phasic_epochs, 0.8 / PHASIC_REM_SHARE, 0.2)  # (e,) REM bursts; mean rate ~kept
    for name, rates in EOG_EVENTS.items():
        per_epoch = _per_epoch(rates, stages, closed, name)
        if name == "saccade":  # rapid eye movements come in bursts (phasic REM); same mean rate
            per_epoch = np.where(stages == REM, per_epoch * phasic, per_epoch)
        train = _event_train(per_epoch, n, fs, rng) * rng.choice([-1.0, 1.0], size=n)
        events[name] = np.flatnonzero(train)
        eye_signs[name] = np.sign(train[events[name]])
        movement = oaconvolve(train, templates[name])[:n] * (120.0 if name == "blink" else 80.0)
        eog += movement  # the ocular potential that leaks into frontal EEG (below)
        if name == "blink":  # the eyes roll up during a blink (Bell's phenomenon), whatever the drawn sign
            gaze["vertical"] += np.abs(movement)
        else:  # saccades / rapid and slow rolling eye movements: horizontal, drawn direction
            gaze["horizontal"] += movement
    frontal = topo[:, 0] if len(eeg) else np.zeros(0)
    out += 0.12 * frontal[:, None] * eog[None]  # ocular leakage into frontal EEG
    emg_envelope = _per_epoch(EMG_AMPLITUDE, stages, closed, "emg") * jitter()
    emg = _band_noise(n, fs, (10.0, 45.0), rng, 1)[0] * _envelope(emg_envelope, n, fs)

    # Brief arousals: alpha/beta burst (posterior > central > frontal) and chin EMG, no stage change;
    # the first ones from the main stream, the rest (up to the published index) from their own.
    posterior = topo @ np.array([0.5, 0.8, 1.0]) if len(eeg) else np.zeros(0)
    arousals = _arousal_onsets(stages, traits, fs, rng)
    for start, length in arousals:
        _add_arousal(out, emg, start, length, posterior, traits, fs, rng)
    extra_rng = side_stream(rng, SIDE_STREAMS["extra_arousals"])
    extra = _arousal_onsets(stages, traits, fs, extra_rng, per_hour=EXTRA_AROUSALS_PER_HOUR)
    for start, length in extra:
        _add_arousal(out, emg, start, length, posterior, traits, fs, extra_rng)
    arousals = arousals + extra
    out = derivation_matrix(eeg, derivations) @ out  # (c, s) @ (s, n): bipolar derivations as differences
    eeg = derivations

    # Artifacts: movement bursts (all channels), electrode pops (one channel), sweat, drifts, mains, white noise.
    artifact_epochs = np.flatnonzero(rng.random(n_epochs) < np.asarray(ARTIFACT_PROB)[stages] * traits.artifact_scale)
    spe = int(EPOCH_SECONDS * fs)
    movements, ocular_artifact = [], np.zeros(n)
    for e in artifact_epochs:
        length = int(rng.uniform(1.0, 6.0) * fs)
        start = e * spe + int(rng.integers(0, spe - length))
        burst = _band_noise(length, fs, (0.5, 8.0), rng, 1)[0] * rng.uniform(40.0, 150.0) * np.hanning(length)
        out[:, start : start + length] += burst[None] * rng.uniform(0.5, 1.5, size=(len(eeg), 1))
        emg[start : start + length] += 3 * burst
        ocular_artifact[start : start + length] += burst
        movements.append((start, length))
    pops = []  # (EEG channel, start sample, step in uV)
    for _ in range(rng.poisson(n_epochs / EPOCHS_PER_POP)) if len(eeg) else ():
        channel, start = int(rng.integers(len(eeg))), int(rng.integers(0, n - int(fs)))
        step = rng.uniform(-80, 80)
        out[channel, start:] += step * np.exp(-np.arange(n - start) / (0.5 * fs))
        pops.append((eeg[channel], start, float(step)))
    sweat = []  # slow (0.1-0.5 Hz) high-amplitude sways of a few minutes, later in the night
    for _ in range(rng.poisson(SWEAT_PER_1000_EPOCHS * traits.artifact_scale * n_epochs / 1000.0)) if len(eeg) else ():
        length = min(n, int(rng.uniform(2.0, 8.0) * 60 * fs))
        start = int(n - length - rng.integers(0, max(1, (n - length) // 2 + 1)))
        sway = _band_noise(length, fs, (0.1, 0.5), rng, 1)[0] * rng.uniform(30.0, 100.0) * np.hanning(length)
        out[:, start : start + length] += sway[None] * rng.uniform(0.3, 1.0, size=(len(eeg), 1))
        sweat.append((start, length))
    drift = np.cumsum(rng.standard_normal((len(eeg) + 2, n // int(fs) + 2)), axis=1) * 2.0
    drift = np.stack([np.interp(np.arange(n) / fs, np.arange(d.size), d) for d in drift])
    out += drift[: len(eeg)] + traits.white_noise_uv * rng.standard_normal((len(eeg), n), dtype=np.float32)
    if mains_hz < 0.45 * fs:
        out += traits.mains_uv * np.sin(2 * np.pi * mains_hz * np.arange(n) / fs + rng.uniform(0, 2 * np.pi))[None]
    # what every EOG derivation shares besides the eyes: movement bursts and frontal EEG (in phase)
    eog_common = ocular_artifact + 0.3 * (out[0] if len(eeg) else 0.0)
    eog_noise = drift[-2] + 5.0 * rng.standard_normal(n)  # the written derivation's drift and noise
    emg += 2.0 * rng.standard_normal(n)
    eog_derivations = [c for c in channels if c in EOG_GAZE_SENSITIVITY]
    second = side_stream(rng, SIDE_STREAMS["second_eog"]) if len(eog_derivations) > 1 else None

    signals: dict[str, np.ndarray] = {}
    for c in channels:
        if c in EEG_TOPOGRAPHY:
            signals[c] = out[eeg.index(c)] * traits.channel_gain.get(c, 1.0)
        elif c in EOG_GAZE_SENSITIVITY:
            horizontal, vertical = EOG_GAZE_SENSITIVITY[c]
            noise = eog_noise if c == eog_derivations[0] else _eog_noise(n, fs, second)
            signals[c] = (
                horizontal * gaze["horizontal"] + vertical * gaze["vertical"] + eog_common + noise
            ) * traits.channel_gain.get(c, 1.0)
        else:
            signals[c] = emg * traits.channel_gain.get(c, 1.0)
    meta = {
        "eyes_closed": closed,
        "phasic_rem": phasic_epochs,
        "arousals": arousals,
        "sweat_episodes": sweat,
        "movement_epochs": artifact_epochs,
        "movements": movements,
        "pops": pops,
        "events": events,
        "eye_movement_signs": eye_signs,
        "mains_hz": mains_hz if mains_hz < 0.45 * fs else None,
    }
    return SyntheticNight(signals=signals, fs=fs, stages=stages, meta=meta)


def _add_arousal(
    out: np.ndarray,
    emg: np.ndarray,
    start: int,
    length: int,
    posterior: np.ndarray,
    traits: SubjectTraits,
    fs: float,
    rng: np.random.Generator,
) -> None:
    """Add one arousal in place: an alpha + beta burst to the EEG ``out (c, n)`` (weights
    ``posterior (c,)``) and a chin-EMG burst to ``emg (n,)``, ``length`` samples from ``start``."""
    burst = (
        _band_noise(length, fs, (traits.alpha_hz - 1.5, traits.alpha_hz + 1.5), rng, 1)[0] * AROUSAL_ALPHA_UV
        + _band_noise(length, fs, (16.0, 30.0), rng, 1)[0] * AROUSAL_BETA_UV
    ) * np.hanning(length)
    out[:, start : start + length] += posterior[:, None] * burst[None] * traits.gain
    emg[start : start + length] += _band_noise(length, fs, (10.0, 45.0), rng, 1)[0] * 12.0 * np.hanning(length)


def _eog_noise(n: int, fs: float, rng: np.random.Generator) -> np.ndarray:
    """Electrode drift (random walk, 1-s knots) and white noise of an extra EOG derivation ``(n,)``."""
    walk = np.cumsum(rng.standard_normal(n // int(fs) + 2)) * 2.0
    return np.interp(np.arange(n) / fs, np.arange(walk.size), walk) + 5.0 * rng.standard_normal(n)


# ----------------------------------------------------------------------------- writers


DEFAULT_START = dt.datetime(1989, 4, 24, 22, 0, 0)
"""Start of synthetic recordings (night ``k`` of subject ``s`` starts ``3 s + k`` days later)."""


def write_edf(
    path: Path,
    signals: dict[str, tuple[np.ndarray, float]],
    annotations: list[tuple[float, float, str]] | None = None,
    record_seconds: float = 1.0,
    start: dt.datetime = DEFAULT_START,
    patient: str = "X",
    recording_additional: str = "",
) -> None:
    """Write an EDF(+) file atomically; ``signals``: label -> (uV samples, sampling rate);
    ``record_seconds``: data-record duration (Sleep-EDF PSG files use 30 s); ``start`` and
    ``patient`` (a code without spaces) go into the header (a PSG and its hypnogram share them);
    ``recording_additional``: space-separated tokens appended to the header's recording field (the
    generator's provenance, ``provenance.provenance_text``)."""
    import edfio

    edf_signals = []
    for label, (data, fs) in signals.items():
        low, high = float(np.min(data)), float(np.max(data))
        pad = max(1.0, 0.05 * (high - low))
        edf_signals.append(
            edfio.EdfSignal(
                np.asarray(data, dtype=np.float64),
                sampling_frequency=fs,
                label=label,
                physical_dimension="uV",
                physical_range=(low - pad, high + pad),
            )
        )
    recording = edfio.Recording(startdate=start.date(), additional=tuple(recording_additional.split()))
    edf = edfio.Edf(
        edf_signals,
        patient=edfio.Patient(code=patient),
        recording=recording,
        starttime=start.time(),
        data_record_duration=record_seconds if edf_signals else None,
        annotations=[edfio.EdfAnnotation(o, d, t) for o, d, t in (annotations or [])],
    )
    tmp = temp_sibling(path, path.suffix)
    try:
        edf.write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


SLEEP_EDF_TEXT = {W: "Sleep stage W", N1: "Sleep stage 1", N2: "Sleep stage 2", REM: "Sleep stage R"}


def hypnogram_annotations(stages: np.ndarray, rng: np.random.Generator) -> list[tuple[float, float, str]]:
    """Run-length encode ``stages`` (``EXCLUDED`` -> "Movement time") into Sleep-EDF annotations;
    N3 epochs are written as R&K "Sleep stage 3" or "4" (both map back to N3)."""
    texts = []
    for s in stages:
        if s == N3:
            texts.append("Sleep stage 4" if rng.random() < 0.4 else "Sleep stage 3")
        elif s == EXCLUDED:
            texts.append("Movement time")
        else:
            texts.append(SLEEP_EDF_TEXT[int(s)])
    annotations: list[tuple[float, float, str]] = []
    for i, text in enumerate(texts):
        if annotations and annotations[-1][2] == text:
            onset, duration, _ = annotations[-1]
            annotations[-1] = (onset, duration + EPOCH_SECONDS, text)
        else:
            annotations.append((i * EPOCH_SECONDS, EPOCH_SECONDS, text))
    return annotations


SLEEP_EDF_SYNTH_CHANNELS = ["EEG Fpz-Cz", "EEG Pz-Oz", "EOG horizontal", "EMG submental"]
SC_RECORD_HOURS = 20.0
"""Length of Sleep-EDF SC recordings (day-night, mostly wake around the night; ~20 h per the issue,
not checked against the SC documentation): full synthetic Sleep-EDF nights are padded to it."""
SC_PADDING_BEFORE = 0.6
"""Share of the wake padding placed before the night (the rest after): an assumption."""
SC_MIN_NIGHT_HOURS = 6.0
"""Shortest night padded by default: from 6 h on, the wake before sleep and after the final
awakening is >= 35 min (``synth_hypnogram``), so the readers' 30-min crop (plus the 1-min filter
margin) lies inside the night and the padding is cropped away without touching a window."""


def default_record_hours(fmt: str, hours: float, compress: int) -> float | None:
    """Recording length when ``--record-hours`` is not given: :data:`SC_RECORD_HOURS` for full
    Sleep-EDF nights of at least :data:`SC_MIN_NIGHT_HOURS`, else None (no padding; a compressed
    excerpt's wake is all inside the readers' crop, so padding would add windows)."""
    if fmt == "sleep-edf" and compress == 1 and SC_MIN_NIGHT_HOURS <= hours < SC_RECORD_HOURS:
        return SC_RECORD_HOURS
    return None


def _wake_padding(
    night: SyntheticNight, epochs: int, traits: SubjectTraits, rng: np.random.Generator, mains_hz: float
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``epochs`` of wake (own random stream ``rng``) for every channel of ``night``, each clipped to
    the night's range (an amplifier's range; keeps the night's EDF scaling, hence its digital
    values), and their labels with "Movement time" epochs as in the night."""
    padding = synth_night(
        list(night.signals), 0.0, night.fs, traits, rng, mains_hz=mains_hz, stages=np.full(epochs, W, dtype=np.int64)
    )
    signals = {c: np.clip(x, night.signals[c].min(), night.signals[c].max()) for c, x in padding.signals.items()}
    labels = padding.stages.copy()
    labels[rng.random(epochs) < 0.03] = EXCLUDED
    return signals, labels


def write_sleep_edf_night(
    out_dir: Path,
    subject: int,
    night: int,
    hours: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    record_hours: float | None = None,
    provenance: str = "",
) -> tuple[list[Path], np.ndarray]:
    """SC4ssN E0-PSG.edf (EEG Fpz-Cz, Pz-Oz, EOG at 100 Hz; EMG submental as 1 Hz RMS envelope, as
    in Sleep-EDF SC) + SC4ssN E<scorer>-Hypnogram.edf. Returns the paths and the true stages.
    ``record_hours`` > the night: wake padding (``SC_PADDING_BEFORE`` of it before the night, the
    rest after; own random stream) makes an SC-length day-night recording; the header start moves
    back by the padding before, and the night's samples, labels and EDF scaling are unchanged."""
    fs = 100.0
    night_data = synth_night(SLEEP_EDF_SYNTH_CHANNELS, hours, fs, traits, rng, compress)
    stages = night_data.stages.copy()
    movement = np.flatnonzero((stages == W) & (rng.random(stages.size) < 0.03))
    stages[movement] = EXCLUDED  # scored as "Movement time"
    signals = dict(night_data.signals)
    pad = max(0, int(round((record_hours or 0.0) * 3600 / EPOCH_SECONDS)) - stages.size)
    before = int(round(SC_PADDING_BEFORE * pad))
    if pad:
        extra, labels = _wake_padding(night_data, pad, traits, side_stream(rng, SIDE_STREAMS["day_padding"]), 50.0)
        cut = before * int(EPOCH_SECONDS * fs)
        signals = {c: np.concatenate([extra[c][:cut], x, extra[c][cut:]]) for c, x in signals.items()}
        stages = np.concatenate([labels[:before], stages, labels[before:]])
    emg = signals["EMG submental"]
    emg_rms = np.sqrt((emg.reshape(-1, int(fs)) ** 2).mean(axis=1))
    name = f"SC4{subject:02d}{night + 1}"
    start = DEFAULT_START + dt.timedelta(days=3 * subject + night, seconds=-before * EPOCH_SECONDS)
    header = {"start": start, "patient": f"SC4{subject:02d}", "recording_additional": provenance}
    psg = out_dir / f"{name}E0-PSG.edf"
    hyp = out_dir / f"{name}E{'CHJMPRVW'[subject % 8]}-Hypnogram.edf"
    write_edf(
        psg,
        {
            "EEG Fpz-Cz": (signals["EEG Fpz-Cz"], fs),
            "EEG Pz-Oz": (signals["EEG Pz-Oz"], fs),
            "EOG horizontal": (signals["EOG horizontal"], fs),
            "EMG submental": (emg_rms, 1.0),
        },
        record_seconds=EPOCH_SECONDS,
        **header,
    )
    annotations = hypnogram_annotations(stages, rng)
    annotations.append((stages.size * EPOCH_SECONDS, 1800.0, "Sleep stage ?"))  # unscored tail, as in SC files
    write_edf(hyp, {}, annotations, **header)
    return [psg, hyp], stages


PHYSIONET_SYNTH_CHANNELS = list(PHYSIONET2018_EEG) + ["E1-M2", "Chin1-Chin2"]


def write_wfdb_record(
    out_dir: Path,
    record: str,
    signals: dict[str, np.ndarray],
    fs: float,
    stage_notes: list[tuple[int, str]],
    comments: list[str] | None = None,
    units: str = "uV",
) -> list[Path]:
    """Write ``record``.hea/.mat-free 16-bit ``.dat`` + ``.arousal`` (aux-note stage annotations);
    ``signals`` are given in ``units``."""
    import wfdb

    names = list(signals)
    p_signal = np.stack([signals[c] for c in names], axis=1)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        if "." in record:
            raise ValueError(f"synth-psg: WFDB record name {record!r} must not contain '.'")
        # the steps of wfdb.wrsamp for a physical signal (the same files, byte for byte), on a Record whose
        # range check is vectorized
        written = _fast_checked_record()(
            record_name=record,
            p_signal=p_signal,
            fs=fs,
            fmt=["16"] * len(names),
            units=[units] * len(names),
            sig_name=names,
            comments=comments or [],
        )
        written.set_d_features(do_adc=True)
        written.set_defaults()
        written.wrsamp(write_dir=tmp)
        samples = np.array([s for s, _ in stage_notes], dtype=np.int64)
        # wfdb.rdann drops a '"' note at sample 0 (it takes it for a header note), so that one is '+'.
        symbols = ["+" if s == 0 else '"' for s in samples]
        wfdb.wrann(record, "arousal", samples, symbol=symbols, aux_note=[t for _, t in stage_notes], write_dir=tmp)
        paths = []
        for suffix in (".dat", ".arousal", ".hea"):  # header last: a record is complete once it exists
            os.replace(Path(tmp) / f"{record}{suffix}", out_dir / f"{record}{suffix}")
            paths.append(out_dir / f"{record}{suffix}")
    return paths


@functools.cache
def _fast_checked_record() -> type:
    """A ``wfdb.Record`` whose pre-write check of a uniform 16-bit signal takes numpy's min / max per channel
    (wfdb 4's ``check_sig_cohesion`` takes Python's ``min`` / ``max`` over the samples: ~1 s of the ~5 s
    CPU a PhysioNet-format demo night costs); every other layout and format is wfdb's own check."""
    import wfdb

    class FastCheckedRecord(wfdb.Record):
        def check_sig_cohesion(self, write_fields: list[str], expanded: bool) -> None:
            signal = None if expanded else self.d_signal
            if write_fields or signal is None or any(fmt != "16" for fmt in self.fmt):
                return super().check_sig_cohesion(write_fields, expanded)
            if (self.sig_len, self.n_sig) != signal.shape:
                raise ValueError(f"WFDB: sig_len {self.sig_len} and n_sig {self.n_sig} do not match {signal.shape}")
            if signal.size and (signal.min() < -32768 or signal.max() > 32767):
                raise IndexError("WFDB: a channel holds values outside [-32768, 32767] for fmt 16")
            return None

    return FastCheckedRecord


def write_arousal_mat(path: Path, per_sample: np.ndarray) -> None:
    """Write a challenge-style ``-arousal.mat`` (MAT v7.3 / HDF5): ``data/sleep_stages/<stage>``
    one-hot uint8 vectors ``(1, n)`` from per-sample codes ``(n,)`` (``UNSCORED`` -> ``undefined``),
    and an all-zero ``data/arousals``."""
    import h5py

    from .stages import PHYSIONET2018_MAT_STAGES

    tmp = temp_sibling(path, path.suffix)
    try:
        with h5py.File(tmp, "w") as handle:
            data = handle.create_group("data")
            stages = data.create_group("sleep_stages")
            for name, code in PHYSIONET2018_MAT_STAGES.items():
                stages.create_dataset(name, data=(per_sample == code).astype(np.uint8)[None], compression="gzip")
            data.create_dataset("arousals", data=np.zeros((1, per_sample.size), dtype=np.uint8), compression="gzip")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_physionet2018_night(
    out_dir: Path,
    subject: int,
    night: int,
    hours: float,
    traits: SubjectTraits,
    rng: np.random.Generator,
    compress: int = 1,
    record_hours: float | None = None,
    provenance: str = "",
) -> tuple[list[Path], np.ndarray]:
    """WFDB record ``tr<NN>-<SSSS>`` at 200 Hz with the six EEG derivations, E1-M2 and Chin1-Chin2,
    plus ``.arousal`` aux notes W/N1/N2/N3/R at every stage change (and a few arousal notes).
    ``record_hours`` must be None: challenge records cover the night only (lights off to on)."""
    if record_hours is not None:
        raise ValueError("synth-psg: --record-hours applies to the sleep-edf format only")
    fs = 200.0
    night_data = synth_night(PHYSIONET_SYNTH_CHANNELS, hours, fs, traits, rng, compress, mains_hz=60.0)
    stages = night_data.stages
    spe = int(EPOCH_SECONDS * fs)
    change = np.flatnonzero(np.r_[True, stages[1:] != stages[:-1]])
    text = {W: "W", N1: "N1", N2: "N2", N3: "N3", REM: "R"}
    notes = [(int(i * spe), text[int(stages[i])]) for i in change]
    for i in rng.choice(stages.size, size=min(3, stages.size), replace=False):  # arousal notes are not stages
        notes += [(int(i * spe + spe // 3), "(arousal_rera"), (int(i * spe + spe // 2), "arousal_rera)")]
    notes.sort()
    record = f"tr{3 + night:02d}-{subject:04d}"
    paths = write_wfdb_record(
        out_dir,
        record,
        night_data.signals,
        fs,
        notes,
        comments=[
            f"subject: S{subject:04d}",
            f"night: {night + 1}",
            "synthetic: multiview_app",
            *([f"generator: {provenance}"] if provenance else []),
        ],
    )
    return paths, stages


WRITERS = {"sleep-edf": write_sleep_edf_night, "physionet2018": write_physionet2018_night}
WRITER_COHORT = {"sleep-edf": "sleep-edf-sc", "physionet2018": "young-adult"}
"""The subject population of each format's synthetic nights (the Sleep-EDF-format
population differs from the PhysioNet-format one as the SC cohort, aged 25-101, does)."""
COHORT_STREAM = 7
"""Seed-sequence entry of the cohort draws (``default_rng([seed, subject, COHORT_STREAM])``)."""


def _synth_recording(job: tuple[Path, int, int, str, float, int, int, float | None]) -> list[Path]:
    """Write one night (``(out, subject, night, fmt, hours, seed, compress, record_hours)``): every random
    stream is seeded by ``(seed, subject[, night])``, so a night's bytes do not depend on which process writes it."""
    out, subject, night, fmt, hours, seed, compress, record_hours = job
    traits = SubjectTraits.sample(np.random.default_rng([seed, subject])).with_cohort(
        WRITER_COHORT[fmt], np.random.default_rng([seed, subject, COHORT_STREAM])
    )
    rng = np.random.default_rng([seed, subject, night, 1])
    paths, _ = WRITERS[fmt](
        out,
        subject,
        night,
        hours,
        traits,
        rng,
        compress,
        record_hours=record_hours,
        provenance=provenance_text(seed, subject, night + 1),
    )
    return list(paths)


def synth_psg(
    out_dir: str | Path,
    subjects: int,
    nights: int,
    fmt: str,
    hours: float = 9.0,
    seed: int = 0,
    progress: bool = True,
    compress: int = 1,
    record_hours: float | None = None,
    workers: int = 1,
) -> list[Path]:
    """Write ``subjects x nights`` synthetic recordings in ``fmt`` ("sleep-edf" | "physionet2018")
    of ``hours``-long nights, or ``compress``-times shorter excerpts with their stage proportions.
    ``record_hours`` (sleep-edf): pad each recording with wake to that length (0: no padding;
    None: :func:`default_record_hours`, i.e. SC-length 20-h files for full nights). ``workers`` > 1:
    nights are written by that many processes (the same files, byte for byte)."""
    from ...console import progress as progress_display

    if fmt not in WRITERS:
        raise ValueError(f"--format: unknown '{fmt}'; available: {', '.join(WRITERS)}")
    if subjects < 1 or nights < 1 or hours <= 0 or compress < 1 or workers < 1:
        raise ValueError(
            f"synth-psg: --subjects, --nights, --hours, --compress and --workers must be positive "
            f"(got {subjects}, {nights}, {hours}, {compress}, {workers})"
        )
    if fmt == "sleep-edf" and (subjects > 99 or nights > 2):
        raise ValueError("synth-psg: the Sleep-EDF naming SC4ssN allows at most 99 subjects and 2 nights")
    if record_hours is not None and (record_hours < 0 or fmt != "sleep-edf"):
        raise ValueError(f"synth-psg: --record-hours {record_hours}: needs >= 0 and --format sleep-edf")
    if record_hours is None:
        record_hours = default_record_hours(fmt, hours, compress)
    elif record_hours == 0:
        record_hours = None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(out, s, n, fmt, hours, seed, compress, record_hours) for s in range(subjects) for n in range(nights)]
    bar = {"desc": f"synth-psg {fmt}", "total": len(jobs), "disable": not progress}  # plain lines off a terminal
    if workers == 1 or len(jobs) == 1:
        done = [_synth_recording(job) for job in progress_display(jobs, **bar)]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=multiprocessing.get_context(method)) as pool:
            done = list(progress_display(pool.map(_synth_recording, jobs), **bar))
    return [path for paths in done for path in paths]


__all__ = [
    "STAGES",
    "SubjectTraits",
    "synth_hypnogram",
    "synth_night",
    "synth_psg",
    "write_edf",
    "write_wfdb_record",
    "hypnogram_annotations",
]
