"""pip-installable: ``pip install .`` (add ``[test]`` for the test tools)."""

from pathlib import Path

from setuptools import find_packages, setup

about = {}
exec(Path(__file__).with_name("bandwidth").joinpath("__init__.py").read_text(), about)

setup(
    name="bandwidth",
    version=about["__version__"],
    description="Communication-bandwidth toolkit for deep-learning clusters (MXNet tools/bandwidth, "
                "re-created on PyTorch)",
    long_description=Path(__file__).with_name("README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["bandwidth", "bandwidth.*", "networks", "networks.*"]),
    py_modules=["launch"],
    install_requires=["torch>=2.1", "numpy"],
    extras_require={"test": ["pytest>=7", "pytest-timeout", "pytest-xdist", "matplotlib",
                             "xmlschema", "pyyaml", "kubernetes-validate"],
                    "plot": ["matplotlib"],
                    "topology": ["nvidia-ml-py"],
                    # --backend mxnet. MXNet 1.9.1 uses np.bool, which numpy 1.24 removed.
                    "mxnet": ["mxnet==1.9.1", "numpy<1.24"]},
    entry_points={"console_scripts": [
        "bandwidth-measure = bandwidth.measure:main",
        "bandwidth-launch = bandwidth.launch.cli:main",
        "bandwidth-ceiling = bandwidth.ceiling.cli:main",
    ]},
)
