"""Signal augmentations of EEG training views (``channels`` view policy, train views only).

Every item of every view draws its own parameters from the policy's generator, so the same
generator seed gives the same views. All functions take a view ``(n, T)`` or a stacked view
``(n, g, T)`` (the g channels of an item share their draw) and return a new tensor of that shape:

- :func:`scale_amplitude`: multiply by a gain drawn log-uniformly in ``[low, high]``;
- :func:`shift_time`: circular shift by up to ``± max_shift`` samples (uniform integer);
- :func:`add_noise`: add white Gaussian noise of standard deviation ``std`` (prepared windows are
  z-scored, so ``std`` is relative to the signal);
- :func:`band_stop`: with probability ``p``, zero the rFFT bins of a band ``width_hz`` wide whose
  centre is uniform in ``[low_hz, high_hz]`` (an ideal notch; the band-power baseline's band is
  0.5-30 Hz, so a stop band removes part of one spectral feature).
"""

from __future__ import annotations

import math

import torch

from ..views import draw_device


def _uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``(n,)`` uniform draws in [0, 1) on the view's device (drawn where the generator lives)."""
    return torch.rand(n, generator=generator, device=draw_device(generator, device)).to(device)


def _per_item(values: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """``(n,)`` -> broadcastable against ``view (n, T)`` or ``(n, g, T)``."""
    return values.view(-1, *([1] * (view.dim() - 1)))


def scale_amplitude(view: torch.Tensor, low: float, high: float, generator: torch.Generator | None) -> torch.Tensor:
    """Gain per item, log-uniform in ``[low, high]`` (``0 < low <= high``)."""
    u = _uniform(view.shape[0], generator, view.device)
    gain = torch.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return view * _per_item(gain.to(view.dtype), view)


def shift_time(view: torch.Tensor, max_shift: int, generator: torch.Generator | None) -> torch.Tensor:
    """Circular shift of each item by an integer uniform in ``[-max_shift, max_shift]`` samples."""
    n, length = view.shape[0], view.shape[-1]
    if max_shift <= 0:
        return view
    shifts = torch.randint(
        -max_shift, max_shift + 1, (n,), generator=generator, device=draw_device(generator, view.device)
    ).to(view.device)
    index = (torch.arange(length, device=view.device)[None] - shifts[:, None]) % length  # (n, T)
    return gather_time(view, index)


def gather_time(view: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per-item time indexing: ``(n, T)`` or ``(n, g, T)`` with an ``(n, T')`` sample index -> ``(n, T')`` or
    ``(n, g, T')`` (every channel group of an item takes the same samples)."""
    if view.dim() == 3:
        index = index[:, None].expand(-1, view.shape[1], -1)
    return torch.gather(view, -1, index)


def add_noise(view: torch.Tensor, std: float, generator: torch.Generator | None) -> torch.Tensor:
    """``view + std * N(0, 1)`` (independent per sample and channel)."""
    noise = torch.randn(view.shape, generator=generator, device=draw_device(generator, view.device))
    return view + std * noise.to(device=view.device, dtype=view.dtype)


def band_stop(
    view: torch.Tensor,
    sfreq: float,
    width_hz: float,
    p: float,
    low_hz: float,
    high_hz: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """With probability ``p`` per item, zero the rFFT bins within ``width_hz / 2`` of a centre frequency
    uniform in ``[low_hz, high_hz]``. The whole batch goes through one rFFT / inverse rFFT (no host
    read of which items are hit), so the other items come back through the FFT round trip: equal to
    the input up to float rounding (``p = 0`` returns the input itself)."""
    n, length = view.shape[0], view.shape[-1]
    apply = _uniform(n, generator, view.device) < p
    centre = low_hz + _uniform(n, generator, view.device) * (high_hz - low_hz)
    if p <= 0:
        return view
    spectrum = torch.fft.rfft(view.float(), dim=-1)
    freqs = torch.fft.rfftfreq(length, d=1.0 / sfreq, device=view.device)  # (F,)
    stop = ((freqs[None] - centre[:, None]).abs() <= width_hz / 2) & apply[:, None]  # (n, F)
    if view.dim() == 3:
        stop = stop[:, None]
    spectrum = spectrum.masked_fill(stop, 0)
    return torch.fft.irfft(spectrum, n=length, dim=-1).to(view.dtype)
