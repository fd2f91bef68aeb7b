"""The learning tasks: a data set (read with torchvision's real on-disk readers) and a network.

- ``digits``: scikit-learn's 8x8 handwritten digits (ships inside the package; no download),
  a two-layer MLP. The smoke task.
- ``mnist``: torchvision's MNIST reader on ``data_dir/MNIST/raw`` (idx files), a LeNet-style CNN.
- ``cifar10``: torchvision's CIFAR10 reader on ``data_dir/cifar-10-batches-py`` (pickled
  batches, md5-checked against the official release), ResNet-20 (He et al. 2016, section 4.2)
  trained on random 4-pixel shifts and horizontal flips, their recipe's augmentation.
- ``imagenet``: torchvision's ImageFolder on ``data_dir/imagenet/{train,val}/<class>/*``,
  ResNet-18. "ImageNet-style": any folder-per-class image set works.

Every network normalises with GroupNorm, not BatchNorm: a sample's gradient then depends on
that sample alone, so the average of c workers' mini-batch gradients is exactly the gradient of
one forward/backward pass over the union of their mini-batches (``bdsgd.training.synchronous``
relies on this). With BatchNorm the union would share batch statistics across workers, which
no real cluster does.

``WorkerStreams`` deals a task's training set out to n workers, the same way for the virtual
trainers, the parameter server's workers and the trace gatherer.

Nothing is downloaded: a missing data set is a one-line error that says where it was expected.
Small data sets are decoded once into tensors so that a virtual cluster of many workers can draw
mini-batches by indexing; ImageFolder stays lazy (decoded per sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from bdsgd.config.validate import TASKS
from bdsgd.errors import UserError

# What the loader processes decode from: the task's data sets by split (set in each process).
_DATASETS: dict[str, Dataset] = {}


def _share(datasets: dict[str, Dataset]) -> None:
    _DATASETS.update(datasets)


def _start_loader(datasets: dict[str, Dataset]) -> None:
    """A loader process: one torch thread (the processes share the cores), the data sets to
    decode from."""
    torch.set_num_threads(1)
    _share(datasets)


def _decode(split: str, index: int, seed: int | None):
    """One sample of ``split``, its random augmentation drawn from ``seed`` (None: the process's
    generator), so that it is the same whichever process decodes it."""
    if seed is None:
        return _DATASETS[split][index]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _DATASETS[split][index]


@dataclass
class Task:
    """A data set and its network. Tensor data sets are indexed in memory; the others (image
    folders) are decoded per sample, by ``loader_workers`` processes in parallel (0: in this
    one), into pinned memory when ``pin`` (a CUDA run: the copy to the GPU overlaps)."""

    name: str
    train: Dataset
    test: Dataset
    num_classes: int
    make_model: Callable[[], nn.Module]
    # a training batch of a tensor data set, augmented: (inputs, each sample's seed) -> inputs
    augment: Callable[[torch.Tensor, np.ndarray], torch.Tensor] | None = None
    loader_workers: int = 0
    pin: bool = False
    _pool: object = field(default=None, init=False, repr=False)

    def batch(self, dataset: Dataset, indices: np.ndarray,
              seeds: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of the given samples, stacked into one batch. ``seeds``: each
        sample's augmentation seed (``WorkerStreams.seeds``), which makes a decoded batch a pure
        function of its draw whichever process decodes it."""
        if isinstance(dataset, TensorDataset):
            idx = torch.as_tensor(indices, dtype=torch.long)
            x = dataset.tensors[0][idx]
            if self.augment is not None and dataset is self.train and seeds is not None:
                x = self.augment(x, np.asarray(seeds))
            return x, dataset.tensors[1][idx]
        split = "train" if dataset is self.train else "test"
        jobs = [(split, int(i), None if seeds is None else int(k))
                for i, k in zip(indices, [None] * len(indices) if seeds is None else seeds,
                                strict=True)]
        if self.loader_workers > 0:
            items = self._loader().starmap(_decode, jobs, chunksize=max(1, len(jobs) // (
                4 * self.loader_workers)))
        else:
            _share({"train": self.train, "test": self.test})
            items = [_decode(*job) for job in jobs]
        x, y = torch.stack([x for x, _ in items]), torch.as_tensor([y for _, y in items])
        return (x.pin_memory(), y.pin_memory()) if self.pin else (x, y)

    def _loader(self):
        """The decoding processes, started once and stopped when this task is dropped, or at
        exit. Not forked from this process: a fork copies locks that its other threads (torch's,
        a logger's) hold, and a child that needs one waits forever; a fork server (a clean
        process forked from) where the platform has one, else fresh interpreters. The data
        sets (file lists and transforms) reach them pickled."""
        if self._pool is None:
            import multiprocessing
            import weakref

            methods = multiprocessing.get_all_start_methods()
            method = "forkserver" if "forkserver" in methods else "spawn"
            self._pool = multiprocessing.get_context(method).Pool(
                self.loader_workers, initializer=_start_loader,
                initargs=({"train": self.train, "test": self.test},))
            weakref.finalize(self, self._pool.terminate)
        return self._pool


def _mlp(classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, classes))


def _lenet(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, classes),
    )


def _group_norm(channels: int) -> nn.Module:
    return nn.GroupNorm(min(32, channels // 4), channels)


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions and a shortcut; where the block halves the resolution and doubles
    the channels, the shortcut subsamples and pads the new channels with zeros (He et al. 2016's
    option A, which adds no parameters)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), _group_norm(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), _group_norm(cout))
        self.stride, self.pad = stride, cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        short = x[:, :, ::self.stride, ::self.stride]
        if self.pad:
            short = nn.functional.pad(short, (0, 0, 0, 0, 0, self.pad))
        return torch.relu(self.body(x) + short)


def _resnet20(classes: int) -> nn.Module:
    """He et al. 2016's CIFAR ResNet-20: a 3x3 convolution, three stages of three basic blocks
    (16, 32, 64 channels at 32, 16, 8 pixels), global average pooling, a linear layer; 0.27 M
    parameters. GroupNorm in place of BatchNorm (module docstring)."""
    stages, cin = [], 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        stages += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1),
                   _BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), _group_norm(16), nn.ReLU(),
                         *stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def _mix(seeds: np.ndarray) -> np.ndarray:
    """64 well-mixed bits of each seed (SplitMix64's finaliser), vectorised: a sample's
    augmentation is a pure function of its seed, drawn for a whole batch at once."""
    z = seeds.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shift_and_flip(x: torch.Tensor, seeds: np.ndarray, pad: int = 4) -> torch.Tensor:
    """Each image shifted by up to ``pad`` pixels each way (a random crop of the image padded
    with ``pad`` pixels of the data set's mean, zero after normalisation) and mirrored with
    probability 1/2, drawn from its seed: He et al. 2016's CIFAR augmentation."""
    n, _, h, w = x.shape
    with np.errstate(over="ignore"):
        bits = _mix(seeds)
    span = np.uint64(2 * pad + 1)
    dy = torch.as_tensor((bits % span).astype(np.int64))
    dx = torch.as_tensor(((bits >> np.uint64(16)) % span).astype(np.int64))
    flip = torch.as_tensor(((bits >> np.uint64(32)) & np.uint64(1)).astype(bool))
    padded = nn.functional.pad(x, (pad, pad, pad, pad))
    rows = dy[:, None] + torch.arange(h)
    cols = torch.where(flip[:, None], torch.arange(w - 1, -1, -1), torch.arange(w)) + dx[:, None]
    picked = padded[torch.arange(n)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    return picked.permute(0, 3, 1, 2).contiguous()  # (n, h, w, channels) -> (n, channels, h, w)


def _resnet18(classes: int) -> nn.Module:
    from torchvision import models

    return models.resnet18(num_classes=classes, norm_layer=_group_norm)


# Each task's network, given its number of classes, and that number where the data does not say
# it (ImageNet's 1,000; an ImageNet-style folder has as many as it has class folders).
NETWORKS: dict[str, Callable[[int], nn.Module]] = {
    "digits": _mlp, "mnist": _lenet, "cifar10": _resnet20, "imagenet": _resnet18}
CLASSES = {"digits": 10, "mnist": 10, "cifar10": 10, "imagenet": 1000}
INPUT_SHAPES = {"digits": (64,), "mnist": (1, 28, 28), "cifar10": (3, 32, 32),
                "imagenet": (3, 224, 224)}  # one sample, as the network takes it


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of one gradient of ``model`` (as many as its trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def task_gradient_bytes(name: str) -> int:
    """Bytes of one gradient of task ``name``'s network, without its data: the network built on
    the meta device (shapes, no memory and no initialisation, which takes ResNet-18 seconds)."""
    with torch.device("meta"):
        return gradient_bytes(NETWORKS[name](CLASSES[name]))


def _digits() -> Task:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.as_tensor(x / 16.0, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    # A fixed split (not the run's seed): every run is scored on the same 360 test images.
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    test, train = perm[:360], perm[360:]
    return Task("digits", TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test]), 10,
                lambda: _mlp(10))


def _as_tensors(data: np.ndarray | torch.Tensor, targets, mean, std,
                channels_last: bool) -> TensorDataset:
    x = torch.as_tensor(np.asarray(data), dtype=torch.float32) / 255.0
    x = x.permute(0, 3, 1, 2) if channels_last else x.unsqueeze(1)
    mean = torch.tensor(mean).view(1, -1, 1, 1)
    std = torch.tensor(std).view(1, -1, 1, 1)
    return TensorDataset((x - mean) / std, torch.as_tensor(np.asarray(targets), dtype=torch.long))


MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
CIFAR10_FILES = ("batches.meta", *(f"data_batch_{k}" for k in range(1, 6)), "test_batch")


def _missing(path: Path, what: str, expected: tuple[str, ...], exc: Exception) -> UserError:
    """A data set that is not there, or not readable, said in bdsgd's terms: which of its
    ``expected`` files are absent, else why the reader refused them (torchvision's own message
    suggests download=True, which bdsgd never does)."""
    absent = [f for f in expected if not (path / f).exists()]
    if absent:
        why = f"{path} lacks {', '.join(absent[:3])}{' ...' if len(absent) > 3 else ''}"
    elif "download" in str(exc):  # torchvision's check of the files failed (its md5 check)
        why = "its files are corrupted: they fail the official release's checksums"
    else:
        why = f"unreadable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return UserError(str(path), "train.data_dir", f"{what} not found or unreadable: {why}; "
                     f"bdsgd downloads nothing: put the data set there first")


def _mnist(root: Path) -> Task:
    from torchvision.datasets import MNIST

    try:
        train, test = MNIST(root, train=True), MNIST(root, train=False)
    # A file with the wrong magic number or size fails the idx reader's asserts and checks.
    except (RuntimeError, OSError, AssertionError, TypeError, ValueError) as exc:
        raise _missing(root / "MNIST" / "raw", "MNIST", MNIST_FILES, exc) from None
    stats = ((0.1307,), (0.3081,))
    return Task("mnist", _as_tensors(train.data, train.targets, *stats, channels_last=False),
                _as_tensors(test.data, test.targets, *stats, channels_last=False), 10,
                lambda: _lenet(10))


def _cifar10(root: Path) -> Task:
    from torchvision.datasets import CIFAR10

    try:
        train, test = CIFAR10(root, train=True), CIFAR10(root, train=False)
    except (RuntimeError, OSError) as exc:
        raise _missing(root / "cifar-10-batches-py", "CIFAR-10", CIFAR10_FILES, exc) from None
    stats = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    return Task("cifar10", _as_tensors(train.data, train.targets, *stats, channels_last=True),
                _as_tensors(test.data, test.targets, *stats, channels_last=True), 10,
                lambda: _resnet20(10), augment=shift_and_flip)


def _imagenet(root: Path) -> Task:
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    normalize = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    train_tf = transforms.Compose([transforms.RandomResizedCrop(224),
                                   transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                   normalize])
    test_tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                  transforms.ToTensor(), normalize])
    base = root / "imagenet"
    try:
        train = ImageFolder(str(base / "train"), transform=train_tf)
        test = ImageFolder(str(base / "val"), transform=test_tf)
    except OSError as exc:
        raise _missing(base, "ImageNet-style folders train/ and val/", ("train", "val"),
                       exc) from None
    if train.classes != test.classes:
        raise UserError(str(base / "val"), "train.data_dir", "val/ has other classes than train/")
    classes = len(train.classes)
    return Task("imagenet", train, test, classes, lambda: _resnet18(classes))


def load_task(name: str, data_dir: str | Path, loader_workers: int = 0,
              pin: bool = False) -> Task:
    """The named task's data (train and test split) and model constructor; an image folder's
    samples decoded by ``loader_workers`` processes (``Task``)."""
    root = Path(data_dir)
    loaders = {"digits": lambda: _digits(), "mnist": lambda: _mnist(root),
               "cifar10": lambda: _cifar10(root), "imagenet": lambda: _imagenet(root)}
    if name not in loaders:
        raise UserError("--task", "task", f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    task = loaders[name]()
    task.loader_workers, task.pin = loader_workers, pin
    return task


class WorkerStreams:
    """The mini-batch sample indices of every worker at every iteration.

    Epoch e = t // K (K = batches per epoch) draws a permutation of the N training samples from
    the seed (seed, e); worker w's shard is every n-th of its first n * floor(N/n) entries, and
    its batch at iteration t is the (t mod K)-th block of B consecutive shard entries.
    """

    def __init__(self, n_samples: int, n_workers: int, batch_size: int, seed: int):
        self.n_samples, self.n, self.batch_size, self.seed = n_samples, n_workers, batch_size, seed
        self.shard = n_samples // n_workers
        self.per_epoch = self.shard // batch_size
        if self.per_epoch < 1:
            raise ValueError(f"{n_workers} workers x {batch_size} samples per worker exceed the "
                             f"{n_samples} training samples")
        self._epoch, self._table = -1, np.empty((0, n_workers), dtype=np.int64)

    def seeds(self, t: int, workers: np.ndarray) -> np.ndarray:
        """An augmentation seed for each sample of ``batch(t, workers)``: one per draw (the run's
        seed, then the draw's place in the stream: iteration, worker, position in its batch)."""
        workers = np.asarray(workers, dtype=np.int64)
        place = (t * self.n + workers[:, None]) * self.batch_size + np.arange(self.batch_size)
        return (self.seed << 40) + place.ravel()

    def batch(self, t: int, workers: np.ndarray) -> np.ndarray:
        """Indices of the given workers' mini-batches at iteration t, grouped by worker."""
        epoch, k = divmod(t, self.per_epoch)
        if epoch != self._epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_samples)
            self._epoch = epoch
            self._table = perm[: self.shard * self.n].reshape(self.shard, self.n)
        block = self._table[k * self.batch_size:(k + 1) * self.batch_size]
        return block[:, workers].T.ravel()
