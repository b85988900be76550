"""One measurement round of the transport section, on the mmpar found on PYTHONPATH.

``transport.py`` copies this file into a folder of its own and runs it there as a
script (so that neither ``tools/bench`` nor a baseline tree lands on ``sys.path``
by way of the script's folder, and so that DataLoader workers can import the
dataset class whatever the start method), with ``PYTHONPATH`` set to the tree
under test. Usage: ``python transport_child.py QUICK B [B ...]``, QUICK ``1`` or
``0``. It prints one JSON line: per batch size, the loader-only rates of the
round and the crossing figures of each repeat, plus the ``__file__`` of the
mmpar it measured.
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


def loader_rates(batch_size: int, batches: int, epochs: int) -> List[float]:
    """Batches/s of ``epochs`` timed epochs of a 2-worker loader, after one warm-up epoch."""
    dataset = SmallDetection(batch_size * batches)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=WORKERS,
        collate_fn=functools.partial(collate, samples_per_gpu=batch_size),
        persistent_workers=True,
        pin_memory=False,
    )
    rates = []
    for epoch in range(epochs + 1):
        n, start = 0, time.perf_counter()
        for _ in loader:
            n += 1
        if epoch:  # epoch 0 starts the workers
            rates.append(n / (time.perf_counter() - start))
    del loader  # shuts the persistent workers down before the crossing is timed
    return rates


def _producer(conn: Connection, batch_size: int, repeats: int) -> None:
    """The worker side: build, collate and pickle a fresh batch per repeat, in lockstep.

    A fresh batch each time because pickling moves each storage into shared memory
    once; pickling the same batch again would skip that cost.
    """
    dataset = SmallDetection(batch_size * repeats)
    for rep in range(repeats):
        t0 = time.perf_counter()
        samples = [dataset[rep * batch_size + i] for i in range(batch_size)]
        t1 = time.perf_counter()
        batch = collate(samples, samples_per_gpu=batch_size)
        t2 = time.perf_counter()
        payload = ForkingPickler.dumps(batch)
        t3 = time.perf_counter()
        conn.send((t1 - t0, t2 - t1, t2, t3 - t2, len(payload)))
        conn.send_bytes(payload)
        conn.recv()  # the consumer is done with this batch
        del batch, payload
    conn.close()


def crossing(batch_size: int, repeats: int) -> List[Dict[str, float]]:
    """Per repeat: the producer's samples/collate/pickle times, this process's unpickle.

    The first repeat is a warm-up and is dropped.
    """
    ours, theirs = multiprocessing.Pipe()
    proc = multiprocessing.Process(target=_producer, args=(theirs, batch_size, repeats + 1))
    proc.start()
    theirs.close()
    out = []
    for rep in range(repeats + 1):
        samples_s, collate_s, pickle_start, pickle_s, size = ours.recv()
        payload = ours.recv_bytes()
        t0 = time.perf_counter()
        batch = pickle.loads(payload)
        t1 = time.perf_counter()
        tensors, storages = count_tensors(batch)
        del batch
        ours.send(None)
        if rep:
            out.append(
                {
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
            )
    proc.join(60)
    if proc.exitcode != 0:
        raise RuntimeError(f"transport producer exited with {proc.exitcode}")
    return out


def main(argv: List[str]) -> None:
    quick = argv[0] == "1"
    batch_sizes = [int(b) for b in argv[1:]]
    batches, epochs, repeats = (2, 1, 3) if quick else (10, 3, 15)
    torch.set_num_threads(1)
    out: Dict[str, Any] = {"__file__": mmpar.__file__}
    for b in batch_sizes:
        out[str(b)] = {
            "loader": loader_rates(b, batches, epochs),
            "crossing": crossing(b, repeats),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
