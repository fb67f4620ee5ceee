"""Sleep-EDF Expanded reader (SC and ST): ``*-PSG.edf`` + paired ``*-Hypnogram.edf`` via mne."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from .recording import Recording, label_epochs_from_intervals, resolve_channels
from .stages import EPOCH_SECONDS, SLEEP_EDF_LABELS, UNSCORED

PAIR_KEY_LENGTH = 7  # SC4ssNE: the 8th character names the scorer and differs between the two files


def check_edf_integrity(path: Path) -> None:
    """Compare the file size with the size its header announces; raises ``ValueError`` naming
    the file when it is not EDF or is truncated (mne would silently read a truncated file)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(256)
        try:
            if len(head) < 256 or head[:8].strip() != b"0":
                raise ValueError("not an EDF header")
            header_bytes = int(head[184:192])
            n_records = int(head[236:244])
            n_signals = int(head[252:256])
            handle.seek(256 + n_signals * 216)
            samples = [int(handle.read(8)) for _ in range(n_signals)]
        except ValueError as err:
            raise ValueError(f"{path}: corrupt EDF file ({err})") from None
    if n_records < 0:
        return  # "-1": length unknown (recording interrupted); the library decides
    expected = header_bytes + n_records * sum(samples) * 2
    if size < expected:
        raise ValueError(f"{path}: truncated EDF file: header announces {expected} bytes "
                         f"({n_records} data records), found {size}")


def find_pairs(source: Path) -> tuple[list[tuple[Path, Path | None]], list[str]]:
    """Pair every ``*-PSG.edf`` under ``source`` with the ``*-Hypnogram.edf`` sharing its first 7
    characters. Returns (pairs with ``None`` where the hypnogram is missing, problems)."""
    psgs = sorted(source.rglob("*-PSG.edf"))
    hypnograms: dict[str, list[Path]] = {}
    for path in sorted(source.rglob("*-Hypnogram.edf")):
        hypnograms.setdefault(path.name[:PAIR_KEY_LENGTH], []).append(path)
    pairs: list[tuple[Path, Path | None]] = []
    problems: list[str] = []
    for psg in psgs:
        matches = hypnograms.get(psg.name[:PAIR_KEY_LENGTH], [])
        if len(matches) > 1:
            problems.append(f"{psg}: several hypnograms match its first {PAIR_KEY_LENGTH} characters: "
                            f"{', '.join(m.name for m in matches)}")
            continue
        pairs.append((psg, matches[0] if matches else None))
    return pairs, problems


def recording_id(psg: Path) -> str:
    """"SC4001E0-PSG.edf" -> "SC4001" (study, subject, night)."""
    return psg.name[:6]


def subject_id(psg: Path) -> str:
    """"SC4001E0-PSG.edf" -> "SC400" (study + 2-digit subject); ST files likewise."""
    return psg.name[:5]


def read_sleep_edf(psg: Path, hypnogram: Path | None, channels: list[str]) -> Recording:
    """Read the picked ``channels`` of ``psg`` and the per-epoch labels of ``hypnogram``.

    "Sleep stage ?" and "Movement time" become ``EXCLUDED`` (counted in ``excluded_epochs``);
    stages 3 and 4 become N3. Raises ``ValueError`` naming the file on missing hypnogram,
    truncated/corrupt EDF, absent channel.
    """
    import mne

    if hypnogram is None:
        raise ValueError(f"{psg}: no hypnogram found (expected '{psg.name[:PAIR_KEY_LENGTH]}?-Hypnogram.edf' "
                         "next to it)")
    check_edf_integrity(psg)
    check_edf_integrity(hypnogram)
    try:
        raw = mne.io.read_raw_edf(psg, preload=False, verbose="error")
    except Exception as err:  # mne raises many types on bad files
        raise ValueError(f"{psg}: cannot read EDF ({err})") from None
    picked = resolve_channels(channels, list(raw.ch_names), psg)
    orig_rates = _native_rates(raw, picked)
    data = raw.get_data(picks=picked)  # (c, n) volts, read from disk for the picked channels only
    try:
        annotations = mne.read_annotations(hypnogram)
    except Exception as err:
        raise ValueError(f"{hypnogram}: cannot read hypnogram annotations ({err})") from None
    shift = 0.0
    if annotations.orig_time is not None and raw.info["meas_date"] is not None:
        shift = (annotations.orig_time - raw.info["meas_date"]).total_seconds()
    counts: Counter = Counter()
    if len(set(orig_rates)) > 1:
        counts["mixed_rate_channels"] += len(picked)
    intervals = []
    for onset, duration, text in zip(annotations.onset, annotations.duration, annotations.description):
        code = SLEEP_EDF_LABELS.get(str(text))
        if code is None:
            counts[f"ignored_annotation:{text}"] += 1
            continue
        intervals.append((float(onset) + shift, float(duration), code))
    if not intervals:
        raise ValueError(f"{hypnogram}: no sleep-stage annotations (expected texts like 'Sleep stage W')")
    sfreq = float(raw.info["sfreq"])
    n_epochs = int(data.shape[1] // (EPOCH_SECONDS * sfreq))
    labels = label_epochs_from_intervals(intervals, n_epochs, counts)
    counts["excluded_epochs"] += int((labels == -1).sum())
    counts["unscored_epochs"] += int((labels == UNSCORED).sum())
    return Recording(recording=recording_id(psg), subject=subject_id(psg), sources=[psg, hypnogram],
                     channel_names=list(channels), signals=[row.astype(np.float64) for row in data],
                     sfreqs=[sfreq] * len(picked), epoch_labels=labels, counts=counts)


def _native_rates(raw, picked: list[str]) -> list[float]:
    """Per-channel native sampling rates of an mne EDF reader (mne upsamples to the highest one)."""
    extras = raw._raw_extras[0]
    names = list(extras.get("ch_names", raw.ch_names))
    n_samps = extras.get("n_samps")
    record_length = extras.get("record_length", [1.0])[0]
    if n_samps is None or len(n_samps) < len(names):  # n_samps may also list the annotation channel
        return [float(raw.info["sfreq"])] * len(picked)
    return [float(n_samps[names.index(p)]) / float(record_length) for p in picked]


def download_sleep_physionet(subjects: list[int], recording: list[int], path: Path) -> list[Path]:
    """Fetch Sleep-EDF SC files with ``mne.datasets.sleep_physionet.age.fetch_data`` (explicit opt-in).

    Raises ``RuntimeError`` with a clear message when offline.
    """
    from mne.datasets.sleep_physionet.age import fetch_data

    from ..catalog import get_card

    try:
        pairs = fetch_data(subjects=subjects, recording=recording, path=str(path), on_missing="raise")
    except Exception as err:
        raise RuntimeError(f"download of Sleep-EDF subjects {subjects} failed ({err}); are you offline? "
                           f"Download manually from {get_card('sleep-edf').source.url} and pass --source") from None
    return [Path(p) for pair in pairs for p in pair]
