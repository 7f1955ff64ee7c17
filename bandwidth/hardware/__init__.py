"""Facts about this machine and the few device operations everything shares: which devices take
part (``devices``), their links as NVML reports them (``topology``), versions and the hardware
fingerprint (``environment``), copies between GPUs without torch's fences (``rawcopy``),
whether a GPU is busy before we measure (``busy``), and how many torch threads the steps on
CPU devices run with (``cputhreads``).

May import only the vocabulary: every stage may read hardware facts.
"""
