"""Where one GPU's local step spends its time: for a few buffer sizes and chunk counts, the host
time to enqueue a step and the whole step (median of 30), with the copies enqueued all-down-
then-all-up or interleaved (down c, up c). Prints GB/s (algbw) and the host share.

    PYTHONPATH=$PWD python benchmarks/probes/local_schedule.py
"""

import statistics
import time

import torch

from bandwidth.ceiling.host import duplex_host_gbps
from bandwidth.plan.layout import chunk_ranges


def step_fn(dev_in, dev_out, host, chunks, down, up, events, interleaved):
    def step():
        if interleaved:
            for c, (s, e) in enumerate(chunks):
                with torch.cuda.stream(down):
                    host[s:e].copy_(dev_in[s:e], non_blocking=True)
                events[c].record(down)
                up.wait_event(events[c])
                with torch.cuda.stream(up):
                    dev_out[s:e].copy_(host[s:e], non_blocking=True)
            return
        for c, (s, e) in enumerate(chunks):
            with torch.cuda.stream(down):
                host[s:e].copy_(dev_in[s:e], non_blocking=True)
            events[c].record(down)
        for c, (s, e) in enumerate(chunks):
            up.wait_event(events[c])
            with torch.cuda.stream(up):
                dev_out[s:e].copy_(host[s:e], non_blocking=True)
    return step


def main():
    print(f"duplex {duplex_host_gbps(0, 256 * 10**6):.2f} GB/s")
    down, up = torch.cuda.Stream(), torch.cuda.Stream()
    for mb in (16.84, 45.1, 77.36, 240.17):
        numel = int(mb * 1e6) // 4
        dev_in = torch.ones(numel, device="cuda")
        dev_out = torch.empty_like(dev_in)
        host = torch.empty(numel, pin_memory=True)
        for k in (1, 2, 4, 8, 16, 32):
            chunks = chunk_ranges(0, numel, -(-numel // k))
            events = [torch.cuda.Event() for _ in chunks]
            for interleaved in (False, True):
                step = step_fn(dev_in, dev_out, host, chunks, down, up, events, interleaved)
                hosts, totals = [], []
                for i in range(35):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    step()
                    t1 = time.perf_counter()
                    torch.cuda.synchronize()
                    t2 = time.perf_counter()
                    if i >= 5:
                        hosts.append(t1 - t0)
                        totals.append(t2 - t0)
                t = statistics.median(totals)
                print(f"{mb:7.2f} MB k={k:2d} {'interleaved' if interleaved else 'down-then-up'}: "
                      f"{numel * 4 / t / 1e9:6.2f} GB/s, step {t * 1e6:7.0f} us, host "
                      f"{statistics.median(hosts) * 1e6:6.0f} us", flush=True)


if __name__ == "__main__":
    main()
