"""Tasks read tiny data sets written in the real on-disk formats, and train on them."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from bdsgd.config import from_dict
from bdsgd.errors import UserError
from bdsgd.tasks import (
    CLASSES,
    NETWORKS,
    WorkerStreams,
    gradient_bytes,
    load_task,
    shift_and_flip,
    task_gradient_bytes,
)
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.training import run_spec, train_run


def write_idx(path: Path, array: np.ndarray) -> None:
    """An idx file as LeCun's: magic 0x0000 08 <ndim> (unsigned bytes), big-endian sizes, data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def make_mnist(root: Path, n_train: int = 16, n_test: int = 6) -> None:
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(root / "MNIST" / "raw" / f"{prefix}-images-idx3-ubyte",
                  rng.integers(0, 256, (n, 28, 28)))
        write_idx(root / "MNIST" / "raw" / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)


def make_cifar10(root: Path, per_batch: int = 4) -> None:
    """The python version's pickles: data rows are the R, G and B planes of a 32x32 image."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    image = np.concatenate([np.full(1024, 255), np.zeros(1024), np.full(1024, 128)])
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for k, name in enumerate(names):
        batch = {"batch_label": name, "labels": [(k + i) % 10 for i in range(per_batch)],
                 "data": np.tile(image, (per_batch, 1)).astype(np.uint8),
                 "filenames": [f"{name}_{i}.png" for i in range(per_batch)]}
        (base / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": per_batch}
    (base / "batches.meta").write_bytes(pickle.dumps(meta))


def make_imagefolder(root: Path) -> None:
    colours = {"cat": (255, 0, 0), "dog": (0, 0, 255)}
    for split, count in (("train", 3), ("val", 1)):
        for cls, colour in colours.items():
            folder = root / "imagenet" / split / cls
            folder.mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (40, 30), colour).save(folder / f"{i}.png")


@pytest.fixture
def cifar_without_md5(monkeypatch):
    """torchvision checks CIFAR-10 files against the official release's md5 sums, which tiny
    files cannot match; keep its pickle reader and check only that the files exist."""
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


def test_mnist_idx_files(tmp_path):
    make_mnist(tmp_path)
    task = load_task("mnist", tmp_path)
    assert (len(task.train), len(task.test), task.num_classes) == (16, 6, 10)
    x, y = task.batch(task.train, np.array([3, 12]))
    assert x.shape == (2, 1, 28, 28) and x.dtype == torch.float32
    assert y.tolist() == [3, 2]
    raw = np.fromfile(tmp_path / "MNIST/raw/train-images-idx3-ubyte", np.uint8, offset=16)
    expected = (raw.reshape(16, 28, 28)[3] / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(x[0, 0].numpy(), expected, rtol=1e-5)
    assert task.make_model()(x).shape == (2, 10)


def test_cifar10_pickled_batches(tmp_path, cifar_without_md5):
    make_cifar10(tmp_path)
    task = load_task("cifar10", tmp_path)
    assert (len(task.train), len(task.test)) == (20, 4)
    x, y = task.batch(task.train, np.array([0, 5]))
    assert x.shape == (2, 3, 32, 32)
    assert y.tolist() == [0, 2]  # sample 5 is data_batch_2's second: label (1 + 1) % 10
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2470, 0.2435, 0.2616])
    pixel = (np.array([255, 0, 128]) / 255.0 - mean) / std  # the R, G, B planes of every image
    np.testing.assert_allclose(x[1, :, 7, 9].numpy(), pixel, rtol=1e-5)
    assert task.make_model()(x).shape == (2, 10)


def test_cifar10_md5_mismatch_is_a_user_error(tmp_path):
    make_cifar10(tmp_path)
    with pytest.raises(UserError, match="corrupted") as err:
        load_task("cifar10", tmp_path)
    assert err.value.file == str(tmp_path / "cifar-10-batches-py")


def test_imagefolder_pngs(tmp_path):
    make_imagefolder(tmp_path)
    task = load_task("imagenet", tmp_path)
    assert (len(task.train), len(task.test), task.num_classes) == (6, 2, 2)
    x, y = task.batch(task.test, np.array([0, 1]))
    assert x.shape == (2, 3, 224, 224) and y.tolist() == [0, 1]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    red = (np.array([1.0, 0.0, 0.0]) - mean) / std  # a solid image stays solid after crop/resize
    np.testing.assert_allclose(x[0].mean(dim=(1, 2)).numpy(), red, rtol=1e-4)
    with torch.no_grad():
        assert task.make_model().eval()(x).shape == (2, 2)


@pytest.mark.parametrize("name", ["mnist", "cifar10", "imagenet"])
def test_missing_data_set_names_the_path(tmp_path, name):
    with pytest.raises(UserError) as err:
        load_task(name, tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in err.value.file
    assert err.value.field == "train.data_dir"


def test_unknown_task():
    with pytest.raises(UserError, match="unknown task"):
        load_task("svhn", "data")


@pytest.mark.parametrize("name, make", [
    ("mnist", make_mnist), ("cifar10", make_cifar10), ("imagenet", make_imagefolder)])
def test_one_training_iteration_on_each_format(tmp_path, name, make, cifar_without_md5):
    make(tmp_path / "data")
    trace = write_trace(from_arrays(np.array([[1.0, 2.0], [3.0, 1.5]])), tmp_path / "t.parquet")
    cfg = from_dict({"experiment": "tasks", "traces": {"t": {"source": "simulate"}},
                     "train": {"trace": "t", "tasks": [name], "data_dir": str(tmp_path / "data"),
                               "batch_size": 1, "max_iterations": 1, "eval_every": 1,
                               # decoded in the run's process: the loaders' own test is below
                               "loader_workers": 0}})
    run = train_run(run_spec(cfg, name, "sync", 0, trace, tmp_path / "run"))
    m = pd.read_parquet(run / "metrics.parquet")
    assert m["cutoff"].tolist() == [2] and m["virtual_time_s"].tolist() == [2.0]
    assert np.isfinite(m["train_loss"]).all() and 0 <= m["test_accuracy"].iloc[0] <= 1


def make_noisy_jpegs(root: Path, per_class: int = 3) -> None:
    """An image folder of textured JPEGs, so that a random crop or flip shows."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            folder = root / "imagenet" / split / cls
            folder.mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.JPEG", quality=90)


def test_an_image_batch_is_the_same_decoded_here_or_by_loader_processes(tmp_path):
    """Each draw's augmentation comes from its own seed: loader processes decode the batch this
    process would, a draw with other seeds is cropped otherwise, and the run's own generator is
    left as it was."""
    make_noisy_jpegs(tmp_path)
    here, loaders = load_task("imagenet", tmp_path), load_task("imagenet", tmp_path, 2)
    streams = WorkerStreams(len(here.train), n_workers=2, batch_size=2, seed=3)
    idx, seeds = streams.batch(1, np.array([0, 1])), streams.seeds(1, np.array([0, 1]))
    before = torch.get_rng_state()
    x, y = here.batch(here.train, idx, seeds)
    assert torch.equal(torch.get_rng_state(), before)
    x2, y2 = loaders.batch(loaders.train, idx, seeds)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    other, _ = here.batch(here.train, idx, seeds + 1)
    assert not torch.equal(x, other)


def test_every_draw_of_a_run_has_its_own_seed():
    streams = WorkerStreams(1000, n_workers=4, batch_size=8, seed=2)
    seeds = np.concatenate([streams.seeds(t, np.arange(4)) for t in range(50)])
    assert len(np.unique(seeds)) == len(seeds) == 50 * 4 * 8
    assert len(streams.seeds(7, np.array([1, 3]))) == len(streams.batch(7, np.array([1, 3])))


def test_shift_and_flip_is_a_pure_function_of_each_samples_seed():
    """He et al.'s CIFAR augmentation: each image shifted by at most 4 pixels (zeros where it
    came from outside) and perhaps mirrored, the same for the same seed, whatever its batch."""
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32) + 1
    seeds = np.array([11, 12])
    out = shift_and_flip(x, seeds)
    assert out.shape == x.shape and torch.equal(out, shift_and_flip(x, seeds))
    assert torch.equal(out[1:], shift_and_flip(x[1:], seeds[1:]))  # alone or in a batch
    draws = [shift_and_flip(x[:1], np.array([k]))[0] for k in range(40)]
    assert len({tuple(d.ravel().tolist()) for d in draws}) > 20  # seeds differ, images differ
    for d in draws:  # each a shift of the image or of its mirror image, padded with zeros
        for image in (x[0], x[0].flip(-1)):
            inner = d[:, 4:28, 4:28]  # inside any shift of at most 4 pixels
            found = [(dy, dx) for dy in range(-4, 5) for dx in range(-4, 5)
                     if torch.equal(inner, image[:, 4 + dy:28 + dy, 4 + dx:28 + dx])]
            if found:
                break
        assert found, "not a shifted (or mirrored and shifted) copy"
    assert (torch.cat(draws) == 0).any()  # some shifts brought in padding


def test_only_cifar_training_batches_are_augmented(tmp_path, cifar_without_md5):
    make_cifar10(tmp_path)
    task = load_task("cifar10", tmp_path)
    idx = np.arange(4)
    x, _ = task.batch(task.train, idx, np.arange(4))
    assert not torch.equal(x, task.batch(task.train, idx)[0])  # seeded: augmented
    assert torch.equal(task.batch(task.test, idx, np.arange(4))[0], task.test.tensors[0][idx])


def test_a_tasks_gradient_bytes_are_its_networks():
    """Counted on the meta device, as many bytes as the built network's parameters hold;
    ImageNet's ResNet-18 has its 11,689,512 (GroupNorm's affine parameters are BatchNorm's)."""
    for task in ("digits", "mnist", "cifar10"):
        assert task_gradient_bytes(task) == gradient_bytes(NETWORKS[task](CLASSES[task])), task
    assert task_gradient_bytes("imagenet") == 4 * 11_689_512
