"""Reference values the synthetic PSG (``synth.py``) is checked against (tests/test_eeg_synth.py,
scripts/figure_eeg_synth.py, docs/eeg.md). Sources and how sure we are of each value are stated
next to it: nothing here could be checked against the papers offline."""
from __future__ import annotations

SLEEP_EDF_SC_EPOCHS: dict[str, int] = {"W": 8285, "N1": 2804, "N2": 17799, "N3": 5703, "REM": 7717}
"""Epochs per stage of Sleep-EDF SC (20 subjects, 39 nights, Fpz-Cz, 30 min of wake kept around sleep):
Supratak, Dong, Wu, Guo, "DeepSleepNet", IEEE TNSRE 25(11), 2017, Table I, as widely reproduced;
quoted from memory, not re-checked against the paper."""

BANDS = ("delta", "theta", "alpha", "sigma", "beta")

FPZ_CZ_RELATIVE_POWER_RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "W": ((0.25, 0.55), (0.10, 0.30), (0.03, 0.30), (0.01, 0.10), (0.05, 0.30)),
    "N1": ((0.40, 0.70), (0.15, 0.35), (0.02, 0.10), (0.01, 0.05), (0.02, 0.10)),
    "N2": ((0.60, 0.85), (0.08, 0.25), (0.01, 0.06), (0.015, 0.06), (0.01, 0.05)),
    "N3": ((0.80, 0.97), (0.02, 0.12), (0.002, 0.03), (0.001, 0.02), (0.002, 0.02)),
    "REM": ((0.40, 0.70), (0.15, 0.35), (0.02, 0.10), (0.005, 0.04), (0.03, 0.12)),
}
"""Plausible ``(low, high)`` of the median relative band power (``eval.bandpower.BANDS``, total over
0.5-30 Hz) of Fpz-Cz per stage. UNVERIFIED: written from general knowledge of sleep-EEG spectra
(delta dominance growing N1 < N2 < N3; a sigma bump from spindles in N2; theta and low delta in N1 and
REM; alpha and beta highest in wake; cf. Aeschbach & Borbely 1993, J Sleep Res, for the all-night NREM
spectrum), not transcribed from a published table. Wide on purpose; the orderings are what they encode."""
