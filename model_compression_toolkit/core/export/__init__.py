"""The pure parts of export: no framework, no runtime, no file is touched here.

    grids.py    the library's grids as a runtime stores them (integer types, offsets, int32
                biases), and what each file format can express
    report.py   what an export tells its observer: the exported graph, each output's parity
                with the quantized model, the `ExportReport`

The `Exporter` and `Runtime` protocols a backend implements are in `core.backend`; the
stage -> write -> load -> parity flow is `pipeline.export`.
"""
