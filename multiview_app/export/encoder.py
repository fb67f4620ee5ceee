"""Encoders that leave the project: ``mvapp export-model`` writes, :func:`load_encoder` reads.

An encoder folder holds:

- ``encoder.safetensors``: the encoder's weights (a timm image encoder: the timm model's own state dict,
  so ``timm.create_model(name, pretrained=False, num_classes=0).load_state_dict(...)`` takes it);
- ``config.json``: format, modality, encoder name and build arguments, every tensor's name / shape /
  dtype, the weights' sha256, the input (EEG: the input contract of ``data/eeg/contract.py``; images:
  size and normalization), where it came from (run, weights, loss, data, steps, metrics);
- ``README.md``: the model card (the same facts for people);
- ``encoder.onnx`` (``--onnx``): the encoder as an ONNX graph with a dynamic batch axis, checked against
  PyTorch under onnxruntime when it is written (the largest difference is in ``config.json``).

Nothing is pickled: weights are safetensors, the rest JSON / text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..fileio import atomic_write_json, atomic_write_text, atomic_write_with, sha256_file
from ..models.encoders import TimmImageEncoder, build_encoder

ENCODER_FORMAT = "multiview_app.encoder/1"
WEIGHTS_FILE = "encoder.safetensors"
CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
ONNX_FILE = "encoder.onnx"
ONNX_TOLERANCE = 1e-4
"""Largest absolute difference between onnxruntime's and PyTorch's outputs accepted when writing ``--onnx``."""


class EncoderExportError(ValueError):
    """Bad export request, or an encoder folder that cannot be loaded (the message names file / tensor)."""


# ----------------------------------------------------------------------------- input wrappers


class ChannelWindowsEncoder(nn.Module):
    """An EEG encoder over whole windows: ``x (n, C, T)`` (the contract's channels, in order) ->
    ``(n, V, f)``, one row per eval view (a channel, or a stacked group of channels) of the contract."""

    def __init__(self, encoder: nn.Module, channels: list[str], views: list[str]) -> None:
        super().__init__()
        self.encoder = encoder
        self.views = list(views)
        self.spans: list[tuple[int, int]] = []
        for view in views:
            members = [channels.index(m) for m in view.split("+")]
            if members != list(range(members[0], members[0] + len(members))):
                raise EncoderExportError(f"view {view!r}: its channels are not contiguous in {channels}")
            self.spans.append((members[0], members[0] + len(members)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[:, a] if b - a == 1 else x[:, a:b] for a, b in self.spans]
        return self.encoder.forward_views(parts, self.views)


# ----------------------------------------------------------------------------- facts of a run


def _run_steps_and_loss(run_dir: Path, weights: str) -> dict[str, Any]:
    """Optimizer steps behind ``weights`` (``init``: 0, ``step_N``: N, ``final``: the last logged step) and
    the loss logged at that step in ``metrics.jsonl`` (None when not logged)."""
    if weights == "init":
        return {"steps": 0, "final_loss": None}
    wanted = int(weights.removeprefix("step_")) if weights.startswith("step_") else None
    path = run_dir / "metrics.jsonl"
    last: dict[str, Any] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if "loss" in record and "step" in record and (wanted is None or record["step"] <= wanted):
                last = record
    if wanted is not None:
        return {"steps": wanted, "final_loss": last.get("loss") if last.get("step") == wanted else None}
    return {"steps": last.get("step"), "final_loss": last.get("loss")}


#: substrings of the metric keys a model card lists: accuracies (``accuracy``, the probe's ``logreg_acc`` /
#: ``knn_acc``), kappa, top-1, recall (``R@K`` of the retrieval evaluator) and macro F1
HEADLINE_KEYS = ("acc", "kappa", "top1", "recall", "R@", "macro_f1")
#: the model card's load snippet comment by the ``input`` kind of config.json (only EEG encoders carry an
#: ``input_contract``; the others' input is the card's Input section)
LOAD_COMMENTS: dict[str, str] = {
    "eeg_windows": "eval mode; encoder.input_contract: the EEG window contract above",
}


def _headline_numbers(result: Any, prefix: str = "", depth: int = 0) -> dict[str, float]:
    """Numeric leaves of an evaluation result whose key names a headline metric (at most 4 levels deep)."""
    found: dict[str, float] = {}
    if not isinstance(result, dict) or depth > 4:
        return found
    for key, value in result.items():
        path = f"{prefix}{key}"
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and any(h in str(key) for h in HEADLINE_KEYS)
        ):
            found[path] = float(value)
        elif isinstance(value, dict):
            found.update(_headline_numbers(value, f"{path}.", depth + 1))
    return found


def run_metrics(run_dir: Path, limit: int = 12) -> dict[str, dict[str, float]]:
    """``{eval file stem: {metric path: value}}`` from ``eval/*.json`` (``limit`` values per file)."""
    metrics: dict[str, dict[str, float]] = {}
    for path in sorted((run_dir / "eval").glob("*.json")) if (run_dir / "eval").is_dir() else []:
        try:
            numbers = _headline_numbers(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
        if numbers:
            metrics[path.stem] = dict(list(numbers.items())[:limit])
    return metrics


def _psg_modality_input(run_dir: Path, modality: str) -> dict[str, Any] | None:
    """A PSG modality run's contract of ``modality`` (its groups, channels, rate, upsampled groups), else None."""
    from ..train.input_contract import read_run_contract

    contract = read_run_contract(run_dir) or {}
    own = contract.get("modalities", {}).get(modality)
    if own is None:
        return None
    return {"kind": "psg_modality", "contract": own, "contract_origin": "input_contract.json of the run"}


def _input_description(cfg: Any, run_dir: Path, modality: str) -> dict[str, Any]:
    """What the encoder's input must be: the EEG contract, a PSG modality's contract, image size +
    preprocessing, or the text tower."""
    psg = _psg_modality_input(run_dir, modality)
    if psg is not None:
        return psg
    if modality == "eeg":
        from ..data.adapters import build_adapter
        from ..data.views import build_view_policy
        from ..train.input_contract import read_run_contract, run_input_contract

        contract = read_run_contract(run_dir)
        origin = "input_contract.json of the run"
        if contract is None:  # a run from before contracts: its config and the cache it names now
            adapter = build_adapter(cfg.data.adapter, cfg.data.options)
            policy = build_view_policy(cfg.views.policy, cfg.views.k, cfg.views.options, adapter)
            contract = run_input_contract(cfg, adapter, policy)
            origin = f"the run's config and the cache now at {cfg.data.options.get('cache')} (the run has no input_contract.json)"
            if contract is None:
                raise EncoderExportError(
                    f"run {run_dir}: data adapter {cfg.data.adapter!r} gives no EEG input contract"
                )
        return {"kind": "eeg_windows", "contract": contract, "contract_origin": origin}
    if modality == "image":
        size = int((cfg.views.options or {}).get("image_size", 32))
        return {
            "kind": "image",
            "shape": ["n", 3, size, size],
            "image_size": size,
            "dtype": "float32",
            "preprocessing": f"RGB in [0, 1], resized to round({size} / 0.875) px, center-cropped to {size} px, "
            "normalized with ImageNet mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225)",
        }
    return {"kind": modality, "note": "token ids from the encoder's tokenizer (see its name)"}


# ----------------------------------------------------------------------------- export


def _choose_modality(encoders: dict[str, Any], modality: str | None, run_dir: Path) -> str:
    names = list(encoders)
    if modality is None:
        if len(names) > 1:
            raise EncoderExportError(f"run {run_dir} has encoders for {', '.join(names)}; choose one with --modality")
        return names[0]
    if modality not in names:
        raise EncoderExportError(f"--modality {modality}: run {run_dir} has encoders for {', '.join(names)} only")
    return modality


def _prepare_out(out_dir: Path, run_dir: Path, overwrite: bool) -> None:
    out, run = out_dir.resolve(), run_dir.resolve()
    if out == run or run in out.parents:
        raise EncoderExportError(f"--out {out_dir}: inside the run folder {run_dir}; choose another folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise EncoderExportError(f"--out {out_dir}: not empty (pass --overwrite to replace an encoder folder)")
        if not (out_dir / CONFIG_FILE).is_file():
            raise EncoderExportError(
                f"--out {out_dir}: not empty and not an encoder folder (no {CONFIG_FILE}); refusing to overwrite it"
            )
        for name in (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE, ONNX_FILE):
            (out_dir / name).unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)


def _weights_of(encoder: nn.Module) -> tuple[dict[str, torch.Tensor], str]:
    """The state dict to write and whose it is (``timm``: the timm model's; ``encoder``: the module's)."""
    module, owner = (encoder.model, "timm") if isinstance(encoder, TimmImageEncoder) else (encoder, "encoder")
    state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    return state, owner


def _write_weights(state: dict[str, torch.Tensor], out_dir: Path, modality: str, name: str) -> Path:
    """``encoder.safetensors`` of ``state`` in ``out_dir`` (atomic; umask's mode), tagged with format, modality
    and encoder name."""
    from safetensors.torch import save_file

    return atomic_write_with(
        out_dir / WEIGHTS_FILE,
        lambda tmp: save_file(
            state, str(tmp), metadata={"format": ENCODER_FORMAT, "modality": modality, "encoder": name}
        ),
    )


def _tensor_facts(
    encoder: nn.Module, modality: str, name: str, args: dict[str, Any], state: dict[str, torch.Tensor], owner: str
) -> dict[str, Any]:
    """The head of ``config.json``: format, modality, encoder name and build ``args``, width, the weights file
    and whose state dict it holds, and every tensor's ``{shape, dtype}`` (the sha256 is added once written)."""
    return {
        "format": ENCODER_FORMAT,
        "modality": modality,
        "encoder": name,
        "encoder_args": args,
        "num_features": int(encoder.num_features),
        "weights_file": WEIGHTS_FILE,
        "weights_of": owner,
        "weights_sha256": None,
        "tensors": {
            k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")} for k, v in state.items()
        },
    }


def _source(cfg: Any, run_dir: Path, weights: str) -> dict[str, Any]:
    """The ``source`` section of ``config.json``: the run, its weights, loss, data, views, steps, last loss and
    metrics (``eval/*.json``, which score the final weights: empty for other weights)."""
    from ..train.run_io import resolve_weights

    facts = _run_steps_and_loss(run_dir, weights)
    return {
        "run": str(run_dir.resolve()),
        "weights": weights,
        "weights_file": str(resolve_weights(run_dir, weights).name),
        "loss": {"name": cfg.loss.name, **cfg.loss.params},
        "data": {"adapter": cfg.data.adapter, "options": cfg.data.options},
        "views": {"policy": cfg.views.policy, "k": cfg.views.k, "options": cfg.views.options},
        "steps": facts["steps"],
        "final_loss": facts["final_loss"],
        "metrics": run_metrics(run_dir) if weights == "final" else {},
    }


def _timm_facts(encoder: TimmImageEncoder, args: dict[str, Any]) -> dict[str, Any]:
    """How timm builds a timm image encoder (``config.json``'s ``timm`` section)."""
    return {
        "model_name": encoder.model_name,
        "create_model": dict(encoder.create_kwargs),
        "small_input_stem": bool(args.get("small_input_stem", False)),
    }


def export_encoder(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    weights: str = "final",
    modality: str | None = None,
    onnx: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the encoder of ``modality`` of run ``run_dir`` (``weights``: final, init or step_N) to
    ``out_dir`` (see the module docstring); returns the written config."""
    from ..train.run_io import load_run

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    missing = missing_onnx_packages() if onnx else []
    if missing:  # before anything is written
        raise EncoderExportError(f"--onnx needs {', '.join(missing)}: pip install 'multiview_app[onnx]'")
    cfg, model = load_run(run_dir, weights)
    modality = _choose_modality(dict(model.encoders), modality, run_dir)
    encoder = model.encoders[modality].eval()
    args = dict(cfg.model.encoders[modality])
    name = args.pop("name")
    args.pop("pretrained_path", None)  # the weights come from this folder
    state, owner = _weights_of(encoder)
    input_description = _input_description(cfg, run_dir, modality)
    _prepare_out(out_dir, run_dir, overwrite)

    config = _tensor_facts(encoder, modality, name, args, state, owner)
    config["weights_sha256"] = sha256_file(_write_weights(state, out_dir, modality, name))
    config["input"] = input_description
    config["source"] = _source(cfg, run_dir, weights)
    if owner == "timm":
        config["timm"] = _timm_facts(encoder, args)
    if onnx:
        config["onnx"] = write_onnx(encoder, config, out_dir / ONNX_FILE)
    atomic_write_text(out_dir / CARD_FILE, model_card(config))
    atomic_write_json(out_dir / CONFIG_FILE, config)  # last: a folder with config.json is complete
    return config


# ----------------------------------------------------------------------------- ONNX


def onnx_module(encoder: nn.Module, config: dict[str, Any]) -> tuple[nn.Module, torch.Tensor, list[str]]:
    """The module the ONNX graph holds, an example input with batch 2, and the axis names of that input."""
    description = config["input"]
    if config["modality"] == "eeg":
        contract = description["contract"]
        samples = contract["window_samples"]
        if not isinstance(samples, int):
            raise EncoderExportError("--onnx: the EEG contract does not state the window length in samples")
        wrapper = ChannelWindowsEncoder(encoder, contract["channels"], contract["views"]).eval()
        return wrapper, torch.randn(2, len(contract["channels"]), samples), ["batch", "channel", "time"]
    if config["modality"] == "image":
        size = description["image_size"]
        return encoder, torch.randn(2, 3, size, size), ["batch", "rgb", "height", "width"]
    raise EncoderExportError(f"--onnx: {config['modality']} encoders are not exported to ONNX (image and eeg are)")


ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
"""What ``--onnx`` needs: torch's dynamo exporter (onnx, onnxscript) and the check (onnxruntime)."""


def missing_onnx_packages() -> list[str]:
    """The packages of :data:`ONNX_PACKAGES` that are not installed (and torch, when older than the
    dynamo exporter's ``torch.onnx.export(..., dynamo=True)``: 2.5; tested with 2.14)."""
    import importlib.util

    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return missing + ([f"torch >= 2.5 (found {torch.__version__})"] if (major, minor) < (2, 5) else [])


def write_onnx(encoder: nn.Module, config: dict[str, Any], path: Path) -> dict[str, Any]:
    """Export ``encoder`` (eval mode) to ``path`` with a dynamic batch axis and compare onnxruntime's
    output with PyTorch's on 3 random inputs of batch 3 (an :class:`EncoderExportError` above
    :data:`ONNX_TOLERANCE`); returns what ``config.json`` records about the graph."""
    missing = missing_onnx_packages()
    if missing:
        raise EncoderExportError(f"--onnx needs {', '.join(missing)}: pip install 'multiview_app[onnx]'")
    import onnxruntime

    module, example, axes = onnx_module(encoder, config)
    module.eval()
    batch = torch.export.Dim("batch", min=1)
    try:
        with torch.no_grad():
            module(example)  # fills lazy per-view caches (EEG channel ids) before tracing
            program = torch.onnx.export(
                module,
                (example,),
                input_names=["x"],
                output_names=["features"],
                dynamic_shapes={"x": {0: batch}},
                dynamo=True,
                verbose=False,
            )
        program.save(str(path))
        worst = _onnx_difference(path, module, example)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    if not math.isfinite(worst) or worst > ONNX_TOLERANCE:
        path.unlink(missing_ok=True)
        raise EncoderExportError(
            f"{path}: onnxruntime's outputs differ from PyTorch's by {worst:.3g} (> {ONNX_TOLERANCE}); graph removed"
        )
    output = ["batch", "view", "feature"] if config["modality"] == "eeg" else ["batch", "feature"]
    return {
        "file": path.name,
        "input": {"name": "x", "axes": axes, "shape": ["batch", *example.shape[1:]]},
        "output": {"name": "features", "axes": output},
        "dynamic_axes": ["batch"],
        "checked_max_abs_diff": worst,
        "checked_batch": 3,
        "onnxruntime": onnxruntime.__version__,
    }


def _onnx_difference(path: Path, module: nn.Module, example: torch.Tensor, batch: int = 3, draws: int = 3) -> float:
    """Largest absolute difference between onnxruntime's and PyTorch's outputs on ``draws`` seeded random
    inputs of ``batch`` items (another batch size than the traced example's: the batch axis is dynamic)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    worst = 0.0
    for _ in range(draws):
        x = torch.randn((batch, *example.shape[1:]), generator=generator)
        with torch.no_grad():
            expected = module(x).numpy()
        got = session.run(None, {"x": x.numpy()})[0]
        if got.shape != expected.shape:
            raise EncoderExportError(f"{path}: onnxruntime gives shape {got.shape}, PyTorch {expected.shape}")
        worst = max(worst, float(abs(got - expected).max()))
    return worst


# ----------------------------------------------------------------------------- model card


def _card_training(config: dict[str, Any]) -> list[str]:
    """The model card's title, provenance paragraph and Training section."""
    source = config["source"]
    loss = ", ".join(f"{k}={v}" for k, v in source["loss"].items() if k != "name")
    return [
        f"# {config['modality']} encoder `{config['encoder']}` (multiview_app)",
        "",
        f"Self-supervised {config['modality']} encoder exported by `mvapp export-model` from run `{source['run']}` "
        f"({source['weights']} weights, the run's `{source['weights_file']}`); this folder holds the encoder alone, "
        f"in `{WEIGHTS_FILE}`.",
        "",
        "## Training",
        f"- loss: `{source['loss']['name']}`" + (f" ({loss})" if loss else ""),
        f"- data: adapter `{source['data']['adapter']}`, options `{json.dumps(source['data']['options'])}`",
        f"- views: policy `{source['views']['policy']}`, k = {source['views']['k']}",
        f"- optimizer steps: {source['steps']}; last logged loss: {source['final_loss']}",
    ]


def _card_metrics(source: dict[str, Any]) -> list[str]:
    """The model card's Metrics section: one line per ``eval/*.json`` file, or why there is none."""
    metrics = source["metrics"]
    lines = ["## Metrics (the run's eval/*.json)"]
    lines += [
        f"- {stem}: " + ", ".join(f"{k} = {v:.4g}" for k, v in values.items()) for stem, values in metrics.items()
    ]
    if not metrics and source["weights"] != "final":
        lines.append(f"- none for these ({source['weights']}) weights: the run's evaluations score its final weights")
    elif not metrics:
        lines.append("- none: the run was not evaluated before the export (run `mvapp eval ...` and export again)")
    return lines


def _eeg_input_lines(config: dict[str, Any]) -> list[str]:
    """Input lines of an EEG window encoder: its input contract, field by field."""
    from ..data.eeg.contract import EEGInputContract

    description = config["input"]
    contract = EEGInputContract.from_dict(description["contract"], "config.json input.contract")
    return [
        f"EEG input contract (from {description['contract_origin']}); windows prepared by "
        "`mvapp data prepare` with these settings, float32 `(n, channels, samples)`:",
        *[f"- {row}" for row in contract.describe()],
        "",
        "Feature extraction through multiview_app on another cache refuses a different rate, band, "
        "units, window or scaling, naming each field; channels outside the list are encoded as "
        "the channel names row says, absent ones get no view (nothing is zero-filled).",
    ]


def _image_input_lines(config: dict[str, Any]) -> list[str]:
    """Input lines of an image encoder: tensor shape, dtype and preprocessing."""
    description = config["input"]
    return [f"- tensor `{description['shape']}` {description['dtype']}", f"- {description['preprocessing']}"]


#: the model card's Input lines by the ``input`` kind of config.json (other kinds: the description's note)
INPUT_LINES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "eeg_windows": _eeg_input_lines,
    "psg_modality": lambda config: psg_modality_lines(config["modality"], config["input"]["contract"]),
    "image": _image_input_lines,
}


def _card_input(config: dict[str, Any]) -> list[str]:
    """The model card's Input section and the output width."""
    kind = config["input"]["kind"]
    lines = INPUT_LINES.get(kind, lambda c: [f"- {c['input'].get('note', '')}"])(config)
    return [
        "## Input",
        *lines,
        "",
        f"Output: `{config['num_features']}` features per input (the backbone, before the projector).",
    ]


def _card_timm(timm: dict[str, Any]) -> list[str]:
    """How to build a timm encoder's model in timm alone and load the weights into it."""
    timm_args = ", ".join(f"{k}={v!r}" for k, v in timm["create_model"].items())
    lines = [
        "In timm alone (the weights are the timm model's own state dict):",
        "```python",
        "import timm",
        "from safetensors.torch import load_file",
        "",
        f"model = timm.create_model({timm['model_name']!r}, {timm_args})",
    ]
    if timm["small_input_stem"]:
        lines += [
            "model.conv1 = torch.nn.Conv2d(3, model.conv1.out_channels, 3, 1, 1, bias=False)  # small-input stem",
            "model.maxpool = torch.nn.Identity()",
        ]
    return [*lines, f'model.load_state_dict(load_file("{WEIGHTS_FILE}"))', "```"]


def _card_onnx(onnx: dict[str, Any]) -> list[str]:
    """The ONNX graph's input, output and check against PyTorch."""
    return [
        f"ONNX: `{onnx['file']}`, input `x` {onnx['input']['shape']} (axes {onnx['input']['axes']}), output "
        f"`features` (axes {onnx['output']['axes']}); dynamic batch; outputs equal PyTorch's within "
        f"{onnx['checked_max_abs_diff']:.2g} under onnxruntime {onnx['onnxruntime']} when written.",
    ]


def _card_load(config: dict[str, Any]) -> list[str]:
    """The model card's Load section: ``load_encoder``, then timm alone and ONNX where the folder has them."""
    load_comment = LOAD_COMMENTS.get(config["input"]["kind"], "eval mode; input as in the Input section above")
    lines = [
        "## Load",
        "```python",
        "from multiview_app import load_encoder",
        "",
        f'encoder = load_encoder("<this folder>")  # {load_comment}',
        "```",
    ]
    if "timm" in config:
        lines += ["", *_card_timm(config["timm"])]
    if "onnx" in config:
        lines += ["", *_card_onnx(config["onnx"])]
    return lines


def model_card(config: dict[str, Any]) -> str:
    """The ``README.md`` of an encoder folder (``config``: its ``config.json``): data, loss, steps, metrics,
    input, how to load it."""
    files = f"Files: `{WEIGHTS_FILE}` (safetensors, sha256 `{config['weights_sha256']}`), `{CONFIG_FILE}`."
    sections = [_card_training(config), _card_metrics(config["source"]), _card_input(config), _card_load(config)]
    return "\n\n".join("\n".join(section) for section in sections) + f"\n\n{files}\n"


def psg_modality_lines(modality: str, contract: dict[str, Any]) -> list[str]:
    """The model card's input lines of a PSG modality encoder (``train/input_contract.py`` modality contract)."""
    upsampled = contract.get("upsampled") or {}
    lines = [
        f"PSG modality `{modality}` (from input_contract.json of the run): float32 `(n, {contract['in_channels']}, "
        f"{contract['window_samples']})` at {contract['sfreq']:g} Hz, 30-s windows of a cache prepared with "
        f"`mvapp data prepare ... --modalities`:",
        f"- cache groups, in channel order: {', '.join(contract['groups'])}",
        f"- channels: {', '.join(contract['channels'])}",
        "- scaling per group: " + ", ".join(f"{g} {s}" for g, s in contract.get("scaling", {}).items()),
    ]
    lines += [
        f"- group {group} is cached at {rate:g} Hz and upsampled to {contract['sfreq']:g} Hz (linear interpolation)"
        for group, rate in upsampled.items()
    ]
    return lines


# ----------------------------------------------------------------------------- load


def _check_tensors(found: dict[str, tuple[list[int], str]], listed: dict[str, Any], where: str, against: str) -> None:
    """Raise naming the first tensors whose presence, shape or dtype differs between ``found`` and ``listed``."""
    problems = []
    for key, meta in listed.items():
        if key not in found:
            problems.append(f"tensor {key!r} missing (expected {meta['shape']} {meta['dtype']})")
        elif found[key][0] != list(meta["shape"]):
            problems.append(f"tensor {key!r} has shape {found[key][0]}, {against} says {list(meta['shape'])}")
        elif meta.get("dtype") is not None and found[key][1] != meta["dtype"]:
            problems.append(f"tensor {key!r} has dtype {found[key][1]}, {against} says {meta['dtype']}")
    problems += [f"tensor {key!r} not in {against}" for key in found if key not in listed]
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        raise EncoderExportError(f"{where}: weights do not match {against}: {'; '.join(problems[:5])}{more}")


def read_encoder_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of an encoder folder (``EncoderExportError`` naming the file when absent or foreign)."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise EncoderExportError(
            f"{folder}: not an encoder folder (no {CONFIG_FILE}; write one with mvapp export-model)"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise EncoderExportError(f"{path}: corrupt ({err})") from None
    if config.get("format") != ENCODER_FORMAT:
        raise EncoderExportError(f"{path}: format {config.get('format')!r}, expected {ENCODER_FORMAT!r}")
    return config


def load_encoder(folder: str | Path, device: str | torch.device = "cpu") -> nn.Module:
    """The encoder of an ``mvapp export-model`` folder, in eval mode on ``device``, without the run folder.

    The safetensors file must hold exactly the tensors ``config.json`` lists (names, shapes, dtypes) and
    those must fit the encoder ``config.json`` describes; otherwise an :class:`EncoderExportError` names
    the tensor. The returned module has ``export_config`` (the config dict) and ``input_contract``
    (:class:`~multiview_app.data.eeg.contract.EEGInputContract` of an EEG encoder, else None); an EEG
    encoder maps ``(n, T)`` windows of one channel (``forward(x, view_name)``) to ``(n, num_features)``;
    :class:`ChannelWindowsEncoder` maps whole windows ``(n, C, T)`` to ``(n, V, num_features)``.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    folder = Path(folder)
    config = read_encoder_config(folder)
    weights = folder / config.get("weights_file", WEIGHTS_FILE)
    if not weights.is_file():
        raise EncoderExportError(f"{weights}: missing (the encoder folder is incomplete)")
    try:
        with safe_open(str(weights), framework="pt") as handle:
            found = {
                key: (list(handle.get_slice(key).get_shape()), _dtype_name(handle.get_slice(key).get_dtype()))
                for key in handle.keys()
            }
    except Exception as err:  # safetensors raises its own types for truncated / foreign files
        raise EncoderExportError(f"{weights}: unreadable safetensors file ({err})") from None
    _check_tensors(found, config["tensors"], str(weights), f"{CONFIG_FILE}'s tensor list")
    encoder = _build(config)
    target = encoder.model if config.get("weights_of") == "timm" else encoder
    built = {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in target.state_dict().items()}
    _check_tensors(
        found,
        {k: {"shape": s, "dtype": d} for k, (s, d) in built.items()},
        str(weights),
        f"the {config['modality']}/{config['encoder']} encoder built from {CONFIG_FILE}",
    )
    target.load_state_dict(load_file(str(weights)), strict=True)
    encoder.eval().to(device)
    encoder.export_config = config
    encoder.input_contract = None
    if config["input"].get("kind") == "eeg_windows":
        from ..data.eeg.contract import EEGInputContract

        encoder.input_contract = EEGInputContract.from_dict(
            config["input"]["contract"], f"{folder / CONFIG_FILE} input"
        )
    return encoder


_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


def _dtype_name(code: str) -> str:
    return _SAFETENSORS_DTYPES.get(code, code.lower())


def _build(config: dict[str, Any]) -> nn.Module:
    args = dict(config.get("encoder_args") or {})
    try:
        return build_encoder(config["modality"], config["encoder"], **args)
    except (ValueError, TypeError) as err:
        raise EncoderExportError(
            f"{CONFIG_FILE}: cannot build {config['modality']}/{config['encoder']} from encoder_args {args}: {err}"
        ) from None


__all__ = [
    "ChannelWindowsEncoder",
    "EncoderExportError",
    "export_encoder",
    "load_encoder",
    "missing_onnx_packages",
    "model_card",
    "read_encoder_config",
    "write_onnx",
]
