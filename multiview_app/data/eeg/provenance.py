"""The generator's provenance in synthetic recordings: which generator version, seed
and synthetic person wrote a file, stored where each real format keeps free text (the EDF header's
recording field, WFDB header comments), read back at prepare time into the cache manifest, and the
recordings' identity for the sleep-staging overlap guard: source sha256 and, for synthetic files, the
person, so that the same synthetic person written in another format is recognized."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

GENERATOR = "mvapp-synth"
GENERATOR_VERSION = 4
"""Version of the synthetic generator (``synth/``): 1 = before the real-data calibration (files written
before it carry no provenance), 2 = real-data night structure and central amplitudes,
the SC cohort and bipolar Sleep-EDF derivations, 3 = wake and N1 closer to the real DREAMS epochs (the SC age
effect on N2 / N3 slow waves only, a lower SC noise floor, arousal and wake alpha / beta levels), 4 = an N2 /
N3 delta background the SC age / sex effect leaves alone (delta ordered N3 > N2 > N1 in older subjects), the real
DREAMS wake theta / beta and a larger wake alpha, N1 alpha dropout and more slow rolling eye movements, REM
interrupted by N2 as in the real SC hypnograms."""
_TOKENS = re.compile(rf"{GENERATOR}/(\d+) seed=(-?\d+) person=(\d+) night=(\d+)")
EDF_RECORDING_FIELD = (88, 168)
"""Byte range of an EDF header's 80-character local recording identification."""


def provenance_text(seed: int, person: int, night: int) -> str:
    """``"mvapp-synth/<version> seed=<seed> person=<person> night=<night>"`` (space-separated tokens
    without inner spaces, as EDF+ recording subfields must be; ``night`` counts from 1)."""
    return f"{GENERATOR}/{GENERATOR_VERSION} seed={seed} person={person} night={night}"


def parse_provenance(text: str) -> dict[str, int] | None:
    """The ``version``, ``seed``, ``person``, ``night`` in ``text`` (an EDF recording field, WFDB
    comments), or None when it holds no provenance."""
    match = _TOKENS.search(text)
    if match is None:
        return None
    return dict(zip(("version", "seed", "person", "night"), map(int, match.groups())))


def read_provenance(files: list[Path]) -> str | None:
    """The provenance text written into one recording's ``files`` (an ``.edf``'s recording field or a
    WFDB header's ``#`` comment lines: a ``.hea`` given, or the one beside a ``.dat`` signal file; other
    files are not opened), or None when none has it (real recordings, synthetic files older than
    version 2)."""
    headers = [f.with_suffix(".hea") for f in files if f.suffix == ".dat" and f.with_suffix(".hea").exists()]
    for path in [*files, *headers]:
        if path.suffix.lower() == ".edf":
            with open(path, "rb") as handle:
                text = handle.read(EDF_RECORDING_FIELD[1])[EDF_RECORDING_FIELD[0] :].decode("latin-1")
        elif path.suffix == ".hea":
            text = "\n".join(line for line in path.read_text(encoding="latin-1").splitlines() if line.startswith("#"))
        else:
            continue
        match = _TOKENS.search(text)
        if match is not None:
            return match.group(0)
    return None


def synthetic_person(provenance: str) -> str | None:
    """The person a provenance text names, whatever the night or format:
    ``"synthetic person mvapp-synth/<version> seed=<seed> person=<person>"``; None when unparsable."""
    fields = parse_provenance(provenance)
    if fields is None:
        return None
    return f"synthetic person {GENERATOR}/{fields['version']} seed={fields['seed']} person={fields['person']}"


def recording_identities(manifest: dict[str, Any], subjects: list[str]) -> dict[str, str]:
    """``{identity: "subject <name> (<file>)"}`` for the recordings of ``subjects`` in a prepared cache's
    manifest: the sha256 of every source file (the same bytes under any name), and for a synthetic
    recording its person (:func:`synthetic_person`, from the manifest's ``provenance``), so the same
    synthetic person written in another format, or another night of them, shares an identity."""
    wanted = set(subjects)
    identities: dict[str, str] = {}
    for record in manifest["recordings"]:
        if record["subject"] not in wanted:
            continue
        sources = record.get("sources", [])
        for source in sources:
            identities[source["sha256"]] = f"subject {record['subject']} ({source['path']})"
        person = synthetic_person(record.get("provenance") or "")
        if person is not None and sources:
            identities[person] = f"subject {record['subject']} ({sources[0]['path']}, {person})"
    return identities
