"""`llm-ref roofline`: the tour's figures recomputed, the tables, the spec's figures,
or one model's sheet on one machine (ref.roofline.summary). ref.cli adds the
subcommand with `roofline_parser`; its errors are ValueErrors naming the option, which
the command line prints as one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

__all__ = ["roofline_parser"]


def _roofline(args) -> int:
    """The tour's figures recomputed, the tables, the figures, or one model's sheet."""
    from ref.roofline import FORMATS, HARDWARE, MODELS, plots, tour
    from ref.roofline.summary import summary

    sheet = ("hardware", "context", "batch", "fmt", "weights", "kv_bits", "gpus", "reserve")
    if args.list:
        print("models:  " + ", ".join(MODELS) + "\nhardware: " + ", ".join(HARDWARE)
              + "\nformats: " + ", ".join(FORMATS) + " (--weights)")
        return 0
    if args.plots:
        print("\n".join(str(p) for p in plots.main(args.plots)))
        return 0
    if not (args.model or args.config):
        given = [f"--{n.replace('_', '-')}" for n in sheet if getattr(args, n) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: a sheet needs --model NAME or --config PATH")
        print(tour.table())
        return 0
    if args.model and args.config:
        raise ValueError("--model and --config: name a table model or read a config.json, not both")
    if args.model and args.model not in MODELS:
        raise ValueError(f"--model: expected one of {list(MODELS)}, got {args.model!r} (--config reads any)")
    model = _roofline_model(args.config) if args.config else MODELS[args.model]
    hardware = args.hardware or "B200"
    if hardware not in HARDWARE:
        raise ValueError(f"--hardware: expected one of {list(HARDWARE)}, got {hardware!r}")
    weights = args.weights or model.extra.get("checkpoint_format", "bfloat16")  # as the checkpoint ships
    if weights not in FORMATS:
        raise ValueError(f"--weights: expected one of {list(FORMATS)}, got {weights!r}")
    for flag, value in (("--context", args.context), ("--batch", args.batch), ("--kv-bits", args.kv_bits),
                        ("--gpus", args.gpus)):
        if value is not None and value < 1:
            raise ValueError(f"{flag}: expected a positive integer, got {value}")
    if args.reserve is not None and args.reserve < 0:
        raise ValueError(f"--reserve: expected non-negative GB, got {args.reserve}")
    hw = HARDWARE[hardware]
    if args.fmt is not None and args.fmt not in hw.flops:
        raise ValueError(f"--fmt: {hardware} has dense FLOP/s figures for {sorted(hw.flops)}, not {args.fmt!r}")
    print(summary(model, hw, args.context or 40_000, args.batch or 1, fmt=args.fmt,
                  weight_format=weights, kv_bits=args.kv_bits or 16, gpus=args.gpus or 1,
                  reserve=(args.reserve or 0.0) * 1e9))
    return 0


def _roofline_model(path: str):
    """A Model from a config.json (or a folder holding one: a Hugging Face snapshot),
    named by its _name_or_path, else its folder."""
    import json

    from ref.roofline import from_hf_config

    file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise ValueError(f"--config: no config.json at {path}")
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"--config: {file} is not JSON ({err})") from None
    name = config.get("_name_or_path") or file.resolve().parent.name
    return from_hf_config(config, name)


def roofline_parser(sub) -> None:
    p = sub.add_parser("roofline", help="the tour's figures recomputed from the tables, or one model's bytes, "
                       "FLOPs and roofline times on one machine (spec/roofline.md)")
    p.add_argument("--model", help="a model of the table (--list), e.g. Qwen3-8B")
    p.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (or its folder) to read instead")
    p.add_argument("--hardware", help="a machine of the table (--list; default B200)")
    p.add_argument("--gpus", type=int, help="that many of them under ideal tensor parallelism (communication "
                   "not counted; default 1)")
    p.add_argument("--context", type=int, help="tokens per sequence (default 40000)")
    p.add_argument("--batch", type=int, help="sequences per decode step (default 1)")
    p.add_argument("--weights", help="weight storage format (--list; default: the checkpoint's, from its "
                   "quantization_config: DeepSeek-V3 float8_block128; else bfloat16)")
    p.add_argument("--fmt", help="compute format, a key of the hardware's FLOP/s figures: bfloat16, float8, float4, "
                   "int8 (default: the weights' own: float8 for FP8 weights, float4 for NVFP4/MXFP4, else bfloat16)")
    p.add_argument("--kv-bits", type=int, help="bits per cached K/V element (default 16)")
    p.add_argument("--reserve", type=float, metavar="GB", help="memory kept for activations and the runtime "
                   "(default 0)")
    p.add_argument("--list", action="store_true", help="list the table's models, hardware and weight formats")
    p.add_argument("--plots", metavar="FOLDER", help="write the spec's two figures (roofline.svg, batch_sweep.svg)")
    p.set_defaults(func=_roofline)
