"""YASA's pretrained sleep staging (Vallat & Walker, eLife 2021) on this project's recordings.

The one place that calls ``yasa.SleepStaging``. Its LightGBM classifiers ship in the ``yasa`` wheel,
so staging runs offline (``pip install 'multiview_app[yasa]'``; yasa needs Python >= 3.11).

- :func:`stage_with_yasa`: one night's EEG (and EOG / EMG) in microvolts -> ``(E,)`` stage codes of
  this project (0 W, 1 N1, 2 N2, 3 N3, 4 REM).
- :func:`stage_source`: one SOURCE file (a Sleep-EDF ``*-PSG.edf``, a PhysioNet 2018 WFDB record, a
  DREAMS excerpt; never the z-scored window cache) read by the project's readers, staged on the
  reader's 30-s epoch grid, with the age and sex of the file header when it has them.
- :func:`stage_folder`: every source under a folder; recordings YASA cannot stage (no EEG lead,
  sampling rate <= 80 Hz) are skipped with the reason printed.
- :func:`agreement`: Cohen's kappa, per-stage recall and the confusion matrix against the scorer.

YASA wants the raw signal (it filters 0.4-30 Hz and resamples to 100 Hz itself) of the night from
lights off to lights on: its features are z-scored over the recording and include the time elapsed
since its start. Recordings are therefore cropped to ``crop_wake_minutes`` of wake around sleep
(the readers' crop, :func:`~multiview_app.data.eeg.preprocess.wake_crop_mask`) before staging;
a day-long Sleep-EDF file would otherwise be mostly wake.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..data.eeg.recording import Recording, resolve_channels
from ..data.eeg.stages import EPOCH_SECONDS, STAGES
from ..extras import require

YASA_EXTRA = "yasa"
MIN_SFREQ = 80.0
"""YASA refuses recordings sampled at 80 Hz or less."""

UPSAMPLE_TO = 100.0
"""Where the dataset card allows upsampling (DREAMS: excerpt 3 at 50 Hz), a recording at or below
:data:`MIN_SFREQ` is resampled to this rate for YASA (which resamples to 100 Hz itself); it carries no
content above its own Nyquist frequency, and :class:`StagedNight` says it was upsampled."""
YASA_CODES: dict[str, int] = {"W": 0, "WAKE": 0, "N1": 1, "N2": 2, "N3": 3, "R": 4, "REM": 4}
"""YASA's stage names (``yasa.Hypnogram`` values, or the classifiers' own in yasa < 0.7) -> code."""
CROP_WAKE_MINUTES = 30.0


@dataclass(frozen=True)
class Leads:
    """The derivations YASA reads from one dataset, in order of preference."""

    eeg: tuple[str, ...]
    eog: tuple[str, ...]


LEADS: dict[str, Leads] = {
    "sleep-edf": Leads(eeg=("EEG Fpz-Cz",), eog=("EOG horizontal",)),
    "physionet2018": Leads(eeg=("C4-M1", "C3-M2"), eog=("E1-M2",)),
    "dreams": Leads(eeg=("C3-A1", "CZ-A1"), eog=("EOG1-A1",)),
}
"""YASA was trained on a central EEG (C4-M1 preferred) and E1-M2 (Vallat & Walker 2021). Sleep-EDF has no
central lead: its Fpz-Cz (frontal-central) is the EEG, its horizontal EOG the EOG. DREAMS: the excerpt's one
central derivation (C3-A1 or CZ-A1), EOG1-A1 where the excerpt is a full PSG (``excerpt3.edf``)."""


class YasaSkip(ValueError):
    """A recording YASA cannot stage (no EEG lead, sampling rate too low); the message says why."""


@dataclass
class StagedNight:
    """YASA's staging of one recording on its reader's epoch grid.

    Attributes
    ----------
    recording, subject : str
        The reader's ids.
    source : Path
        The signal file (Sleep-EDF PSG, WFDB record, DREAMS excerpt).
    eeg, eog : str, str or None
        The derivations staged (``eog`` None: the EEG-only classifier).
    age, male : float or None, bool or None
        What was passed to YASA (None: not known, the classifier without demographics).
    first_epoch : int
        Index on the reader's grid (``Recording.epoch_labels``) of the first staged epoch.
    labels : numpy.ndarray
        ``(E,)`` the scorer's codes of the staged epochs (``EXCLUDED`` / ``UNSCORED`` kept).
    predicted : numpy.ndarray
        ``(E,)`` YASA's codes 0..4.
    eeg_uv : numpy.ndarray
        ``(E, T)`` the EEG lead of the staged epochs in microvolts, at ``sfreq``.
    sfreq : float
        Sampling rate of ``eeg_uv``.
    upsampled_from : float or None
        The recording's rate when it was upsampled to :data:`UPSAMPLE_TO` (else None).
    """

    recording: str
    subject: str
    source: Path
    eeg: str
    eog: str | None
    age: float | None
    male: bool | None
    first_epoch: int
    labels: np.ndarray
    predicted: np.ndarray
    eeg_uv: np.ndarray
    sfreq: float
    upsampled_from: float | None = None


def import_yasa() -> ModuleType:
    """``yasa``, or :class:`~multiview_app.extras.MissingExtraError` naming ``pip install 'multiview_app[yasa]'``."""
    return require("yasa", YASA_EXTRA)


def _as_raw(signals: dict[str, tuple[np.ndarray, str]], sfreq: float) -> Any:
    """``{name: (samples uV (n,), mne channel type)}`` -> an ``mne.io.RawArray`` in volts."""
    import mne

    data = np.stack([np.nan_to_num(np.asarray(x, dtype=np.float64)) for x, _ in signals.values()]) * 1e-6
    info = mne.create_info(list(signals), sfreq, [kind for _, kind in signals.values()])
    return mne.io.RawArray(data, info, verbose="error")


def stage_with_yasa(
    eeg_uv: np.ndarray,
    sfreq: float,
    eog_uv: np.ndarray | None = None,
    emg_uv: np.ndarray | None = None,
    age: float | None = None,
    male: bool | None = None,
    eeg_name: str = "EEG",
    eog_name: str = "EOG",
    emg_name: str = "EMG",
) -> np.ndarray:
    """Stage one night with YASA's pretrained classifier.

    ``eeg_uv`` / ``eog_uv`` / ``emg_uv``: ``(n,)`` raw (unfiltered) signals in microvolts at ``sfreq``
    (> 80 Hz), sample 0 the start of epoch 0; NaN samples count as 0. The classifier is chosen by what
    is given (eeg, eeg+eog, eeg+eog+emg, ...); age and sex are used only when both are known (YASA's
    demographic classifiers need both). Returns ``(E,)`` int64 codes 0..4 (``STAGES``),
    ``E = n // (30 s * sfreq)``; samples after the last whole epoch are ignored.
    """
    yasa = import_yasa()
    if sfreq <= MIN_SFREQ:
        raise YasaSkip(f"sampling rate {sfreq:g} Hz: YASA needs more than {MIN_SFREQ:g} Hz")
    spe = int(round(EPOCH_SECONDS * sfreq))
    eeg_uv = np.asarray(eeg_uv)
    n_epochs = eeg_uv.size // spe
    if eeg_uv.ndim != 1 or n_epochs < 1:
        raise ValueError(f"stage_with_yasa: expected one EEG channel (n,) of >= 30 s, got shape {eeg_uv.shape}")
    signals = {eeg_name: (eeg_uv, "eeg"), eog_name: (eog_uv, "eog"), emg_name: (emg_uv, "emg")}
    signals = {name: (x, kind) for name, (x, kind) in signals.items() if x is not None}
    if any(np.asarray(x).shape != eeg_uv.shape for x, _ in signals.values()):
        raise ValueError(f"stage_with_yasa: EOG / EMG must have the EEG's shape {eeg_uv.shape}")
    signals = {name: (np.asarray(x)[: n_epochs * spe], kind) for name, (x, kind) in signals.items()}
    metadata = {"age": float(age), "male": bool(male)} if age is not None and male is not None else None
    staging = yasa.SleepStaging(
        _as_raw(signals, sfreq),
        eeg_name=eeg_name,
        eog_name=eog_name if eog_uv is not None else None,
        emg_name=emg_name if emg_uv is not None else None,
        metadata=metadata,
    )
    with warnings.catch_warnings():  # the shipped classifiers were pickled by an older scikit-learn: known, not news
        warnings.filterwarnings("ignore", message="Trying to unpickle estimator")
        return yasa_codes(staging.predict())[:n_epochs]


def yasa_codes(prediction: Any) -> np.ndarray:
    """YASA's prediction (a ``yasa.Hypnogram`` or an array of stage names) -> ``(E,)`` int64 codes 0..4."""
    names = np.asarray(getattr(prediction, "hypno", prediction)).astype(str)
    unknown = sorted(set(names.tolist()) - set(YASA_CODES))
    if unknown:
        raise ValueError(f"YASA predicted stage(s) {unknown}; expected some of {sorted(YASA_CODES)}")
    return np.array([YASA_CODES[name] for name in names], dtype=np.int64)


_AGE_YEARS = re.compile(r"(\d{1,3})\s*yr", re.IGNORECASE)
_AGE_KEY = re.compile(r"\bage\W*(\d{1,3}(?:\.\d+)?)", re.IGNORECASE)
_SEX_KEY = re.compile(r"\b(?:sex|gender)\W*([MF])", re.IGNORECASE)


def demographics_from_text(text: str) -> tuple[float | None, bool | None]:
    """(age in years, male) from an EDF patient field or WFDB header comments; None where not stated.

    Understood: Sleep-EDF's ``X F X Female_33yr`` (EDF+ ``code sex birthdate name``, the name holding
    sex and age), ``Male_46yr``, and ``age: 45`` / ``sex: M`` (``<age>: 45 <sex>: M``) comments.
    """
    age_match = _AGE_YEARS.search(text) or _AGE_KEY.search(text)
    age = float(age_match.group(1)) if age_match else None
    tokens = text.split()
    sex_match = _SEX_KEY.search(text)
    if sex_match:
        sex = sex_match.group(1).upper()
    elif len(tokens) > 1 and tokens[1] in ("F", "M"):  # EDF+ patient field: the second subfield
        sex = tokens[1]
    else:
        words = re.findall(r"(female|male)", text, re.IGNORECASE)
        sex = words[0][0].upper() if words else None
    return (age if age is not None and 0 < age < 120 else None), (None if sex is None else sex == "M")


def pick_lead(preferred: tuple[str, ...], available: list[str], source: Path) -> str | None:
    """The first of ``preferred`` that ``available`` holds (the readers' case- and prefix-insensitive
    matching), as the reader should be asked for it; None when none is there."""
    for name in preferred:
        try:
            resolve_channels([name], available, source)
        except ValueError:
            continue
        return name
    return None


def _sleep_edf_source(psg: Path) -> tuple[list[str], str, Callable[[list[str]], Recording]]:
    """(channels, demographics text, reader) of a Sleep-EDF PSG (its hypnogram found beside it)."""
    from ..data.eeg.sleep_edf import find_pairs, read_edf_header, read_sleep_edf

    header = read_edf_header(psg)
    hypnograms = [hyp for p, hyp in find_pairs(psg.parent, include_st=True)[0] if p.resolve() == psg.resolve()]
    hypnogram = hypnograms[0] if hypnograms else None  # None: the reader names the missing file
    return header.labels, header.patient, lambda channels: read_sleep_edf(psg, hypnogram, channels)


def _physionet2018_source(record: Path) -> tuple[list[str], str, Callable[[list[str]], Recording]]:
    """(channels, header comments, reader) of a PhysioNet 2018 WFDB record."""
    import wfdb

    from ..data.eeg.physionet2018 import read_physionet2018

    try:
        header = wfdb.rdheader(str(record))
    except Exception as err:  # wfdb raises many types on bad headers
        raise ValueError(f"{record}.hea: corrupt WFDB header ({err})") from None
    comments = " ; ".join(str(c) for c in header.comments or [])
    return list(header.sig_name), comments, lambda channels: read_physionet2018(record, channels)


def _dreams_source(signal_file: Path) -> tuple[list[str], str, Callable[[list[str]], Recording]]:
    """(channels, EDF patient field, reader) of a DREAMS excerpt."""
    from ..data.eeg.dreams import find_excerpts, inspect_excerpt, read_dreams
    from ..data.eeg.sleep_edf import read_edf_header

    excerpt = next(e for e in find_excerpts(signal_file.parent)[0] if e.name == signal_file.stem.lower())
    layout = inspect_excerpt(excerpt)
    patient = read_edf_header(excerpt.signal_file).patient if excerpt.signal_file.suffix.lower() == ".edf" else ""
    return layout.channels, patient, lambda picked: read_dreams(excerpt, picked, layout)


def source_kind(path: Path) -> str:
    """``sleep-edf`` (``*-PSG.edf``), ``physionet2018`` (a WFDB record or its ``.hea``) or ``dreams``
    (``excerptN.edf`` / ``.txt``); ``ValueError`` naming the file otherwise."""
    if path.name.upper().endswith("-PSG.EDF"):
        return "sleep-edf"
    if path.suffix == ".hea" or path.with_name(path.name + ".hea").exists():
        return "physionet2018"
    if re.fullmatch(r"excerpt\d+\.(edf|txt)", path.name, re.IGNORECASE):
        return "dreams"
    raise ValueError(
        f"{path}: not a source YASA can stage here; expected a Sleep-EDF '*-PSG.edf', a PhysioNet 2018 "
        "WFDB record ('<record>.hea') or a DREAMS 'excerptN.edf' / '.txt'"
    )


SOURCES = {"sleep-edf": _sleep_edf_source, "physionet2018": _physionet2018_source, "dreams": _dreams_source}


def stage_source(
    path: str | Path,
    crop_wake_minutes: float | None = CROP_WAKE_MINUTES,
    age: float | None = None,
    male: bool | None = None,
    upsample: bool = False,
) -> StagedNight:
    """Read one source file with its reader and stage it with YASA on the reader's epoch grid.

    ``upsample``: a recording at or below :data:`MIN_SFREQ` is resampled to :data:`UPSAMPLE_TO` instead of
    skipped (for datasets whose card allows upsampling).

    EEG: :data:`LEADS` (first present), EOG when the file has one (the eeg+eog classifier). Age and sex:
    ``age`` / ``male`` when given, else the header's (:func:`demographics_from_text`), else omitted.
    The epochs within ``crop_wake_minutes`` of the first / last scored sleep epoch are staged (None:
    the whole grid). Raises :class:`YasaSkip` when the file has no EEG lead YASA can use or its rate is
    too low, ``ValueError`` (the readers') on unreadable files.
    """
    path = Path(path)
    kind = source_kind(path)
    record = path.with_suffix("") if kind == "physionet2018" and path.suffix == ".hea" else path
    available, text, read = SOURCES[kind](record)
    eeg = pick_lead(LEADS[kind].eeg, available, record)
    if eeg is None:
        raise YasaSkip(
            f"no EEG lead YASA can use (looked for {', '.join(LEADS[kind].eeg)}; has {', '.join(available)})"
        )
    eog = pick_lead(LEADS[kind].eog, available, record)
    recording = read([eeg] if eog is None else [eeg, eog])
    header_age, header_male = demographics_from_text(text)
    age = header_age if age is None else age
    male = header_male if male is None else male
    first, labels, signals, sfreq = staged_span(recording, crop_wake_minutes)
    upsampled_from = None
    if upsample and sfreq <= MIN_SFREQ:
        from ..data.eeg.preprocess import resample

        signals, upsampled_from, sfreq = [resample(x, sfreq, UPSAMPLE_TO) for x in signals], sfreq, UPSAMPLE_TO
    predicted = stage_with_yasa(signals[0], sfreq, signals[1] if eog else None, age=age, male=male)
    both = age is not None and male is not None
    spe = int(round(EPOCH_SECONDS * sfreq))
    return StagedNight(
        recording=recording.recording,
        subject=recording.subject,
        source=record,
        eeg=eeg,
        eog=eog,
        age=age if both else None,
        male=male if both else None,
        first_epoch=first,
        labels=labels,
        predicted=predicted,
        eeg_uv=signals[0][: labels.size * spe].reshape(-1, spe),
        sfreq=sfreq,
        upsampled_from=upsampled_from,
    )


def staged_span(
    recording: Recording, crop_wake_minutes: float | None
) -> tuple[int, np.ndarray, list[np.ndarray], float]:
    """The reader's grid cut to the epochs to stage: (first epoch, labels ``(E,)``, each channel's
    samples of those epochs ``(E * 30 s * sfreq,)`` at the first channel's rate, that rate)."""
    from ..data.eeg.preprocess import resample, wake_crop_mask

    sfreq = float(recording.sfreqs[0])
    spe = int(round(EPOCH_SECONDS * sfreq))
    signals = [
        resample(np.asarray(x, dtype=np.float64), fs, sfreq) for x, fs in zip(recording.signals, recording.sfreqs)
    ]
    start = int(round(recording.grid_start_seconds * sfreq))
    n_epochs = min(recording.epoch_labels.size, min(x.size - start for x in signals) // spe)
    keep = np.flatnonzero(wake_crop_mask(recording.epoch_labels[:n_epochs], crop_wake_minutes))
    if keep.size == 0:
        raise YasaSkip(f"{recording.recording}: no whole 30-s epoch on the scored grid")
    first, stop = int(keep[0]), int(keep[-1]) + 1
    cut = [x[start + first * spe : start + stop * spe] for x in signals]
    return first, recording.epoch_labels[first:stop].copy(), cut, sfreq


def find_sources(folder: str | Path) -> list[Path]:
    """Every source under ``folder`` YASA can be pointed at: Sleep-EDF PSGs, WFDB records, DREAMS excerpts."""
    from ..data.eeg.dreams import find_excerpts
    from ..data.eeg.physionet2018 import find_records
    from ..data.eeg.sleep_edf import find_pairs

    folder = Path(folder)
    psgs = [psg for psg, hypnogram in find_pairs(folder, include_st=True)[0] if hypnogram is not None]
    return psgs + find_records(folder) + [e.signal_file for e in find_excerpts(folder)[0]]


def stage_folder(
    folder: str | Path, crop_wake_minutes: float | None = CROP_WAKE_MINUTES, log: Callable[[str], Any] = print
) -> list[StagedNight]:
    """:func:`stage_source` on every source of :func:`find_sources`; a :class:`YasaSkip` is logged
    (``skip <file>: <reason>``) and the recording left out."""
    import_yasa()  # a missing extra fails once, before any file is read
    staged = []
    for path in find_sources(folder):
        try:
            staged.append(stage_source(path, crop_wake_minutes))
        except YasaSkip as reason:
            log(f"skip {path}: {reason}")
    return staged


def agreement(labels: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """YASA vs the scorer on the scored epochs (``labels >= 0``) of ``labels (E,)`` / ``predicted (E,)``:
    accuracy, Cohen's kappa, per-stage recall (None for a stage the scorer never gave), the confusion
    matrix ``(5, 5)`` (rows: scorer, columns: YASA, counts) and the epochs compared."""
    from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix

    scored = np.asarray(labels) >= 0
    y_true, y_pred = np.asarray(labels)[scored], np.asarray(predicted)[scored]
    counts = confusion_matrix(y_true, y_pred, labels=list(range(len(STAGES))))
    totals = counts.sum(axis=1)
    return {
        "epochs": int(scored.sum()),
        "accuracy": float(accuracy_score(y_true, y_pred)) if y_true.size else None,
        "kappa": float(cohen_kappa_score(y_true, y_pred)) if y_true.size else None,
        "recall": {s: (float(counts[i, i] / totals[i]) if totals[i] else None) for i, s in enumerate(STAGES)},
        "confusion": counts.tolist(),
    }


__all__ = [
    "LEADS",
    "StagedNight",
    "YasaSkip",
    "agreement",
    "demographics_from_text",
    "find_sources",
    "import_yasa",
    "stage_folder",
    "stage_source",
    "stage_with_yasa",
]


YASA_ROW = "yasa"
"""The staging tables' row of YASA's pretrained classifier (zero-shot: the same predictions at every s)."""


def manifest_source(sources: list[dict[str, str]]) -> Path:
    """The file of a cache recording's ``sources`` that :func:`stage_source` reads (a Sleep-EDF PSG, a WFDB
    ``.hea``, a DREAMS excerpt); ``ValueError`` naming the files when none is."""
    for entry in sources:
        path = Path(entry["path"])
        try:
            source_kind(path)
        except ValueError:
            continue
        return path
    raise ValueError(f"no source YASA can stage among {[s['path'] for s in sources]}")


def window_predictions(
    cache_dir: str | Path, recordings: np.ndarray, epochs: np.ndarray, progress: bool = False
) -> tuple[np.ndarray, list[str]]:
    """YASA's stage for every cached window: ``recordings (N,)`` / ``epochs (N,)`` (the window's epoch on its
    reader's grid, the adapter's ``window`` meta) -> ``(N,)`` codes 0..4, -1 where YASA staged nothing (a
    recording skipped, or a window outside the staged span), and one line per skipped recording with its
    reason. Reads each recording's SOURCE file (from the cache manifest), never the z-scored windows."""
    from ..data.catalog import preparable
    from ..data.eeg.cache import load_manifest

    manifest = load_manifest(cache_dir)
    by_id = {r["recording"]: r for r in manifest["recordings"]}
    card = preparable().get(manifest.get("dataset", ""))
    upsample = bool(card is not None and card.allow_upsampling)
    recordings, epochs = np.asarray(recordings), np.asarray(epochs)
    predicted = np.full(len(recordings), -1, dtype=np.int64)
    skipped: list[str] = []
    for recording in dict.fromkeys(recordings.tolist()):
        mask = recordings == recording
        try:
            staged = stage_source(manifest_source(by_id[recording]["sources"]), upsample=upsample)
        except (YasaSkip, ValueError, OSError) as err:  # no EEG lead, unreadable or missing source
            skipped.append(f"{recording}: {err}")
            continue
        offset = epochs[mask] - staged.first_epoch
        inside = (offset >= 0) & (offset < staged.predicted.size)
        values = np.full(mask.sum(), -1, dtype=np.int64)
        values[inside] = staged.predicted[offset[inside]]
        predicted[mask] = values
        if progress or staged.upsampled_from:
            rate = f", upsampled from {staged.upsampled_from:g} Hz" if staged.upsampled_from else ""
            print(f"yasa: staged {recording} ({int(inside.sum())} of {int(mask.sum())} windows{rate})")
    return predicted, skipped
