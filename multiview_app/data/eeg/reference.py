"""Reference values the synthetic PSG (``synth/``) is checked against (tests/test_eeg_synth.py,
tests/test_eeg_synth_events.py, mvapp experiment synth-check spectra, docs/eeg.md). Source and certainty
are stated next to each value: "retrieved" = the abstract or table stating the number was read (the
full papers were not), "from memory" / "UNVERIFIED" = not checked against any text."""

from __future__ import annotations

SLEEP_EDF_SC_EPOCHS: dict[str, int] = {"W": 8285, "N1": 2804, "N2": 17799, "N3": 5703, "REM": 7717}
"""Epochs per stage of Sleep-EDF SC (20 subjects, 39 nights, Fpz-Cz, 30 min of wake kept around sleep,
"Sleep stage ?" / movement epochs dropped): Supratak, Dong, Wu, Guo, "DeepSleepNet", IEEE TNSRE
25(11), 2017, Table I, as widely reproduced. VERIFIED 2026-11-23 by recomputation, not by reading the
table: the 39 SC hypnograms of that set (SC4001-SC4192 without SC4132) as stored one character per
30-s epoch in a public repository (skjerns/AutoSleepScorerDev, edfx/*.csv, commit 41a25cb), with
the DeepSleepNet preparation rule (akaraspt/deepsleepnet prepare_physionet.py: drop unknown /
movement epochs, keep from 60 epochs before the first to 60 after the last non-wake epoch; stages
3 and 4 = N3) give exactly 8285 / 2804 / 17799 / 5703 / 7717 (total 42308); cropping before dropping
gives the same. The paper's table itself was still not retrievable."""

SLEEP_EDF_SC_REAL_20_NIGHTS_EPOCHS: dict[str, int] = {"W": 3656, "N1": 1689, "N2": 8927, "N3": 3074, "REM": 3693}
"""Epochs per stage of the 20 real Sleep-EDF SC hypnogram files SC4001EC ... SC4092EC (10 subjects,
2 nights each, the first half of the set above) as PhysioNet distributes them, COMPUTED HERE
(2026-11-27, ``mvapp experiment synth-check night-structure`` on ``$MVAPP_REAL_PSG/sleep-edf-hypnograms``) with
the readers' rule: 30 min of wake kept around sleep, "Sleep stage ?" / movement epochs dropped, 3 + 4
= N3 (shares 17.4 / 8.0 / 42.4 / 14.6 / 17.6 %). Every sleep epoch of the files is kept (N1 1,689,
N2 8,927, S3 + S4 1,700 + 1,374, REM 3,693, as the folder's README). Agrees with the 39-night counts
above within 2.2 points per stage (N1 8.0 vs 6.6 %, W 17.4 vs 19.6 %); those stay the reference (twice
the nights, the paper's set)."""

SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE = {
    "shares": {"W": 0.175, "N1": 0.080, "N2": 0.422, "N3": 0.149, "REM": 0.175},
    "transitions_per_hour": {"mean": 6.04, "sd": 2.1},
    "rem_latency_minutes": {"mean": 94.5, "sd": 46.0},
    "n3_minutes_first_third": {"mean": 43.6, "sd": 19.0},
    "n3_minutes_last_third": {"mean": 9.8, "sd": 14.0},
    "bouts": {
        "W": {"median_minutes": 1.0, "mean_minutes": 2.71, "one_epoch_share": 0.48},
        "N1": {"median_minutes": 1.0, "mean_minutes": 1.42, "one_epoch_share": 0.39},
        "N2": {"median_minutes": 2.5, "mean_minutes": 5.26, "one_epoch_share": 0.22},
        "N3": {"median_minutes": 1.0, "mean_minutes": 3.71, "one_epoch_share": 0.47},
        "REM": {"median_minutes": 5.5, "mean_minutes": 7.51, "one_epoch_share": 0.09},
    },
}
"""Night structure of the same 20 real SC hypnograms, COMPUTED HERE (2026-11-27,
``mvapp experiment synth-check night-structure``; one-epoch shares by ``night_structure.runs``): mean stage
shares over nights (replacing the memory-based proportions as the generator's night-structure
target), W/NREM/REM transitions per hour of sleep, REM latency from the first sleep epoch and N3 in
the first / last third of the sleep period (mean, sd over nights), and pooled bouts inside the sleep
period (median / mean minutes; share of one-epoch bouts). The generator's ``BOUT_MINUTES``,
``INTERRUPTION``, ``INTERRUPTION_EPOCHS`` and ``N3_MINUTES`` cite these figures."""

BANDS = ("delta", "theta", "alpha", "sigma", "beta")

DREAMS_CENTRAL_RELATIVE_POWER_IQR: dict[str, tuple[tuple[float, float], ...]] = {
    "W": ((0.470, 0.797), (0.058, 0.168), (0.039, 0.161), (0.027, 0.059), (0.042, 0.081)),
    "N1": ((0.527, 0.769), (0.118, 0.224), (0.063, 0.134), (0.036, 0.051), (0.024, 0.048)),
    "N2": ((0.695, 0.817), (0.095, 0.178), (0.039, 0.068), (0.023, 0.048), (0.008, 0.019)),
    "N3": ((0.807, 0.891), (0.068, 0.117), (0.025, 0.042), (0.010, 0.024), (0.004, 0.007)),
}
"""Interquartile range over epochs of the relative band power (``BANDS``, total over 0.5-30 Hz) of the
central derivation (C3-A1 in 2, Cz-A1 in 6 of the 8 DREAMS excerpts; 30-s epochs by the DREAMS
reader's rule; W 54, N1 46, N2 288, N3 87 epochs), MEASURED HERE (2026-11-27,
``mvapp experiment synth-check signals``, ``eeg_signals.json`` ``stats.real``). REM (5 epochs, one excerpt) is
not given: too few to be a target. The generator's C3-M2 is checked against these (tests/test_eeg_synth.py)."""

DREAMS_CENTRAL_BAND_RMS_UV: dict[str, tuple[float, float, float, float, float]] = {
    "W": (10.5, 3.5, 3.2, 2.8, 2.7),
    "N1": (8.5, 4.8, 3.5, 2.3, 2.2),
    "N2": (15.1, 6.5, 3.9, 3.2, 2.0),
    "N3": (22.4, 7.4, 4.5, 3.2, 1.8),
}
"""Median in-band rms (uV, square root of the median Welch band power; delta, theta, alpha, sigma,
beta) of the same DREAMS central epochs (``signal_stats.stage_signal_stats`` ``band_rms_uv_median``),
MEASURED HERE. The generator's W / N1 / N2 / N3 rhythm amplitudes (``synth.RHYTHMS``) were set so that
C3-M2 matches these; median epoch SD W 12.6, N1 10.9, N2 17.2, N3 24.0 uV."""

FPZ_CZ_RELATIVE_POWER_RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "W": ((0.45, 0.90), (0.04, 0.30), (0.02, 0.30), (0.01, 0.10), (0.02, 0.30)),
    "N1": ((0.40, 0.70), (0.15, 0.35), (0.02, 0.10), (0.01, 0.05), (0.02, 0.10)),
    "N2": ((0.65, 0.90), (0.05, 0.25), (0.01, 0.06), (0.015, 0.06), (0.01, 0.05)),
    "N3": ((0.80, 0.97), (0.02, 0.12), (0.002, 0.03), (0.001, 0.02), (0.002, 0.02)),
    "REM": ((0.40, 0.70), (0.15, 0.35), (0.02, 0.10), (0.005, 0.04), (0.03, 0.12)),
}
"""Plausible ``(low, high)`` of the median relative band power (``eval.bandpower.BANDS``, total over
0.5-30 Hz) of Fpz-Cz per stage. ASSUMPTION (UNVERIFIED for Fpz-Cz): written from general knowledge of
sleep-EEG spectra (delta dominance growing N1 < N2 < N3; a sigma bump from spindles in N2; theta and low
delta in N1 and REM; cf. Aeschbach & Borbely 1993, J Sleep Res, for the all-night NREM spectrum), not
transcribed from a published table; no real Fpz-Cz recording is at hand (DREAMS is central). Changed
2026-11-27 where the real central lead contradicted them (``DREAMS_CENTRAL_RELATIVE_POWER_IQR``): W delta
was 0.25-0.55, theta 0.10-0.30, alpha 0.03-0.30, beta 0.05-0.30 (real central wake: delta 0.47-0.80,
theta 0.06-0.17, alpha 0.04-0.16, beta 0.04-0.08), N2 delta was 0.60-0.85, theta 0.08-0.25 (real
central N2 delta 0.70-0.82); the frontal upper bounds sit above the central IQR because Fpz-Cz also
sees ocular (delta-band) potentials, an assumption. Wide on purpose; the orderings are what they encode."""

SLEEP_EDF_SC_SUBJECTS = {"subjects": 78, "age_range": (25, 101)}
"""Sleep-EDF Expanded, SC study: 153 nights of 78 healthy subjects aged 25-101 (PhysioNet
sleep-edfx description, as reproduced in public notebooks; retrieved). The arousal index below rises
with age, so an SC-like cohort has a higher mean index than the young-adult value the generator uses."""

K_COMPLEX_PER_MIN_N2 = {"mean": 1.21, "range": (0.75, 1.93)}
"""Spontaneous K-complexes per minute of stage 2 sleep: 1.21 / min, range over nine subjects
0.75-1.93, no trend over 6 h or between two nights (Psychophysiology 1968, doi
10.1111/j.1469-8986.1968.tb02785.x, "autonomic correlates of the spontaneous K-complex"; the abstract
with these numbers was retrieved, the authors Johnson & Karpan are from memory). The generator's N2
rate (1.2 / min x the subject's log-normal gain) matches; its N3 rate (0.6 / min) has no source."""

SPINDLE_PER_MIN_N2 = {"mean": 2.7, "sd": 2.1}
"""Sleep spindles per minute of stage 2 sleep found by an automatic detector: 2.7 +- 2.1 (10 healthy
subjects aged 20-35, multichannel all-night EEG, maximal over centro-parietal midline leads;
Zeitlhofer et al., "Topographic distribution of sleep spindles in young healthy subjects", J Sleep
Res 6(3):149-155, 1997; abstract retrieved). Published densities are detector outputs (they depend
on the amplitude threshold), so the generator is compared through a detector too: the generated
rate is 3.5 / min x the subject's gain (N2; was 5 / min, whose detected ~3.7 / min was above both DREAMS
experts, 2.0 / 3.0 per min, and whose sigma share was twice the real central one), and the
test's envelope detector finds it inside mean +- SD; the generated rate itself is not a published value."""

AROUSAL_INDEX_PER_HOUR = {"10-19 y": 13.8, "20-39 y": 14.7, "40-59 y": 17.8, ">=60 y": 27.1}
"""EEG arousals per hour of total sleep time in healthy sound sleepers (ten per age group, after an
adaptation night): Boselli, Parrino, Smerieri, Terzano, "Effect of age on EEG arousals in normal
sleep", Sleep 21(4):351-357, 1998 (abstract retrieved). Bonnet & Arand, "EEG arousal norms by age",
J Clin Sleep Med 3(3):271-274, 2007 (76 subjects, 18-70 y) confirm the rise with age (their table was
not retrievable), as does the Sleep Heart Health Study's normative group (470 home PSGs, Sleep
27:293-298, 2004: +0.8 / h per decade, 1.4 / h lower in women; abstract retrieved). The generator
uses the 20-39 y value: 10 / h (main stream) + 4.7 / h (own stream)."""

AROUSAL_DURATION_SECONDS = {"mean": 14.9, "sd": 2.3}
"""Mean arousal duration 14.9 +- 2.3 s, stable across ages (group means 13.3-16.6 s), NREM 14.6, REM
16.2 s (Boselli et al. 1998, above). Read as mean +- SD over subjects of each subject's mean duration
(the abstract does not say; with ten subjects per group this is the usual reading): the generator
draws each subject's mean duration from N(14.9, 2.3) and single arousals within +-40 % of it
(``synth.AROUSAL_SECONDS``); tests/test_eeg_synth_events.py checks the realized per-subject means."""

K_COMPLEX_AMPLITUDE = {"aasm_min_uv": 75.0}
"""The 75-uV peak-to-peak figure used for K-complexes (and slow waves) is the conventional scoring
amplitude (AASM slow waves: >= 75 uV; K-complexes "stand out from the background", >= 0.5 s; general
references describe them as "usually > 100 uV"): no published distribution of spontaneous K-complex
amplitudes was retrievable, so the generator's K-complex amplitude (fitted median ~190-240 uV peak
to peak on F3-M2 / C3-M2) is an ASSUMPTION. Its former quiet N2 background (a blind 75-uV trough-to-peak
detector fired < 0.5 / min on F3 without K-complexes) was an assumption too, refuted by the real central
lead (``DREAMS_CENTRAL_N2_BLIND_75UV_PER_MIN``) and dropped (2026-11-27)."""

DREAMS_CENTRAL_N2_BLIND_75UV_PER_MIN = 5.4
"""A blind slow-wave detector (troughs of the 0.3-4 Hz band at least 1 s apart followed within 1 s by a
peak >= 75 uV above them; ``tests/test_eeg_synth_events.py::blind_k_complex_detections``) fires 5.4 times
per minute of N2 away from N3 on the real DREAMS central lead (8 excerpts, 113.5 min), MEASURED HERE
(2026-11-27): far above the spontaneous K-complex rate (1.21 / min, above), so real N2 background
slow waves reach 75 uV routinely. This refutes the former ASSUMPTION below that the N2 background
rarely does; the generator's N2 delta follows the real central amplitude instead."""

ARTIFACT_RATES = {
    "movement burst per epoch (W, N1, N2, N3, REM)": (0.10, 0.05, 0.02, 0.02, 0.03),
    "electrode pops per hour": 0.6,
    "sweat sways per hour": 0.06,
    "mains amplitude uV": (0.0, 3.0),
}
"""The generator's artifact rates (times the subject's ``artifact_scale`` 0.5-2 where it applies):
UNVERIFIED assumptions; no published rate of movement bursts, electrode pops or sweat artifacts per
hour of PSG was found with the reference search available (tests check that these configured rates
are realized, not that they are realistic)."""

BOUTS_PER_SLEEP_EPISODE = {
    "young": {"wake": (2.2, (1.4, 5.1)), "nrem": (10.1, (8.6, 11.1)), "rem": (8.2, (7.1, 9.9))},
    "older": {"wake": (9.2, (2.9, 15.2)), "nrem": (12.3, (7.5, 15.9)), "rem": (7.0, (4.4, 10.5))},
}
"""Median (range) over subjects of the number of bouts per sleep episode: Klerman et al., Neurobiol
Aging 34(1):309-318, 2013, Table 1 (PMC3469724; retrieved), forced-desynchrony protocol in the lab,
not ordinary nights, and their bout definition was not checked. Not used as a target (not ordinary
nights); the generator is matched to the SHHS cut-off and the Sleep-EDF SC nights below instead. Its
full 9-h nights (30 subjects) now have median 12 wake runs, 17.5 NREM runs and 8.5 REM runs
between sleep onset and the final awakening (were 26, 31, 13), close to the Sleep-EDF SC nights (11, 19, 8; below). Since
generator version 2 the generator's ``BOUT_MINUTES`` / ``INTERRUPTION`` are set against the real SC bouts
(``SLEEP_EDF_SC_REAL_NIGHT_STRUCTURE``) instead."""

STAGE_TRANSITIONS_PER_HOUR = {"shhs_lowest_quartile_below": 7.76}
"""Overall sleep-stage transition rate (transitions between wake, NREM and REM per hour of sleep) in
the Sleep Heart Health Study (5,684 community participants, mostly middle-aged and older, home PSG,
epoch-scored): the lowest quartile is below 7.76 / h (Laffan, Caffo, Swihart, Punjabi, "Utility of
sleep stage transitions in assessing sleep continuity", Sleep 33(12):1681-1686, 2010; abstract
retrieved, the other quartile cut-offs were not). Healthy young-adult nights should be at least as
continuous as the calmest SHHS quarter; the Sleep-EDF SC nights are (median 5.3 / h, below). No
normative number of awakenings per night of healthy young adults was retrievable."""

SLEEP_EDF_SC_CONTINUITY = {
    "transitions_per_hour": {"median": 5.33, "iqr": (3.94, 6.56), "range": (2.61, 11.53)},
    "runs_per_night_median": {"wake": 11, "nrem": 19, "rem": 8},
    "brief_awakenings_per_hour_median": 0.89,
}
"""Sleep continuity of the Sleep-EDF SC nights themselves (the 39 nights of 20 healthy subjects whose
stage counts are ``SLEEP_EDF_SC_EPOCHS``), COMPUTED HERE (2026-11-23) from the same public
copy of their hypnograms (skjerns/AutoSleepScorerDev, edfx/*.csv, commit 41a25cb): from sleep onset
to the final awakening, transitions between wake, NREM (stages 1-4) and REM per hour of sleep
(median, interquartile range, range over nights), runs of each state per night (median) and
awakenings of <= 1 min per hour of sleep. Not a published figure but measured on the data the
generator imitates; the SHHS cut-off above is the published check."""
