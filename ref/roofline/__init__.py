"""The roofline and byte-accounting model: hardware and model tables, parameter,
weight, KV and FLOP accounting, and the roofline times they imply (spec/roofline.md).

The schema is in `ref.roofline.config`."""
