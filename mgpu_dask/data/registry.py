"""The IDX data sets we know: file names, checksums, expected sizes."""

from __future__ import annotations

from typing import NamedTuple


class IdxFile(NamedTuple):
    stem: str                  # "train-images-idx3-ubyte"; ".gz" is the usual suffix
    sha256_gz: str | None      # SHA-256 of the canonical .gz file
    sha256_raw: str | None     # SHA-256 of the decompressed file, where known
    count: int | None          # images or labels it must hold, where known


class IdxSpec(NamedTuple):
    name: str
    train_images: IdxFile
    train_labels: IdxFile
    test_images: IdxFile
    test_labels: IdxFile
    n_classes: int
    image_shape: tuple[int, int] | None

    @property
    def files(self) -> tuple[IdxFile, ...]:
        return (self.train_images, self.train_labels, self.test_images, self.test_labels)


# SHA-256 values: the canonical files' (the same as torchvision's MD5s and the
# checksums public loaders use; verified against shared/data/mnist/SOURCE.md).
MNIST = IdxSpec(
    "mnist",
    IdxFile("train-images-idx3-ubyte",
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db", 60000),
    IdxFile("train-labels-idx1-ubyte",
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5", 60000),
    IdxFile("t10k-images-idx3-ubyte",
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7", 10000),
    IdxFile("t10k-labels-idx1-ubyte",
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2", 10000),
    n_classes=10,
    image_shape=(28, 28),
)

FASHION_MNIST = IdxSpec(
    "fashion-mnist",
    IdxFile("train-images-idx3-ubyte",
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84", None, 60000),
    IdxFile("train-labels-idx1-ubyte",
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845", None, 60000),
    IdxFile("t10k-images-idx3-ubyte",
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073", None, 10000),
    IdxFile("t10k-labels-idx1-ubyte",
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5", None, 10000),
    n_classes=10,
    image_shape=(28, 28),
)

# Any IDX data set laid out with MNIST's file names, read from --data-dir
# without checksums (sizes and classes are taken from the files).
GENERIC_IDX = IdxSpec(
    "idx",
    IdxFile("train-images-idx3-ubyte", None, None, None),
    IdxFile("train-labels-idx1-ubyte", None, None, None),
    IdxFile("t10k-images-idx3-ubyte", None, None, None),
    IdxFile("t10k-labels-idx1-ubyte", None, None, None),
    n_classes=0,
    image_shape=None,
)

IDX_SPECS: dict[str, IdxSpec] = {s.name: s for s in (MNIST, FASHION_MNIST, GENERIC_IDX)}
DATASETS: tuple[str, ...] = ("mnist", "fashion-mnist", "digits", "synthetic", "idx")
IMAGE_SETS: tuple[str, ...] = ("mnist", "fashion-mnist", "digits", "idx")
"""Data sets of square images: each has a ``NAME-deformed`` variant (``data/deformed.py``)."""


def deformed_base(name: str | None) -> str | None:
    """``"mnist"`` for ``"mnist-deformed"``; None for a name without the suffix."""
    suffix = "-deformed"
    if name and name.endswith(suffix) and len(name) > len(suffix):
        return name[: -len(suffix)]
    return None
