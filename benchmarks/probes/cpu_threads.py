"""torch threads on CPU devices: ``local`` and ``device`` steps with each thread count, alternated
step by step so that every count sees the same load. Prints MXNet's GB/sec per gpu (median, min,
max) per mode and thread count (the evidence behind bandwidth.cputhreads).

    PYTHONPATH=$PWD python benchmarks/probes/cpu_threads.py 2 resnet 1,2 15
    PYTHONPATH=$PWD python benchmarks/probes/cpu_threads.py 2 lenet 1,2 200    # 1,28,28, 10 classes
"""

import statistics
import sys
import time

import torch

import networks
from bandwidth.hardware.devices import DeviceSet
from bandwidth.processes.group import LocalGroup
from bandwidth.measurement.session import Session


def main() -> None:
    n, net, threads, rounds = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    counts = [int(t) for t in threads.split(",")]
    small = net != "resnet"
    shapes = networks.get_shapes(net, image_shape=(1, 28, 28) if small else (3, 224, 224),
                                 num_classes=10 if small else 1000,
                                 num_layers=None if small else 50)
    nbytes = networks.num_elements(shapes) * 4
    sessions = {mode: Session(mode, shapes, DeviceSet("cpu", tuple(range(n))), list(range(n)),
                              LocalGroup(), dtype="float32", optimizer="none", seed=1,
                              chunk_mb=None, check=False, cpu_threads=counts[0])
                for mode in ("local", "device")}
    factor = 2 * (n - 1) / n
    times = {(m, t): [] for m in sessions for t in counts}
    for _ in range(rounds):
        for mode, session in sessions.items():
            for t in counts:
                torch.set_num_threads(t)
                session.step()                          # untimed: the count's first step
                start = time.perf_counter()
                session.step()
                times[(mode, t)].append(time.perf_counter() - start)
    for (mode, t), seconds in times.items():
        gbps = sorted(nbytes * factor / s / 1e9 for s in seconds)
        print(f"{mode:<7} {t} thread(s): median {statistics.median(gbps):.2f}, min {gbps[0]:.2f},"
              f" max {gbps[-1]:.2f} GB/sec per gpu")
    print("load average", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
