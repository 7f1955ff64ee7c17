"""Facts about this machine and the few device operations everything shares: which devices take
part (``devices``), their links as NVML reports them (``topology``), versions and the hardware
fingerprint (``environment``), copies between GPUs without torch's fences (``rawcopy``),
whether a GPU is busy before we measure (``busy``), how many torch threads the steps on CPU
devices run with (``cputhreads``), the counters of a host's links and cores (``linkcounters``)
and what they say over a run's hosts (``linksummary``).

``memory`` -- a process's peak resident set and the job's memory figures.

May import only the vocabulary: every stage may read hardware facts.
"""
