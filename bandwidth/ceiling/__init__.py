"""Hardware ceilings of this host, which bound the kvstore modes.

    python -m bandwidth.ceiling [--gpus 0,1 | --cpus N] [-b 1M] [-e 1G] [-f 2] [--mb 256]
                                [--json FILE] [--skip nccl,p2p,...]
    python -m bandwidth.ceiling --gpus-check [--gpus 0,1] [--min-percent P] [--json G.json]

Prints, as a reader of cuda-samples' p2pBandwidthLatencyTest and of nccl-tests recognises them:
the unidirectional and bidirectional P2P bandwidth matrices with peer access disabled and enabled,
the P2P latency matrices, host<->device bandwidth per GPU (pinned and pageable, both directions),
the host's memory copy and summation rates, NCCL all-reduce / reduce-scatter / all-gather /
broadcast algbw and busbw over a size sweep, and the NVML link topology. On CPU devices: host
memory and Gloo collectives; the rest is ``n/a`` with its reason.

Programmatic use::

    from bandwidth.ceiling.suite import CeilingOptions, measure_ceilings
    ceilings = measure_ceilings(DeviceSet("cuda", (0, 1)), CeilingOptions())
    doc["ceilings"] = ceilings.to_dict()

Modules: ``timing`` (the protocol), ``p2p`` (+ ``unpeered``, its P2P=Disabled child), ``host``,
``collectives``, ``model`` (result tree, JSON), ``render`` (text), ``suite`` (measure_ceilings),
``cli``. ``p2p_copy_gbps`` and ``host_path`` are the single-host benchmark's ceilings.

What bounds the measured modes, beside this command: ``bounds`` (the ceiling each kvstore mode is
judged against, measured quickly in the same run), ``expect`` (what NVML says each link should
carry, ``--expect-links``). The distributed modes' ceilings (the host-to-host matrix,
``--network-ceiling``; the full-duplex link bound, ``--link-rate``) are bandwidth.links.

``network`` -- the host-to-host matrix, the distributed modes' ceiling, through torch.distributed
with Gloo over TCP. ``netrounds`` -- the host check in rounds (``--network --rounds``): rank 0
drives bandwidth.links.rounds' search, every pair of a round measures at once, and the slow host
and the slow path are named without the full matrix. ``gpucheck`` -- the GPUs of this host in
rounds (``--gpus-check``): every GPU pair both ways at once and each GPU's host link, judged by
bandwidth.links.gpurounds, so a slow GPU, GPU pair or host link is named.

May import: hardware, config.values (the sweep's sizes and flags' values), processes and
launch.contract (Gloo ranks on CPU devices, the host-to-host matrix's roles), the vocabulary
(``textformat``, ``thresholds`` and ``gates`` for its tables, thresholds and gate reports;
``files``). Not the stores, the measurement, the results, the report or the run.
"""
