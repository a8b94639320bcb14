"""diffusers on "tpu" (tested with diffusers 0.42.1): `pipe.to("tpu")` needs
no shim; a tiny FluxPipeline is checked against the CPU in
tests/models/test_diffusers.py."""
