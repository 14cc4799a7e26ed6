"""Build hook for the optional C accelerator; everything else is in pyproject.toml.

The accelerator (client/_speedups.c) speeds up the per-message loops of the codec
(validating and decoding message sets). It is optional: when it cannot be compiled
(no C compiler, no zlib headers) the pure-Python codec is used and behaves the same.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rill.client._speedups",
            sources=["client/_speedups.c"],
            libraries=["z"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
