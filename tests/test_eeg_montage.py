"""Montage-aware channel embeddings (issue 27 item 5): electrode lookup and the encoder's ``montage`` mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from multiview_app.data.eeg.dreams import known_derivations
from multiview_app.data.eeg.electrodes import (
    MONTAGES,
    derivation_members,
    derivation_positions,
    electrode_positions,
    split_derivation,
)
from multiview_app.models.eeg import HEAD_RADIUS_M, MontageEmbedding
from multiview_app.models.encoders import build_encoder


def _montage_encoder(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_encoder("eeg", "conv", width=16, out_dim=8, groups=4, channel_mode="montage", **kwargs).eval()


def test_derivation_names_are_split_and_looked_up_in_the_template_montage():
    import mne

    assert split_derivation("EEG Fpz-Cz") == ("Fpz", "Cz")
    assert split_derivation(" C3-M2 ") == ("C3", "M2")
    assert split_derivation("Cz") == ("Cz", None)
    active, reference = derivation_positions("C3-A1")
    available = [m for m in MONTAGES if m in mne.channels.get_builtin_montages()]
    template = mne.channels.make_standard_montage(available[0]).get_positions()["ch_pos"]
    np.testing.assert_array_equal(active, template["C3"])
    np.testing.assert_array_equal(reference, template["A1"])
    assert derivation_positions("cz")[1] is None
    assert len(electrode_positions()) > 300
    # heads are ~0.19 m wide: the mastoids sit about that far apart
    assert 0.15 < float(np.linalg.norm(electrode_positions()["m1"] - electrode_positions()["m2"])) < 0.2


@pytest.mark.parametrize(
    "name, match",
    [
        ("C3-X9", "electrode 'X9' is not in the 10-05 montage"),
        ("C3-M2-Fz", "expected 'ACTIVE-REFERENCE'"),
        ("EOG horizontal", "electrode 'EOG horizontal' is not in the 10-05 montage"),
    ],
)
def test_bad_derivations_name_the_channel_and_the_electrode(name: str, match: str):
    with pytest.raises(ValueError, match=match) as info:
        derivation_positions(name)
    assert repr(name) in str(info.value)


def test_fourier_features_approximate_the_gaussian_kernel_they_claim():
    """E[cos(2 pi B (a - b))] over B ~ N(0, s^2 I) is exp(-(2 pi s)^2 |a - b|^2 / 2) (positions in head radii)."""
    scale, rows = 0.5, 20_000
    embedding = MontageEmbedding(width=4, frequencies=rows, scale=scale)
    for a, b in [("C3-M2", "C4-M1"), ("C3-M2", "C3-A1"), ("Fpz-Cz", "O2-M1"), ("Cz-A1", "C3-M2")]:
        fa, fb = embedding.position_features(a), embedding.position_features(b)
        active_a, ref_a = derivation_positions(a)
        active_b, ref_b = derivation_positions(b)
        for sl, pa, pb in [(slice(0, 2 * rows), active_a, active_b), (slice(2 * rows, 4 * rows), ref_a, ref_b)]:
            estimate = float(fa[sl] @ fb[sl]) / rows
            delta = np.linalg.norm((pa - pb) / HEAD_RADIUS_M)
            assert estimate == pytest.approx(math.exp(-((2 * math.pi * scale) ** 2) * delta**2 / 2), abs=0.03)
        assert float(fa[-1]) == float(fb[-1]) == 1.0  # both have a reference


def test_montage_mode_embeds_unseen_derivations_from_their_electrodes():
    encoder = _montage_encoder()
    assert encoder.channel_embedding is None and encoder.montage_embedding is not None
    x = torch.randn(3, 3000)
    out = {name: encoder(x, name) for name in ("C3-M2", "Cz-A1", "Fpz-Cz", "Pz-Oz")}
    assert all(torch.isfinite(v).all() for v in out.values())
    # every derivation, seen in pretraining or not, gets its own embedding (no shared "unknown" row)
    names = list(out)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not torch.allclose(out[a], out[b]), (a, b)
    torch.testing.assert_close(encoder(x, "EEG Cz-A1"), encoder(x, "cz-a1"))
    # a group "A+B" uses the mean of its members' position features
    embedding = encoder.montage_embedding
    group = embedding.position_features("C3-M2+O1-M2")
    torch.testing.assert_close(group, (embedding.position_features("C3-M2") + embedding.position_features("O1-M2")) / 2)
    # DREAMS' channel "central" (each excerpt's C3-A1 or CZ-A1) is the group of the derivations its card names
    assert derivation_members("central") == derivation_members("C3-A1+CZ-A1") == ["C3-A1", "CZ-A1"]
    assert derivation_members("central") == known_derivations()
    torch.testing.assert_close(
        embedding.position_features("central"),
        (embedding.position_features("C3-A1") + embedding.position_features("Cz-A1")) / 2,
    )
    # a reference-free name has zero reference features and flag 0
    cz = embedding.position_features("Cz")
    assert float(cz[-1]) == 0.0 and torch.count_nonzero(cz[2 * 16 : 4 * 16]) == 0
    with pytest.raises(ValueError, match="needs each view's derivation name"):
        encoder(x, None)
    with pytest.raises(ValueError, match="unknown_rate only applies"):
        _montage_encoder(unknown_rate=0.1)
    with pytest.raises(ValueError, match="channel_mode: expected one of embedding, agnostic, montage"):
        build_encoder("eeg", "conv", width=16, out_dim=8, groups=4, channel_mode="electrodes")


def test_montage_mode_batches_views_trains_the_projection_and_round_trips():
    encoder = _montage_encoder().train()
    xs = [torch.randn(4, 3000) for _ in range(3)]
    names = ["F3-M2", "Fpz-Cz", "C3-M2+O1-M2"]
    batched = encoder.forward_views(xs, names)
    looped = torch.stack([encoder(x, n) for x, n in zip(xs, names)], dim=1)
    torch.testing.assert_close(batched, looped, rtol=1e-4, atol=1e-5)
    batched.square().sum().backward()
    grad = encoder.montage_embedding.project.weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    assert encoder.montage_embedding.frequencies.grad is None  # the Fourier matrix is fixed
    state = encoder.state_dict()
    assert "montage_embedding.frequencies" in state
    other = build_encoder("eeg", "conv", width=16, out_dim=8, groups=4, channel_mode="montage")
    other.load_state_dict(state)
    other.eval(), encoder.eval()
    torch.testing.assert_close(other(xs[0], "Cz-A1"), encoder(xs[0], "Cz-A1"))
