"""Build ctxlite: the metadata lives in pyproject.toml; this file adds what setuptools cannot say
declaratively: the cffi kernels compiled from csrc/ and the model registry shipped from models/."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["ctxlite", "ctxlite.*"]) + ["ctxlite.registry"],
    package_dir={"ctxlite.registry": "models"},
    package_data={"ctxlite": ["data/*", "data/**/*"], "ctxlite.registry": ["*.json"]},
    include_package_data=False,
    zip_safe=False,
    cffi_modules=["ctxlite/runtime/_build_kernels.py:ffibuilder"],
)
