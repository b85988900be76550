"""The transport section's measuring process, on the mmpar found on PYTHONPATH.

``transport.py`` copies this file into a folder of its own and runs it there as a
script (so that neither ``tools/bench`` nor a baseline tree lands on ``sys.path``
by way of the script's folder, and so that DataLoader workers can import the
dataset class whatever the start method), with ``PYTHONPATH`` set to the tree
under test: ``python transport_child.py SAMPLES_PER_EPOCH B [B ...]``.

It starts a 2-worker loader per batch size and a producer process, runs one
untimed epoch and crossing of each, prints ``{"__file__": <mmpar's>}`` and then
answers one command per stdin line with one JSON line, so that the section can
alternate two trees measurement by measurement:

* ``loader B``: ``{"rate": batches/s}`` of one epoch;
* ``cross B``: the figures of one fresh batch crossing from the producer.

End of input (or ``quit``) shuts the workers and the producer down.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import pickle
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict, List, Set, Tuple

import numpy as np
import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reducers on ForkingPickler)
from torch.utils.data import DataLoader, Dataset

import mmpar
from mmpar import DataContainer, collate

WORKERS = 2


class SmallDetection(Dataset):
    """Small detection samples, each built from its own seeded generator.

    Args:
        length: Number of samples.
        seed: Added to the index to seed each sample's generator.
    """

    def __init__(self, length: int, seed: int = 0) -> None:
        self.length = length
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, DataContainer]:
        g = torch.Generator().manual_seed(self.seed + index)

        def rint(lo: int, hi: int) -> int:
            return int(torch.randint(lo, hi + 1, (1,), generator=g))

        h, w, k = rint(40, 64), rint(40, 64), rint(1, 20)
        img = torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
        metas = {
            "filename": f"images/{index:08d}.jpg",
            "ori_shape": (h, w, 3),
            "img_shape": (h, w, 3),
            "pad_shape": (h, w, 3),
            "scale_factor": np.ones(4, dtype=np.float32),
            "flip": bool(index % 2),
        }
        return {
            "img": DataContainer(img, stack=True, size_divisor=32),
            "gt_bboxes": DataContainer(torch.rand(k, 4, generator=g) * 48),
            "gt_labels": DataContainer(torch.randint(0, 80, (k,), generator=g)),
            "img_metas": DataContainer(metas, cpu_only=True),
        }


def count_tensors(obj: Any) -> Tuple[int, int]:
    """Tensors in ``obj`` and the distinct storages they live in.

    Walks containers, mappings, sequences and plain objects' attributes, so that a
    batch made of another structure than today's is still counted.
    """
    tensors: List[torch.Tensor] = []
    seen: Set[int] = set()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
        elif id(x) in seen or isinstance(x, (str, bytes, np.ndarray, int, float, bool)):
            return
        elif isinstance(x, DataContainer):
            seen.add(id(x))
            walk(x.data)
        elif isinstance(x, dict):
            seen.add(id(x))
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            seen.add(id(x))
            for v in x:
                walk(v)
        elif hasattr(x, "__dict__"):
            seen.add(id(x))
            walk(vars(x))

    walk(obj)
    storages = {t.untyped_storage().data_ptr() for t in tensors if t.numel()}
    return len(tensors), len(storages)


def make_loader(batch_size: int, samples: int) -> DataLoader:
    """The loader under test: ``samples // batch_size`` batches an epoch."""
    return DataLoader(
        SmallDetection(samples // batch_size * batch_size),
        batch_size=batch_size,
        num_workers=WORKERS,
        collate_fn=functools.partial(collate, samples_per_gpu=batch_size),
        persistent_workers=True,
        pin_memory=False,
    )


def epoch_rate(loader: DataLoader) -> float:
    """Batches/s of one epoch that touches nothing."""
    n, start = 0, time.perf_counter()
    for _ in loader:
        n += 1
    return n / (time.perf_counter() - start)


def _producer(conn: Connection) -> None:
    """The worker side: per requested batch size, build, collate and pickle a fresh batch.

    A fresh batch each time because pickling moves each storage into shared memory
    once; pickling the same batch again would skip that cost. ``None`` ends it.
    """
    dataset = SmallDetection(1 << 30)
    start = 0
    while True:
        batch_size = conn.recv()
        if batch_size is None:
            break
        t0 = time.perf_counter()
        samples = [dataset[start + i] for i in range(batch_size)]
        t1 = time.perf_counter()
        batch = collate(samples, samples_per_gpu=batch_size)
        t2 = time.perf_counter()
        payload = ForkingPickler.dumps(batch)
        t3 = time.perf_counter()
        conn.send((t1 - t0, t2 - t1, t2, t3 - t2, len(payload)))
        conn.send_bytes(payload)
        conn.recv()  # the consumer is done with this batch: in lockstep
        del batch, payload
        start += batch_size
    conn.close()


def cross(conn: Connection, batch_size: int) -> Dict[str, float]:
    """One crossing: the producer's samples/collate/pickle times, this process's unpickle."""
    conn.send(batch_size)
    samples_s, collate_s, pickle_start, pickle_s, size = conn.recv()
    payload = conn.recv_bytes()
    t0 = time.perf_counter()
    batch = pickle.loads(payload)
    t1 = time.perf_counter()
    tensors, storages = count_tensors(batch)
    del batch
    conn.send(None)
    return {
        "samples": samples_s,
        "collate": collate_s,
        "pickle": pickle_s,
        "unpickle": t1 - t0,
        # perf_counter is one system-wide monotonic clock on Linux.
        "end_to_end": t1 - pickle_start,
        "payload": float(size),
        "tensors": float(tensors),
        "storages": float(storages),
    }


def main(argv: List[str]) -> None:
    samples, batch_sizes = int(argv[0]), [int(b) for b in argv[1:]]
    torch.set_num_threads(1)
    loaders = {b: make_loader(b, samples) for b in batch_sizes}
    ours, theirs = multiprocessing.Pipe()
    producer = multiprocessing.Process(target=_producer, args=(theirs,), daemon=True)
    producer.start()
    theirs.close()
    for b in batch_sizes:  # warm-up: starts the workers, first allocations
        epoch_rate(loaders[b])
        cross(ours, b)
    print(json.dumps({"__file__": mmpar.__file__}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        kind, b = line.split()
        result = {"rate": epoch_rate(loaders[int(b)])} if kind == "loader" else cross(ours, int(b))
        print(json.dumps(result), flush=True)
    ours.send(None)
    producer.join(60)
    del loaders  # shuts the persistent workers down


if __name__ == "__main__":
    main(sys.argv[1:])
