"""One process's part of a measurement: its replicas, the mode on them, and the error check.

With ``launch="graph"`` (a graph-capable mode on GPUs) the mode's step is captured once at set-up
as a CUDA graph, and every step replays it: the host issues one launch per step instead of every
copy, kernel and collective. With ``launch="auto"`` (the default there) the step is captured too,
then a few untimed trial steps of each kind decide which one the run uses: the graph, unless the
eager step is clearly faster (on one H100 the graph of two replicas sharing the GPU ran up to 4
times faster than the eager step below ~100 MB and 0.1-5.5 % faster from ~200 MB up;
BENCHMARKS.md). A
mode whose ``auto_graph`` is False (``local``) runs eager under auto.
Every process of a run takes the same decision (the slowest rank's times). The error check is the
same either way: every step's outputs.

A graph is replayed ``graph_steps`` times per timed iteration, back to back, and the iteration's
time is divided by that count. One replay of a small network's step takes tens of microseconds, of
which the host's launch and its wake-up after the synchronisation were 6-25 us and moved 1.4-3.1 x
from run to run on an H100 host (BENCHMARKS.md, 2026-11-24): a figure that the host's wake-up sets.
Replays queued back to back keep the GPU busy while the host launches the next, so the host's share
shrinks to one launch and one wake-up per iteration. The replays take turns over a few sets of
buffers (the replicas' gradients and outputs and the mode's own buffers, with a graph captured on
each): one set where its buffers hold ``GRAPH_L2_FACTOR`` times the GPU's L2 cache, else enough
sets that the buffers of the others between two turns of one set hold that much, so that no step
finds its operands in the cache where an earlier step left them (16.8 MB of mobilenet fit in an
H100's 50 MB): the figure stays one of memory and links, not of the cache. Few sets rather than one
per replay: the same buffers come back every few steps, as a training step's do. A mode whose step
consumes what its untimed ``prepare`` wrote (``prepared_steps``: ``nccl`` reduces a bucket in
place) gets a set per replay. ``graph_steps=None`` ("auto") chooses the count from a few untimed
replays: enough for an iteration of ``GRAPH_ITERATION_S``, at most ``GRAPH_MAX_STEPS``, a whole
number of turns over the sets; the sets take at most ``GRAPH_MEMORY_SHARE`` of the free GPU memory,
and every process takes the smallest counts. Every set's outputs are checked after every iteration.

A schedule other than flat (``schedule``) follows the same launch rule with one CUDA graph per
part (bandwidth.schedules.graphs.PartGraphs, its ``replay`` one step), one step per timed
iteration (one set of buffers); ``fsdp``'s sharded parts and modes that cannot capture run eager.
"""

from __future__ import annotations

import logging
import math
import statistics
import time

import torch

from bandwidth.arrays import optimizers
from bandwidth.arrays.data import Reference, fill_gradient
from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.arrays.layout import TORCH_DTYPES, Replica
from bandwidth.hardware import cputhreads
from bandwidth.hardware.devices import DeviceSet
from bandwidth.plan.launching import launch_of
from bandwidth.schedules.runner import ScheduledStore, scheduled_layout
from bandwidth.stores.registry import KVSTORES

log = logging.getLogger(__name__)


class Session:
    """Buffers for the replicas ``indices`` of ``devices`` (all of them in a single-process run,
    one in a run of one process per device) and the kvstore mode that exchanges them."""

    def __init__(self, kv_store: str, shapes, devices: DeviceSet, indices: list[int], group, *,
                 dtype: str, optimizer: str, seed: int, chunk_mb: float | None,
                 cpu_threads: int | None = None, check: bool = True, cluster=None,
                 first_replica: int = 0, replicas: int | None = None, launch: str = "eager",
                 owners: str = "balanced", graph_steps: int | None = 1, schedule=None,
                 compute=None, on_event=None):
        """``first_replica`` and ``replicas``: this process's devices are replicas
        first_replica + index of ``replicas`` in the whole job (default: the devices here).
        ``launch``: "graph" or "eager" (see ``launch_of``); ``owners``: the placement rule of
        modes that take one (``Traits.takes_owners``); ``graph_steps``: replays per timed
        iteration with the graph (module docstring; None: auto). ``schedule``: a
        bandwidth.schedules Schedule other than flat (None: the mode's one flat step), run by
        ``runner.ScheduledStore`` with ``compute`` and ``on_event`` (see there); its "graph" is
        one CUDA graph per part (schedules.graphs.PartGraphs), one step per timed iteration
        (``graph_steps`` is 1)."""
        store_cls = KVSTORES[kv_store]
        self.store_cls = store_cls
        if schedule is not None:
            graph_steps = 1       # a scheduled step: one step (its parts' replays) per iteration
        self.threads_before = torch.get_num_threads()      # restored at close on CPU devices
        self.devices = devices
        self.n = replicas or devices.n
        self.seed = seed
        self.group = group
        rule = {"owners": owners} if store_cls.traits.takes_owners else {}
        if schedule is None:
            self.layout = store_cls.make_layout(shapes, devices.n, cluster, **rule)
        else:
            self.layout, spans = scheduled_layout(schedule, store_cls, devices.n, cluster, **rule)
        self.optimizer = optimizers.make(optimizer)
        numel = self.layout.numel
        chunk_elements = (None if chunk_mb is None        # None: each mode's own default
                          else max(1, int(chunk_mb * 1e6) // DTYPE_BYTES[dtype]))
        extra = ({"cluster": cluster} if store_cls.traits.distributed and cluster is not None
                 else {})
        extra.update(rule)

        # A parameter-server worker with one CPU device pulls into its gradients, which
        # ``prepare`` refills before each step (Traits.pulls_into_gradients).
        self.refill = (store_cls.traits.pulls_into_gradients and schedule is None
                       and len(indices) == 1 and not devices.is_cuda)
        self._pulled = False        # a step has pulled into the gradients since they were filled
        # A step consumes what ``prepare`` wrote (Traits.prepared_steps); a part's store of a
        # scheduled step may (nccl's bucket): one step per prepare.
        self.prepared_steps = schedule is not None or store_cls.traits.prepared_steps
        self.data_threads = cputhreads.data_threads(
            devices.is_cuda, cpu_threads,
            store_cls.traits.distributed or store_cls.traits.process_per_device)

        def new_set():
            """One set of buffers: every replica's gradients and outputs, and a store on them."""
            replicas_of_set = []
            for index in indices:
                device = devices.torch_device(index)
                grads = torch.empty(numel, dtype=TORCH_DTYPES[dtype], device=device)
                with cputhreads.threads(self.data_threads):
                    fill_gradient(grads, rank=first_replica + index, seed=seed)
                outputs = grads if self.refill else torch.zeros_like(grads)
                replicas_of_set.append(Replica(first_replica + index, device, grads, outputs))
            if schedule is not None:
                return replicas_of_set, ScheduledStore(
                    schedule, store_cls, spans, replicas_of_set, self.optimizer, group,
                    chunk_elements, cpu_threads, compute=compute, on_event=on_event, **extra)
            return replicas_of_set, store_cls(replicas_of_set, self.layout, self.optimizer, group,
                                              chunk_elements, cpu_threads, **extra)

        self._new_set = new_set
        allocated = _allocated(devices)
        self.replicas, self.store = new_set()
        self.set_bytes = _allocated(devices) - allocated   # GPU memory of one set
        # Further sets, each with its graph (graph_steps > 1): [(replicas, store, graph)].
        self.more_sets: list[tuple[list[Replica], object, object]] = []
        self.turns = 1                          # replays of every set per iteration
        self.graph_note = None
        with cputhreads.threads(self.data_threads):
            self.references = self._expected_sums(keep=cluster is None) if check else {}
        self.steps = 0
        self.synchronize()
        # CPU devices: the torch threads of the steps (bandwidth.hardware.cputhreads).
        self.threads_note = None
        self.cpu_threads_used = None      # CPU devices: the torch threads the steps run with
        if not devices.is_cuda:
            self._set_cpu_threads(cpu_threads)
            self.cpu_threads_used = torch.get_num_threads()
        self._start_launch(launch_of(store_cls, devices, launch, optimizer, schedule),
                           graph_steps)
        self._new_set = None     # the closure refers to self: no cycle to outlive the session
        self.synchronize()

    def _expected_sums(self, keep: bool) -> dict:
        """The exact expected sum, once per distinct device (CPU devices share one); ``keep``
        False: a distributed worker computes it chunk by chunk at each check, so that its memory
        stays within 2 x the network beyond its replicas (issue 27)."""
        references = {}
        for replica in self.replicas:
            if replica.device not in references:
                references[replica.device] = Reference(self.layout.numel, self.n, self.seed,
                                                       replica.device, keep=keep)
        return references

    def _start_launch(self, launch: str, graph_steps: int | None) -> None:
        """Issue the steps as ``launch`` says (``launch_of``): "graph" captures the step once,
        "auto" too and then lets the trial steps of ``_choose_launch`` decide; with a graph, the
        further sets of buffers and replays per iteration (``_add_sets``)."""
        self.launch = launch
        self.graph, self.graph_failure, self.launch_trial = None, None, None
        auto = self.launch == "auto"
        if auto:
            self.launch = "graph"
        if self.launch == "graph":
            try:
                self.graph = self.store.capture()
            except RuntimeError as exc:
                # A step this CUDA build cannot capture still measures, eagerly; the summary says
                # so (notes) and the result's launch reads "eager".
                self.launch = "eager"
                self.graph_failure = f"graph capture failed, so steps run eager: {exc}".split(
                    "\n")[0]
                log.warning(self.graph_failure)
                self.synchronize()
        graph_s = None
        if auto and self.graph is not None:
            graph_s = self._choose_launch()
        if self.graph is not None:
            self._add_sets(graph_steps, graph_s)

    @property
    def graph_steps(self) -> int:
        """Steps per timed iteration: graph replays, taking turns over the sets of buffers."""
        return self.turns * (1 + len(self.more_sets))

    def _add_sets(self, wanted: int | None, graph_s: float | None) -> None:
        """Sets of buffers and replays per iteration (module docstring): ``wanted`` replays, or
        (None) as many as an iteration of GRAPH_ITERATION_S needs, judged from ``graph_s`` (one
        replay's median time) or a few untimed replays, within GRAPH_MAX_STEPS; the sets that
        keep the cache cold, within GRAPH_MEMORY_SHARE of the free memory. The replays are a
        whole number of turns over the sets. Every process takes the smallest counts."""
        if wanted is None:
            if graph_s is None:
                graph_s = self._median_seconds(self.graph.replay)
            wanted = min(GRAPH_MAX_STEPS, max(1, math.ceil(GRAPH_ITERATION_S / max(graph_s,
                                                                                  1e-9))))
            how = (f"graph steps auto: {{steps}} replays per timed iteration, taking turns over "
                   f"{{sets}} of buffers (one replay took {1e6 * graph_s:.1f} us; "
                   "--graph-steps N to choose)")
            exact = False
        else:
            how = "graph steps: {steps} replays per timed iteration over {sets} of buffers"
            exact = True
        gpus = _gpus(self.replicas)
        sets = 1
        if wanted > 1 and gpus and self.set_bytes > 0:
            l2 = max(torch.cuda.get_device_properties(d).L2_cache_size for d in gpus)
            free = min(torch.cuda.mem_get_info(d)[0] for d in gpus)
            most = 1 + int(GRAPH_MEMORY_SHARE * free // self.set_bytes)
            cache = GRAPH_L2_FACTOR * l2
            sets = min(wanted, most,
                       1 if self.set_bytes >= cache else 1 + math.ceil(cache / self.set_bytes))
            if exact:    # N replays exactly: a count of sets that divides N
                sets = min([d for d in range(sets, wanted + 1) if wanted % d == 0 and d <= most]
                           or [max(d for d in range(1, sets + 1) if wanted % d == 0)])
            if self.prepared_steps:    # each replay on a set prepared for it
                sets = min(wanted, most)
        sets = int(-self.group.max(-float(max(1, sets))))
        turns = 1 if self.prepared_steps else math.ceil(wanted / sets)
        turns = int(-self.group.max(-float(turns)))
        if self.optimizer is not None:
            self._zero_weights()     # after the trial replays, as __init__ left them
        for _ in range(sets - 1):
            replicas, store = self._new_set()
            self.more_sets.append((replicas, store, store.capture()))
        self.turns = turns
        if self.graph_steps > 1:
            self.graph_note = how.format(steps=self.graph_steps,
                                         sets=f"{sets} set{'s' if sets > 1 else ''}")

    def _median_seconds(self, issue) -> float:
        """The slowest rank's median time of TRIAL_STEPS untimed steps issued by ``issue`` (after
        one more to warm up), each from a synchronised start to its end."""
        times = []
        for _ in range(TRIAL_STEPS + 1):
            self.store.prepare()
            self.synchronize()
            self.group.barrier()
            start = time.perf_counter()
            issue()
            self.synchronize()
            times.append(time.perf_counter() - start)
        return self.group.max(statistics.median(times[1:]))

    def _choose_launch(self) -> float:
        """``launch="auto"``: time TRIAL_STEPS untimed steps each way (after one of each to warm
        up) and keep the graph unless the eager step's median is EAGER_MARGIN faster. The steps
        leave the weights as ``__init__`` did, so the error check still counts from step 1.
        Returns the graph's median."""
        graph_s = self._median_seconds(self.graph.replay)
        eager_s = self._median_seconds(self.store.step)
        if self.optimizer is not None:
            for replica in self.replicas:
                replica.outputs.zero_()
        if eager_s < (1 - EAGER_MARGIN) * graph_s:
            self.launch, self.graph = "eager", None
        self.launch_trial = (f"launch auto: {TRIAL_STEPS} trial steps each way, median graph "
                             f"{1e6 * graph_s:.1f} us, eager {1e6 * eager_s:.1f} us: "
                             f"{self.launch} (--launch graph|eager to choose)")
        return graph_s

    def _set_cpu_threads(self, cpu_threads: int | None) -> None:
        """--cpu-threads N, or (None) the trial of bandwidth.hardware.cputhreads where this process steps
        several replicas on its own (not a mode whose steps talk to other processes); the trial's
        steps leave the weights as ``__init__`` did."""
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
            self.threads_note = f"CPU threads: {cpu_threads} (--cpu-threads)"
            return
        traits = self.store_cls.traits
        if len(self.replicas) < 2 or traits.distributed or traits.process_per_device:
            return

        def trial_step() -> None:
            self.store.prepare()
            self.store.step()

        _, self.threads_note = cputhreads.choose(trial_step, len(self.replicas))
        if self.optimizer is not None:
            self._zero_weights()

    def _zero_weights(self) -> None:
        """With an optimizer: the weights back to zero, as the store's ``__init__`` left them,
        after untimed trial steps (KVStore.weights)."""
        for weights in self.store.weights:
            weights.zero_()

    def prepare(self) -> None:
        if self._pulled:               # the last step's pull overwrote the gradients
            with cputhreads.threads(self.data_threads):
                for replica in self.replicas:
                    fill_gradient(replica.grads, rank=replica.rank, seed=self.seed)
            self._pulled = False
        self.store.prepare()
        for _, store, _ in self.more_sets:
            store.prepare()

    def step(self, graph=None) -> None:
        """One timed iteration: ``turns`` steps on every set of buffers, the sets taking turns;
        ``graph``: one step replayed from it instead (a scheduled step with its compute on this
        session's one set of buffers, bandwidth.compute.stepgraph)."""
        if graph is not None:
            graph.replay()
            self.steps += 1
            return
        if self.graph is not None:
            for _ in range(self.turns):
                self.graph.replay()
                for _, _, graph in self.more_sets:
                    graph.replay()
        else:
            self.store.step()
        self.steps += self.turns
        self._pulled = self.refill

    def synchronize(self) -> None:
        # Each GPU once (replicas may share one: --gpus 0,0), in the order of the replicas.
        for device in dict.fromkeys(r.device for r in self.replicas if r.device.type == "cuda"):
            torch.cuda.synchronize(device)

    def error(self) -> float:
        with cputhreads.threads(self.data_threads):
            return self._error()

    def _error(self) -> float:
        settle = getattr(self.store, "settle", None)
        if settle is not None:              # fsdp: the reduced shards gathered, untimed
            settle()
        wrong = 0.0
        total = 0.0
        sets = [self.replicas] + [replicas for replicas, _, _ in self.more_sets]
        # The pull overwrote the gradients: refilled here, chunk by chunk as each is checked,
        # rather than in the next prepare (the test data's hash computed once for both).
        refill = self._pulled and not self.more_sets
        for replica in (r for replicas in sets for r in replicas):
            w, total = self.references[replica.device].error_terms(
                [replica.outputs], self.optimizer, self.steps,
                refill_rank=replica.rank if refill else None)
            wrong += w
        if refill:
            self._pulled = False
        wrong = self.group.sum(wrong) / len(sets)
        return wrong / total if total else 0.0

    def close(self) -> None:
        self.synchronize()
        self.graph = None
        self._new_set = None
        for _, store, _ in self.more_sets:
            store.close()
        self.more_sets.clear()
        self.store.close()
        self.replicas.clear()
        self.references.clear()
        if not self.devices.is_cuda:
            torch.set_num_threads(self.threads_before)


# launch="auto": untimed trial steps each way, and how much faster eager must be to be chosen.
TRIAL_STEPS = 5
EAGER_MARGIN = 0.03

# graph_steps (module docstring): the time a timed iteration of replays should take (auto), the
# most replays (auto), how many L2 caches' worth of the other sets' buffers pass between two turns
# of one set, and the share of the free GPU memory the further sets may take.
GRAPH_ITERATION_S = 0.004
GRAPH_MAX_STEPS = 64
GRAPH_L2_FACTOR = 4.0
GRAPH_MEMORY_SHARE = 0.4


def _gpus(replicas) -> list:
    return list(dict.fromkeys(r.device for r in replicas if r.device.type == "cuda"))


def _allocated(devices: DeviceSet) -> int:
    """Bytes torch has allocated on the GPUs of ``devices`` (0 on CPU devices)."""
    if not devices.is_cuda:
        return 0
    return sum(torch.cuda.memory_allocated(gpu) for gpu in set(devices.ids))
