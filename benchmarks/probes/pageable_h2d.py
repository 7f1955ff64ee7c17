import time, torch
n = 256 * 10**6
for dtype in (torch.uint8, torch.float32):
    host = torch.ones(n // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    dev = torch.empty_like(host, device="cuda:0")
    for label, ctx in (("default stream", None), ("side stream", torch.cuda.Stream())):
        times = []
        for i in range(6):
            torch.cuda.synchronize()
            t = time.perf_counter()
            if ctx is None:
                dev.copy_(host)
            else:
                with torch.cuda.stream(ctx):
                    dev.copy_(host)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        print(f"pageable H2D {dtype} {label}: {n / sorted(times[1:])[2] / 1e9:.1f} GB/s")
