"""Deformed training sets: the kernels (CPU twin vs CUDA in the simulator), the split's
separation, generation on the workers, and the CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import digits_xy

from mgpu_dask.data import split
from mgpu_dask.data.deformed import DeformedSpec, deformed_sources, deformed_train
from mgpu_dask.exceptions import DataError
from mgpu_dask.kernels.deform.rows import deform_rows
from mgpu_dask.kernels.deform.params import Deformation, parse_deformation
from mgpu_dask.cli import main


def _images(n=5, side=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, side * side), dtype=np.uint8)


def test_copy_zero_is_the_image_and_copies_differ():
    src = _images()
    out = deform_rows(src, 0, 3 * len(src), seed=3)
    np.testing.assert_array_equal(out[:5], src)
    assert (out[5:10] != src).any(axis=1).all() and (out[5:10] != out[10:15]).any()


def test_rows_are_a_function_of_seed_image_and_copy():
    src = _images()
    whole = deform_rows(src, 0, 20, seed=11)
    np.testing.assert_array_equal(deform_rows(src, 7, 9, seed=11), whole[7:16])  # any block
    assert (deform_rows(src, 0, 20, seed=12)[5:] != whole[5:]).any()


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="the CUDA kernel in the simulator (on a GPU: the test below)")
def test_cuda_kernel_in_the_simulator_is_bit_identical_to_the_cpu_twin():
    src = _images(n=3, side=6, seed=5)
    settings = Deformation(shift=2.5, rotate=20, scale=0.2, shear=0.3, elastic=2.0)
    cpu = deform_rows(src, 2, 7, seed=9, deformation=settings, target="cpu")
    gpu = deform_rows(src, 2, 7, seed=9, deformation=settings, target="cuda")
    np.testing.assert_array_equal(gpu, cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("side, rows", [(6, 7), (28, 4000)])  # MNIST's images, several blocks
def test_cuda_kernel_on_the_gpu_is_bit_identical_to_the_cpu_twin(side, rows):
    cupy = pytest.importorskip("cupy")
    src = _images(n=9, side=side, seed=5)
    settings = Deformation(shift=2.5, rotate=20, scale=0.2, shear=0.3, elastic=2.0)
    cpu = deform_rows(src, 2, rows, seed=9, deformation=settings, target="cpu")
    gpu = deform_rows(cupy.asarray(src), 2, rows, seed=9, deformation=settings).get()
    assert (cpu != src[0]).any()  # deformed, not copied
    np.testing.assert_array_equal(gpu, cpu)


def test_no_test_image_or_its_deformation_is_trained_on():
    X, y = digits_xy()
    parts = split(X, y, test_size=0.25, seed=4)
    sources = deformed_sources(parts.train_index, 5)
    assert len(sources) == 5 * len(parts.X_train)
    assert not set(sources.tolist()) & set(parts.test_index.tolist())
    rows, labels = deformed_train(parts.X_train[:40], parts.y_train[:40], None,
                                  DeformedSpec(3, 4, Deformation()))
    rows = rows.compute()
    np.testing.assert_array_equal(rows[:40], parts.X_train[:40])  # copy 0
    np.testing.assert_array_equal(labels, np.tile(parts.y_train[:40], 3))
    np.testing.assert_array_equal(X[sources[:120].reshape(3, 40)[0]], parts.X_train[:40])


@pytest.mark.parametrize("text, match", [
    ("foo=1", "unknown deformation setting 'foo'"), ("shift=x", "not a number"),
    ("rotate=90", r"outside \[0, 45\]")])
def test_bad_deformation_settings(text, match):
    with pytest.raises(ValueError, match=match):
        parse_deformation(text)


def test_generated_on_each_worker_and_knn_on_them(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["knn", "--dataset", "digits-deformed", "--copies", "3", "--workers", "2",
                 "--device", "cpu", "--plan", "shard", "--repeats", "1", "--quiet",
                 "--dashboard-address", ":0", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["copies"] == 3 and r["n_train"] == 3 * 1348 and r["n_test"] == 449
    assert r["cold"]["generate"] > 0 and r["plan"] == "shard"
    shards = r["placement"]["train shard"]
    assert len({s["worker"] for s in shards}) == 2 and r["placement_problems"] == []
    assert r["accuracy"] > 0.97


@pytest.mark.parametrize("argv, match", [
    (["--copies", "0"], "--copies 0 must be a positive integer"),
    (["--deform", "twist=3"], "unknown deformation setting 'twist'"),
    (["--copies", "2000000000"], "even sharded; use fewer --copies"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, match):
    out = tmp_path / "r.json"
    rc = main(["knn", "--dataset", "digits-deformed", "--workers", "1", "--device", "cpu",
               "--quiet", "--dashboard-address", ":0", "--json", str(out), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and match in err[0] and err[0].startswith("error:")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_copies_without_a_deformed_data_set_is_an_error(capsys):
    assert main(["data", "--dataset", "digits", "--copies", "3"]) == 2
    assert "apply to deformed data sets" in capsys.readouterr().err


def test_data_preview_writes_a_png(tmp_path):
    png = tmp_path / "p.png"
    assert main(["data", "--dataset", "digits-deformed", "--copies", "4",
                 "--preview", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_deformed_base_is_one_clear_error():
    from mgpu_dask.data import load_dataset

    with pytest.raises(DataError, match="deformed sets are made of image data sets"):
        load_dataset("synthetic-deformed")


def test_comparison_on_generated_rows(tmp_path):
    """Ours runs on the rows where they were made; host-only backends say why they do not."""
    out = tmp_path / "r.json"
    assert main(["logreg", "--dataset", "digits-deformed", "--copies", "2", "--workers", "2",
                 "--device", "cpu", "--backend", "all", "--repeats", "1", "--quiet",
                 "--dashboard-address", ":0", "--json", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["backends"]}
    assert rows["numba"]["status"] == "ok" and rows["numba"]["accuracy"] > 0.9
    assert "generated on the workers" in rows["sklearn"]["status"]


def test_logistic_regression_objective_on_generated_rows(process_client):
    """Rows generated on the workers, scaled where they live: the same optimum as
    scikit-learn's (float64) on those rows brought home."""
    from sklearn.linear_model import LogisticRegression as SkLR

    from mgpu_dask.data.sharding import as_worker_rows
    from mgpu_dask.parallel.inputs import to_host
    from mgpu_dask.logreg import LogisticRegression

    X, y = digits_xy()
    parts = split(X, y, seed=3, fraction=0.3)
    rows, labels = deformed_train(parts.X_train, parts.y_train, process_client,
                                  DeformedSpec(3, 1, Deformation()))
    assert rows.numblocks[0] == 3  # one block per worker, made there
    scaled = as_worker_rows(rows, process_client, dtype=np.float32, scale=1 / 16)
    ours = LogisticRegression(C=1.0, max_iter=1000, tol=1e-7).fit(scaled, labels)
    home = to_host(rows).astype(np.float64) / 16
    sk = SkLR(C=1.0, max_iter=10000, tol=1e-10).fit(home, labels)

    def objective(coef, intercept):
        z = home @ coef.T + intercept
        z -= z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        return (-logp[np.arange(len(labels)), np.searchsorted(ours.classes_, labels)].mean()
                + (coef ** 2).sum() / (2 * 1.0 * len(labels)))

    a, b = objective(ours.coef_, ours.intercept_), objective(sk.coef_, sk.intercept_)
    assert abs(a - b) / b < 1e-4
