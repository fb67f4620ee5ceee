"""The datasets/ catalog: every card validates, every adapter has a card, the code reads its facts
from the cards, bad cards are refused with the file and key, and `mvapp data list` prints them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multiview_app.cli import main
from multiview_app.data.adapters import available_adapters
from multiview_app.data.catalog import catalog_dir, get_card, load_catalog, preparable, read_card
from multiview_app.data.eeg import stages

ROOT = Path(__file__).resolve().parents[1]


def test_catalog_is_the_top_level_datasets_folder_and_not_a_package() -> None:
    assert catalog_dir() == ROOT / "datasets"
    assert not (ROOT / "datasets" / "__init__.py").exists()  # would shadow HF `datasets`


def test_every_card_validates_and_names_its_file() -> None:
    cards = load_catalog()
    assert {
        "sleep-edf",
        "physionet2018",
        "dreams_spindles",
        "synthetic-psg",
        "digits",
        "domainnet",
        "digit-domains",
        "image-text-pairs",
        "digit-captions",
    } <= set(cards)
    for path in sorted((ROOT / "datasets").glob("*.yaml")):
        assert read_card(path).name == path.stem


def test_every_adapter_has_a_card() -> None:
    covered = {adapter for card in load_catalog().values() for adapter in card.adapters}
    missing = sorted(set(available_adapters()) - covered)
    assert not missing, f"adapters without a dataset card in datasets/: {missing}"


def test_every_card_names_registered_adapters() -> None:
    registered = set(available_adapters())
    for card in load_catalog().values():
        assert set(card.adapters) <= registered, f"{card.name}: unknown adapters {set(card.adapters) - registered}"


def test_code_reads_label_maps_and_channels_from_the_cards() -> None:
    sleep_edf = get_card("sleep-edf")
    assert stages.SLEEP_EDF_LABELS == sleep_edf.label_codes(stages.EXCLUDED)
    assert stages.SLEEP_EDF_LABELS["Sleep stage 4"] == stages.STAGES.index("N3")  # R&K 3 + 4 -> N3
    assert stages.SLEEP_EDF_LABELS["Sleep stage ?"] == stages.EXCLUDED
    assert stages.SLEEP_EDF_LABELS["Movement time"] == stages.EXCLUDED
    assert stages.SLEEP_EDF_EEG == tuple(sleep_edf.default_channels) == ("Fpz-Cz", "Pz-Oz")
    assert len(stages.PHYSIONET2018_EEG) == 6 and stages.PHYSIONET2018_LABELS["R"] == stages.STAGES.index("REM")
    for card in load_catalog().values():  # sleep cards share the project's stage vocabulary
        if card.modality == "eeg":
            assert tuple(card.labels.classes) == stages.STAGES
            assert card.labels.epoch_seconds == stages.EPOCH_SECONDS
    assert set(preparable()) == {"sleep-edf", "physionet2018", "dreams", "edf", "bids"}
    dreams = get_card("dreams_spindles")
    assert stages.DREAMS_LABELS == dreams.label_codes(stages.EXCLUDED)
    assert stages.DREAMS_LABELS["1"] == stages.DREAMS_LABELS["0"] == stages.STAGES.index("N3")  # R&K S3 + S4 -> N3
    assert stages.DREAMS_LABELS["-1"] == stages.EXCLUDED  # movement
    assert dreams.labels.scored_seconds == 5 and {r.sfreq for r in dreams.recordings.values()} == {50, 100, 200}


def test_synth_psg_formats_are_the_writers() -> None:
    from multiview_app.data.cli import SYNTH_FORMATS
    from multiview_app.data.eeg.synth import WRITERS

    assert SYNTH_FORMATS == tuple(WRITERS)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda raw: raw.update(licence="x"), "licence: Extra inputs are not permitted"),
        (lambda raw: raw["labels"]["mapping"].update({"Sleep stage 5": "N5"}), "labels"),
        (lambda raw: raw.update(default_channels=["Cz"]), "default_channels"),
        (lambda raw: raw.pop("source"), "source: Field required"),
    ],
)
def test_bad_card_is_one_error_naming_file_and_key(tmp_path: Path, edit, message: str) -> None:
    import yaml

    raw = yaml.safe_load((ROOT / "datasets" / "sleep-edf.yaml").read_text())
    edit(raw)
    path = tmp_path / "sleep-edf.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=message) as info:
        read_card(path)
    assert str(path) in str(info.value)


def test_unknown_dataset_lists_the_catalog() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'mnist'.*sleep-edf"):
        get_card("mnist")


def test_data_list_prints_every_card(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in load_catalog():
        assert name in out
    assert main(["data", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["name"] for row in rows} == set(load_catalog())
    assert all(row["license"] and row["obtain"] for row in rows if row["kind"] != "format")
