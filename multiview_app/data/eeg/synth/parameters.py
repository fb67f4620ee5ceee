"""Parameters of the synthetic PSG: stage codes, EEG topography and scalp positions, EOG gaze
sensitivities, background-rhythm and transient tables, eye-movement / EMG / artifact / arousal rates
and amplitudes, subject-level traits (:class:`SubjectTraits`) and the cohorts they are drawn for, and
the independent random side streams (:func:`side_stream`) of features added later."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..reference import AROUSAL_DURATION_SECONDS, AROUSAL_INDEX_PER_HOUR, SLEEP_EDF_SC_SUBJECTS

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
    # N2 / N3: the slow waves above the unscaled ``delta_background`` (10.0 / 22.3 uV; with the background's
    # 7.5 uV the totals are the former 12.5 / 23.5 uV, so a young-adult subject's delta is unchanged)
    "delta": Rhythm((0.5, 3.5), (11.5, 7.5, 10.0, 22.3, 6.5), (1.0, 0.8, 0.55), slope=1.5),
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
    # central wake's 3.2), central rather than posterior, so that the occipital N1 alpha dropout stays.
    # N1 2.1 (was 2.8): N1 is scored when the wake alpha drops out (AASM); see ``RHYTHM_GAIN_OF``
    "alpha_sleep": Rhythm((8.0, 12.0), (0.0, 2.1, 2.85, 3.6, 0.0), (0.6, 1.0, 0.4)),
    # N2 / N3 delta background that the cohort's age / sex effect leaves alone (``SLOW_WAVE_STAGES``):
    # N1's 7.5 uV, so that delta stays ordered N3 > N2 > N1 in older SC subjects (``RHYTHM_GAIN_OF``)
    "delta_background": Rhythm((0.5, 3.5), (0.0, 0.0, 7.5, 7.5, 0.0), (1.0, 0.8, 0.55), slope=1.5),
}
RHYTHM_GAIN_OF = {"sigma": "spindle", "alpha_sleep": "alpha", "delta_background": "delta"}
"""Rhythms added later take the subject's gain of a related event type (so no trait draw moved).

``delta_background`` (generator 4): the SC cohort's age / sex factor (``SubjectTraits.slow_wave_scale``)
scaled all of the N2 / N3 delta but not N1's 7.5 uV, so in older men (factor down to ~0.4) the Fpz-Cz
relative delta came out N1 > N2 (YASA on 3 SC nights: N1 0.61, N2 0.54, N3 0.76), against the
AASM / real ordering N1 < N2 < N3 (``reference.DREAMS_CENTRAL_BAND_RMS_UV``: 8.5 / 15.1 / 22.4 uV). The
SC study measured the age / sex effect on the sleep slow waves (Mourtazaev et al. 1995, below), so
the factor now scales only the slow waves above an N1-sized background; both keep the subject's
age-like ``delta_scale``. ``alpha_sleep`` N1 2.1 uV (was 2.8): the synthetic N1 carried more alpha than
the real DREAMS N1 on the central lead (relative alpha 0.111 pooled, per-person medians 0.113 / 0.131 in
the young-adult / SC cohorts, against the real 0.093 / 0.097; now 0.089, 0.085 / 0.094;
``mvapp experiment synth-check signals`` / ``synth-check wake-n1``, seed 0); N1 is
the wake alpha giving way to low-amplitude mixed-frequency EEG (AASM). 1.4 uV (tried) undershot
the real (0.066) and a classifier trained on the real epochs then found only 0.52-0.61 of synthetic N1
(0.71-0.78 at 2.1, 0.83-0.95 at 2.8; its ceiling on real N1 is 0.50-0.54). On fresh SC nights (YASA,
seed 6000) the cohort's median Fpz-Cz relative delta is ordered (N1 0.69, N2 0.70, N3 0.85), but single
men of 54 and 90 years still have N1 >= N2 (0.74 / 0.73, 0.70 / 0.64): their N2 also carries more theta
and sigma than N1."""
TRANSIENTS: dict[str, Transient] = {  # spindles and K-complexes mark N2 (AASM): none in W, N1, REM
    "spindle": Transient((0.0, 0.0, 3.5, 1.5, 0.0), 17.0, (0.55, 1.0, 0.4)),  # DREAMS N2 sigma, experts 2.0-3.0 / min
    "k_complex": Transient((0.0, 0.0, 1.2, 0.6, 0.0), 90.0, (1.0, 0.85, 0.35)),
    "vertex": Transient((0.1, 1.5, 0.4, 0.0, 0.1), 25.0, (0.6, 1.0, 0.3)),
    "sawtooth": Transient((0.0, 0.2, 0.0, 0.0, 1.5), 14.0, (0.6, 1.0, 0.4)),
}
EOG_EVENTS: dict[str, tuple[float, float, float, float, float]] = {  # rate per minute per stage
    "blink": (8.0, 1.0, 0.0, 0.0, 0.5),
    "slow_roll": (0.5, 6.0, 0.3, 0.0, 0.3),  # N1 6 (was 3): see below
    "saccade": (3.0, 0.3, 0.0, 0.0, 5.0),
}
"""Slow rolling eye movements are the EOG sign of N1 (AASM scoring manual: slow eye movements at
drowsiness / N1 onset); 6 per minute in N1 (was 3, an assumption like the new value: no published
per-minute rate was found) so that most N1 epochs hold at least one (P = 1 - exp(-3) = 0.95 vs 0.78).
The one real recording with EOG (DREAMS excerpt 3) neither supports nor refutes it: its N1 0.3-2 Hz EOG
rms is 14.9 uV (synthetic 4.5-5.4 at 3 / min, 6.9-7.2 now) but 0.79 x its own N2 (synthetic 1.0-1.2,
now 1.35-1.55; ``synth-check wake-n1``, seed 0). YASA reads slow rolls as an N1 cue: with N1 alpha 1.4 uV
(tried), N1 recall 0.29 vs 0.14 (3 SC nights, seed 4100)."""
EYES_OPEN = {"alpha": 0.45, "beta": 1.1, "muscle": 1.4, "blink": 1.9, "saccade": 1.9, "slow_roll": 0.0, "emg": 1.2}
EYES_CLOSED = {"alpha": 1.35, "beta": 1.1, "muscle": 0.7, "blink": 0.05, "saccade": 0.1, "slow_roll": 1.5, "emg": 0.8}
"""Wake epochs are eyes open (blinks, saccades, EMG; alpha blocked) or eyes closed (posterior alpha, few
eye movements): multipliers of the wake entries of the tables above. Beta 1.1 in both (was 1.3 open /
0.8 closed) and alpha 0.45 / 1.35 (was 0.3 / 1.5): on the central lead the eyes-closed epochs had a
relative beta of 0.035 and the eyes-open ones an alpha of 0.025 against the real DREAMS wake's 0.062 and
0.081 (pooled medians), and a band-power classifier trained on the real epochs staged a third of the
eyes-closed wake as N1 (W recall 0.70 young-adult / 0.75 SC, now 0.86 / 0.85, three draws;
``mvapp experiment synth-check wake-n1``). The posterior alpha still rises 3x in amplitude
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
at 0.3: 0.55-0.74 for alpha; ``mvapp experiment synth-check signals`` data)."""
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
``mvapp experiment synth-check wake-n1``). Generator 4: only the slow waves above the
N2 / N3 delta background (``RHYTHMS["delta_background"]``, unscaled) carry it."""
SC_WHITE_NOISE_UV = WHITE_NOISE_UV
"""Range of an SC subject's white (amplifier / electrode) noise, uV rms over 0-fs/2: the base cohort's.
It was 2.5-5 uV (an ASSUMPTION: SC nights were recorded at home on ambulatory cassette recorders in
1987-1991, Kemp et al., IEEE-BME 47(9):1185-1194, 2000; no published noise floor was found), which the
real central lead refutes: with it the SC cohort's relative beta was 2-3x the real DREAMS one in every
stage (per-person medians, N2 0.030 vs 0.012, N1 0.086 vs 0.032, W 0.10 vs 0.047) and a classifier
trained on SC nights staged the real excerpts at kappa 0.21-0.24 over three draws (now 0.33-0.37, with
the slow-wave and arousal changes; young-adult cohort 0.45-0.49, real leave-one-excerpt-out ceiling
0.37-0.40; ``mvapp experiment synth-check wake-n1``)."""
SC_ARTIFACT_SCALE = 1.5
"""Movement-burst / sweat rate multiplier of SC subjects (home ambulatory recordings over a day-night
period): an ASSUMPTION (no published artifact rate; see ``reference.ARTIFACT_RATES``)."""


def arousal_index_ratio(age_years: float) -> float:
    """Arousal index of ``age_years``' group over the 20-39 y group's (Boselli et al. 1998,
    ``reference.AROUSAL_INDEX_PER_HOUR``: 14.7 / 17.8 / 27.1 per hour at 20-39 / 40-59 / >= 60 y)."""
    index = AROUSAL_INDEX_PER_HOUR
    group = "20-39 y" if age_years < 40 else "40-59 y" if age_years < 60 else ">=60 y"
    return index[group] / index["20-39 y"]


def side_stream(rng: np.random.Generator, key: int) -> np.random.Generator:
    """An independent generator derived from ``rng``'s seed without drawing from ``rng`` (so the
    draws of ``rng`` keep their values when a feature adds randomness): ``key`` names the feature
    (:data:`SIDE_STREAMS`). ``rng`` must come from ``np.random.default_rng(seed)``."""
    seed = rng.bit_generator.seed_seq
    if not isinstance(seed, np.random.SeedSequence):
        raise ValueError("synth: the night generator must be np.random.default_rng(seed) (it has no seed sequence)")
    return np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 1000 + key)))


SIDE_STREAMS = {
    "second_eog": 1,
    "day_padding": 2,
    "extra_arousals": 3,
    "respiratory_arousals": 4,
    "cardio_traits": 5,
    "cardiorespiratory": 6,
}
"""Keys of :func:`side_stream` per feature added after the demo's measurements started. The last three serve
whole-PSG nights (``synth-psg --signals psg``): the EEG arousals ending respiratory events (from the night's
stream), the subject's cardiorespiratory traits (from the subject's ``default_rng([seed, subject])``) and the
night's cardiorespiratory signals (from the night's stream); EEG-only nights never draw from them."""
